package host

import (
	"context"
	"net"
	"sync"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/digitalocean/go-libvirt"
)

const (
	errCallTimeout = "libvirt call to %s did not finish in time; it was abandoned, the connection stays open for other calls"
	errNotSent     = "libvirt call to %s not sent: its context has ended"
	errConnLost    = "libvirt connection to %s was lost"
	errDialFrom    = "cannot dial %s %s from libvirt host %s"
)

// Conn is a handle on a pooled connection. It is cheap, safe for concurrent
// use, and stays valid after drops and idle closes: the next call reopens.
type Conn struct {
	conns *Connections
	key   string
	cfg   Config
}

// Address names the host: user@host:port or unix:SOCKET.
func (c *Conn) Address() string { return c.cfg.Address() }

// acquire returns a healthy session and a func to release it.
func (c *Conn) acquire(ctx context.Context) (*session, func(), error) {
	for {
		e, err := c.conns.entry(c.key, c.cfg)
		if err != nil {
			return nil, nil, errors.Wrapf(err, errConnect, c.cfg.Address())
		}
		s, err := e.acquire(ctx, c.conns)
		if errors.Is(err, errEvicted) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		return s, sync.OnceFunc(e.release), nil
	}
}

// Do calls fn with the libvirt client, reopening the connection first if it dropped.
//
// go-libvirt's calls take no context, and the connection is shared by every caller of the
// host, so a call that outlives ctx is abandoned, not cut: Do returns an error wrapping
// ctx.Err() at once, and fn goes on in the background until its reply comes. Nothing is sent
// for a ctx that has ended already. To tell a stuck call (a QEMU that does not answer one
// domain's monitor) from a stuck connection, an abandoned call makes Do probe the connection
// with a cheap call: if that is answered within the probe timeout the connection stays up for
// everyone; if not, it is torn down (and every call on it fails). At most
// maxAbandoned abandoned calls may be outstanding on one connection; beyond that it is
// replaced. fn must not keep l.
func (c *Conn) Do(ctx context.Context, fn func(l *libvirt.Libvirt) error) error {
	if err := ctx.Err(); err != nil {
		return errors.Wrapf(err, errNotSent, c.cfg.Address())
	}
	s, release, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		release()
		return errors.Wrapf(err, errNotSent, c.cfg.Address())
	}
	errc := make(chan error, 1)
	go func() {
		// The call counts as use of the connection until it returns, abandoned or not.
		defer release()
		errc <- fn(s.lv)
	}()
	select {
	case err := <-errc:
		if err != nil && !s.healthy() {
			// The call failed because the connection dropped; the next
			// call reopens it.
			return errors.Wrapf(err, errConnLost, c.cfg.Address())
		}
		return err
	case <-ctx.Done():
		s.abandoned(errc, c.conns.probeTimeout) //nolint:contextcheck // the probe outlives the abandoned call's context
		return errors.Wrapf(ctx.Err(), errCallTimeout, c.cfg.Address())
	}
}

// DialContext dials addr from the host, through the SSH connection (or
// locally for the Unix transport), e.g. to probe a guest's port from the
// host side. The connection counts as use of the pooled connection until
// it is closed.
func (c *Conn) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	s, release, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	var nc net.Conn
	if s.ssh == nil {
		var d net.Dialer
		nc, err = d.DialContext(ctx, network, addr)
	} else {
		nc, err = s.ssh.client.DialContext(ctx, network, addr)
	}
	if err != nil {
		release()
		return nil, errors.Wrapf(err, errDialFrom, network, addr, c.cfg.Address())
	}
	return &trackedConn{Conn: nc, release: release}, nil
}

// trackedConn releases its pool entry when closed.
type trackedConn struct {
	net.Conn
	release func()
}

// Close closes the connection and releases the pooled connection.
func (t *trackedConn) Close() error {
	err := t.Conn.Close()
	t.release()
	return err
}
