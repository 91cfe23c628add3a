package host

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

const (
	errDialTCP         = "cannot dial SSH server"
	errHandshake       = "cannot establish SSH session"
	errOpenLibvirt     = "cannot open libvirt connection %s on the host"
	errOpenSocket      = "cannot open libvirt socket %s"
	errKnownHostsSetup = "cannot use known_hosts data"

	keepAliveRequest  = "keepalive@openssh.com"
	disconnectTimeout = 2 * time.Second
)

// sshConn is an SSH client connection and its liveness.
type sshConn struct {
	client      *ssh.Client
	dead        chan struct{} // closed when the connection has ended
	fingerprint string        // server's host key, SHA256:...
	closed      atomic.Bool   // set at once by close; dead follows later
}

func (s *sshConn) alive() bool {
	if s.closed.Load() {
		return false
	}
	select {
	case <-s.dead:
		return false
	default:
		return true
	}
}

func (s *sshConn) close() {
	s.closed.Store(true)
	_ = s.client.Close()
}

// dialSSH opens an authenticated SSH connection with pinned host key. The
// handshake is bounded by ctx.
func dialSSH(ctx context.Context, c Config, keepAlive time.Duration) (*sshConn, error) {
	signer, err := parseSigner(c.PrivateKey, c.Passphrase)
	if err != nil {
		return nil, err
	}
	var kh knownHosts
	if !c.InsecureSkipHostKeyVerification {
		if kh, err = parseKnownHosts(c.KnownHosts); err != nil {
			return nil, errors.Wrap(err, errKnownHostsSetup)
		}
	}
	sc := &sshConn{dead: make(chan struct{})}
	cfg := &ssh.ClientConfig{
		User:              c.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   hostKeyCallback(kh, c.Host, c.Port, c.InsecureSkipHostKeyVerification, &sc.fingerprint),
		HostKeyAlgorithms: kh.algorithms(knownHostsName(c.Host, c.Port)),
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	d := net.Dialer{KeepAlive: keepAlive}
	tcp, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, errors.Wrap(err, errDialTCP)
	}
	// Closing the TCP connection when ctx ends aborts the handshake.
	stop := context.AfterFunc(ctx, func() { _ = tcp.Close() })
	conn, chans, reqs, err := ssh.NewClientConn(tcp, addr, cfg)
	if !stop() || err != nil {
		_ = tcp.Close()
		if ctx.Err() != nil {
			return nil, errors.Wrap(ctx.Err(), errHandshake)
		}
		return nil, errors.Wrap(err, errHandshake)
	}
	sc.client = ssh.NewClient(conn, chans, reqs)
	go func() {
		_ = sc.client.Wait()
		close(sc.dead)
	}()
	if keepAlive > 0 {
		go sc.keepAlive(keepAlive)
	}
	return sc, nil
}

// answers reports whether the SSH server answers a keepalive within timeout.
func (s *sshConn) answers(timeout time.Duration) bool {
	if !s.alive() {
		return false
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.client.SendRequest(keepAliveRequest, true, nil)
		errc <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-errc:
		return err == nil
	case <-t.C:
		return false
	}
}

// keepAlive sends keepalive@openssh.com every interval and closes the
// connection when a reply does not come within the next interval.
func (s *sshConn) keepAlive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.dead:
			return
		case <-t.C:
		}
		errc := make(chan error, 1)
		go func() {
			_, _, err := s.client.SendRequest(keepAliveRequest, true, nil)
			errc <- err
		}()
		timer := time.NewTimer(interval)
		select {
		case err := <-errc:
			timer.Stop()
			if err != nil {
				s.close()
				return
			}
		case <-timer.C:
			s.close()
			return
		case <-s.dead:
			timer.Stop()
			return
		}
	}
}

// streamDialer is a go-libvirt socket.Dialer that remembers the last
// connection it made, so a stuck libvirt connection can be torn down.
type streamDialer struct {
	dial func() (net.Conn, error)
	mu   sync.Mutex
	last net.Conn
}

// Dial implements socket.Dialer.
func (d *streamDialer) Dial() (net.Conn, error) {
	c, err := d.dial()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.last = c
	d.mu.Unlock()
	return c, nil
}

