package libvirt

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// Defaults of the connection Download opens.
const (
	DefaultSocket = "/var/run/libvirt/libvirt-sock"
	DefaultURI    = "qemu:///system"
)

// Dialer opens connections from the host; *host.Conn is one. A Client whose
// Conn is a Dialer downloads over a connection of its own (see Download).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// An Option configures a Client.
type Option func(*Client)

// WithSocket sets the host's libvirt socket that Download dials (the
// ProviderConfig's socket), default DefaultSocket.
func WithSocket(path string) Option { return func(c *Client) { c.socket = path } }

// WithKind labels the calls the Client counts with kind (the managed resource kind whose
// reconcile makes them) when their context carries none (metrics.WithKind).
func WithKind(kind string) Option { return func(c *Client) { c.kind = kind } }

// withCounters replaces how the Client counts its calls and opened connections (tests).
func withCounters(call func(ctx context.Context, op string), opened func(host string)) Option {
	return func(c *Client) { c.count, c.opened = call, opened }
}

// WithURI sets the libvirt URI that Download opens, default DefaultURI.
func WithURI(uri string) Option { return func(c *Client) { c.uri = uri } }

// Download writes length bytes of a volume, from offset, to w; length 0
// means to the end. Use it for small volumes.
//
// libvirt 9.0 may send a download's first data packets before the reply to
// the call (measured: about one download in 30). go-libvirt then takes a data
// packet for the reply, drops data, and can deadlock its receive loop, which
// hangs every call sharing the connection. So, when the Client's Conn is a
// Dialer, Download opens a libvirt connection of its own through it, puts
// the stream packets that overtake their call's reply back behind it, and
// closes the connection afterwards.
func (c *Client) Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error {
	d, ok := c.conn.(Dialer)
	if !ok {
		err := c.do(ctx, func(l rpc) error { return download(l, pool, name, w, offset, length) })
		return errors.Wrapf(err, errDownloadVol, name, pool, c.conn.Address())
	}
	err := c.downloadOwnConn(ctx, d, pool, name, w, offset, length)
	return errors.Wrapf(err, errDownloadVol, name, pool, c.conn.Address())
}

func download(l rpc, pool, name string, w io.Writer, offset, length uint64) error {
	sp, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		return err
	}
	sv, err := l.StorageVolLookupByName(sp, name)
	if err != nil {
		return err
	}
	return l.StorageVolDownload(sv, w, offset, length, 0)
}

func (c *Client) downloadOwnConn(ctx context.Context, d Dialer, pool, name string, w io.Writer, offset, length uint64) error {
	return c.ownConn(ctx, d, 0, true, func(l rpc) error { return download(l, pool, name, w, offset, length) })
}

// ownConn runs fn on a libvirt connection of its own, dialled through d to the host's socket,
// and closes it afterwards. When ctx ends, fn is given grace to end by itself (an upload's
// reader fails and go-libvirt aborts the stream) before the connection is closed; only this
// connection, never the host's shared one. reorder puts stream packets that overtake their
// call's reply back behind it (see Download).
func (c *Client) ownConn(ctx context.Context, d Dialer, grace time.Duration, reorder bool, fn func(l rpc) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	nc, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return err
	}
	defer nc.Close() //nolint:errcheck // ends go-libvirt's receive loop
	conn := nc
	if reorder {
		conn = newReorderConn(nc)
	}
	lv := golibvirt.NewWithDialer(dialers.NewAlreadyConnected(conn))
	ctx = c.withKind(ctx)
	l := rpc{l: lv, ctx: ctx, count: c.count}
	errc := make(chan error, 1)
	go func() {
		c.count(ctx, metrics.OpConnectOpen)
		c.opened(metrics.HostLabel(c.conn.Address()))
		if err := lv.ConnectToURI(golibvirt.ConnectURI(c.uri)); err != nil {
			errc <- errors.Wrapf(err, "cannot open libvirt connection %s", c.uri)
			return
		}
		errc <- fn(l)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case err := <-errc:
			return err
		case <-t.C:
		}
	}
	_ = nc.Close()
	return ctx.Err()
}

// Packet layout of libvirt's RPC protocol: length, program, version,
// procedure, type, serial, status, all 32-bit big-endian.
const (
	pktHeaderLen = 28
	pktMaxLen    = 32 << 20
	offType      = 16
	offSerial    = 20
)

// reorderConn delivers a stream packet only after the reply to the call
// that opened the stream; see Download.
type reorderConn struct {
	net.Conn
	in      []byte // received bytes not yet split into packets
	out     []byte // bytes ready for the reader
	held    map[uint32][]byte
	replied map[uint32]bool
	buf     []byte
	err     error
}

func newReorderConn(c net.Conn) *reorderConn {
	return &reorderConn{Conn: c, held: map[uint32][]byte{}, replied: map[uint32]bool{}, buf: make([]byte, 64<<10)}
}

func (r *reorderConn) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.Conn.Read(r.buf)
		r.in = append(r.in, r.buf[:n]...)
		r.split()
		r.err = err
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// split moves complete packets from in to out, holding stream packets
// whose call has no reply yet.
func (r *reorderConn) split() {
	for len(r.in) >= pktHeaderLen {
		n := binary.BigEndian.Uint32(r.in)
		if n < pktHeaderLen || n > pktMaxLen {
			// Not a packet boundary we understand: pass everything on.
			r.out = append(r.out, r.in...)
			r.in = r.in[:0]
			return
		}
		if uint32(len(r.in)) < n {
			return
		}
		pkt := r.in[:n]
		typ := binary.BigEndian.Uint32(pkt[offType:])
		serial := binary.BigEndian.Uint32(pkt[offSerial:])
		switch {
		case typ == socket.Reply || typ == socket.ReplyWithFDs:
			r.out = append(r.out, pkt...)
			r.replied[serial] = true
			r.out = append(r.out, r.held[serial]...)
			delete(r.held, serial)
		case typ == socket.Stream && !r.replied[serial]:
			r.held[serial] = append(r.held[serial], pkt...)
		default:
			r.out = append(r.out, pkt...)
		}
		r.in = r.in[n:]
	}
	if len(r.in) == 0 {
		r.in = nil // let the array go
	}
}