func (d *streamDialer) closeLast() {
	d.mu.Lock()
	c := d.last
	d.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// maxAbandoned bounds the calls abandoned by Conn.Do still outstanding on one connection
// (each holds a goroutine); one more replaces the connection.
const maxAbandoned = 32

// opProbe is the op label of the liveness probe (see session.abandoned).
const opProbe = "ConnectGetLibVersion"

// session is one open libvirt connection, over ssh (nil for Unix).
type session struct {
	ssh    *sshConn
	lv     *libvirt.Libvirt
	d      *streamDialer
	broken atomic.Bool
	// closing is set when the pool closes the session itself (idle, replaced, Close): its end
	// is no State change.
	closing atomic.Bool

	// outstanding counts abandoned calls that have not returned; probing is set while a
	// liveness probe runs.
	outstanding atomic.Int32
	probing     atomic.Bool
	// probe is the liveness call; lv's ConnectGetLibVersion unless a test replaces it.
	probe func() error
}

// abandoned is told of a call, whose result comes on errc, that outlived its context. It
// keeps count of such calls until they return, and probes the connection: a connection that
// does not answer a cheap call within timeout is stuck itself and is torn down.
func (s *session) abandoned(errc <-chan error, timeout time.Duration) {
	n := s.outstanding.Add(1)
	go func() {
		if err := <-errc; err != nil {
			_ = err // the abandoned call's error: its caller has gone
		}
		s.outstanding.Add(-1)
	}()
	if n > maxAbandoned {
		s.retire()
		return
	}
	if !s.probing.CompareAndSwap(false, true) {
		return // a probe is running: it answers for this call too
	}
	go func() {
		defer s.probing.Store(false)
		probe := s.probe
		if probe == nil {
			probe = func() error {
				metrics.Call(context.Background(), opProbe)
				_, err := s.lv.ConnectGetLibVersion()
				return err
			}
		}
		done := make(chan error, 1)
		go func() { done <- probe() }()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case err := <-done:
			if err != nil && !s.healthy() {
				return // dropped meanwhile: the next call reopens
			}
		case <-t.C:
			s.retire()
		}
	}()
}

// retire tears down a stuck libvirt connection. The SSH connection is kept for the next
// libvirt connection when it still answers a keepalive (only libvirtd is stuck), else closed.
func (s *session) retire() {
	s.broken.Store(true)
	s.d.closeLast()
	if s.ssh != nil && !s.ssh.answers(disconnectTimeout) {
		s.ssh.close()
	}
}

// healthy reports whether the session can take calls.
func (s *session) healthy() bool {
	if s == nil || s.broken.Load() {
		return false
	}
	if s.ssh != nil && !s.ssh.alive() {
		return false
	}
	return s.lv.IsConnected()
}

// closeLibvirt ends only the libvirt connection, politely when possible.
func (s *session) closeLibvirt() {
	s.closing.Store(true)
	s.broken.Store(true)
	if s.lv.IsConnected() {
		done := make(chan struct{})
		go func() {
			_ = s.lv.Disconnect()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(disconnectTimeout):
		}
	}
	s.d.closeLast()
}

// close ends the libvirt connection and the SSH connection.
func (s *session) close() {
	s.closeLibvirt()
	if s.ssh != nil {
		s.ssh.close()
	}
}

// connectLibvirt opens a libvirt connection to uri through d, bounded by
// ctx.
func connectLibvirt(ctx context.Context, d *streamDialer, uri string) (*libvirt.Libvirt, error) {
	lv := libvirt.NewWithDialer(d)
	errc := make(chan error, 1)
	go func() { errc <- lv.ConnectToURI(libvirt.ConnectURI(uri)) }()
	select {
	case err := <-errc:
		if err != nil {
			return nil, err
		}
		return lv, nil
	case <-ctx.Done():
		d.closeLast()
		go func() {
			// Reap the goroutine; close a connection that made it anyway.
			if err := <-errc; err == nil {
				d.closeLast()
			}
		}()
		return nil, ctx.Err()
	}
}
