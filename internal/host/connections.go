package host

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// Default pool settings.
const (
	DefaultDialTimeout = 15 * time.Second
	DefaultKeepAlive   = 10 * time.Second
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultBreakerInitial is how long a host whose connection attempt failed is not
	// dialled again; each further failure doubles it, up to DefaultBreakerMax.
	DefaultBreakerInitial = 2 * time.Second
	DefaultBreakerMax     = time.Minute
	// DefaultProbeTimeout bounds the liveness probe sent when a call outlives its context.
	DefaultProbeTimeout = 10 * time.Second
)

const (
	errPoolClosed = "connection pool is closed"
	errNoAnswer   = "no answer within the dial timeout (%s)"
	errConnect    = "cannot connect to libvirt host %s"
	errWaitDial   = "cannot connect to libvirt host %s: gave up waiting for the connection attempt in progress"
)

// errEvicted tells an acquire that its entry was closed for idleness in the
// meantime; the caller looks the entry up again.
var errEvicted = errors.New("connection evicted")

// OpenInfo describes a newly opened connection. It holds no secret.
type OpenInfo struct {
	// Transport is SSH or Unix.
	Transport Transport
	// Address is user@host:port, or unix:SOCKET.
	Address string
	// Insecure is true when the host key was not verified
	// (InsecureSkipHostKeyVerification). Callers should raise a warning.
	Insecure bool
	// HostKeyFingerprint is the server's host key, SHA256:..., if SSH.
	HostKeyFingerprint string
}

// An Option configures a Connections.
type Option func(*Connections)

// WithDialTimeout bounds opening a connection (TCP, SSH handshake and
// libvirt's connect), in addition to the caller's context.
func WithDialTimeout(d time.Duration) Option { return func(p *Connections) { p.dialTimeout = d } }

// WithKeepAlive sets the SSH keepalive interval; a connection whose
// keepalive is not answered within one more interval is closed. Zero
// disables keepalives.
func WithKeepAlive(d time.Duration) Option { return func(p *Connections) { p.keepAlive = d } }

// WithIdleTimeout closes connections unused for d. Zero keeps them open.
func WithIdleTimeout(d time.Duration) Option { return func(p *Connections) { p.idleTimeout = d } }

// WithBreaker sets the backoff of the circuit breaker of each host: after a failed connection
// attempt the host is not dialled again for initial, doubling with each further failure up to
// max; calls fail at once with a *HostDownError meanwhile. Zero initial disables the breaker.
func WithBreaker(initial, maxBackoff time.Duration) Option {
	return func(p *Connections) { p.breakerInitial, p.breakerMax = initial, maxBackoff }
}

// WithProbeTimeout bounds the probe that tells a stuck call from a stuck connection (see
// Conn.Do).
func WithProbeTimeout(d time.Duration) Option { return func(p *Connections) { p.probeTimeout = d } }

// WithOnOpen calls fn every time the pool opens an SSH connection (or a
// Unix libvirt connection), e.g. to warn about an insecure one. fn must not
// block. See also ContextWithOnOpen.
func WithOnOpen(fn func(OpenInfo)) Option { return func(p *Connections) { p.onOpen = fn } }

// WithLogger sets the pool's logger. It logs addresses, never secrets.
func WithLogger(l logging.Logger) Option { return func(p *Connections) { p.log = l } }

type onOpenKey struct{}

// WithOnLibvirt makes the pool call fn, in a goroutine of its own, for every libvirt
// connection it opens (the first to a host, and each after a reconnect), with a context that
// ends when that connection does; internal/domainevents subscribes to events this way.
func WithOnLibvirt(fn func(ctx context.Context, address string, l *libvirt.Libvirt)) Option {
	return func(p *Connections) { p.onLibvirt = fn }
}

// announce hands a new libvirt connection to the WithOnLibvirt callback, with a context of
// the connection's lifetime (not the opening call's: the subscription outlives it).
func (p *Connections) announce(address string, lv *libvirt.Libvirt) {
	if p.onLibvirt == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-lv.Disconnected():
		case <-p.stop:
		}
		cancel()
	}()
	go p.onLibvirt(ctx, address, lv)
}

// State is a change in a pooled connection's health, as the pool sees it: Up when it opened a
// libvirt connection (the first to a host, or again after one ended or failed), Down when an
// attempt to open one failed, or when an open one ended without the pool closing it (libvirtd
// stopped or restarted, the SSH connection dropped or missed its keepalives, a stuck connection
// torn down). Closing a connection itself (idle, replaced, Close) is no change. It holds no
// secret.
type State struct {
	// Key is the pooled connection's key (Config.Key): configs that share it share the
	// connection.
	Key string
	// Address is user@host:port, or unix:SOCKET.
	Address string
	// Up is true when a connection was opened, false when one failed or ended.
	Up bool
}

// WithOnState makes the pool call fn on every State change of a pooled connection, e.g. so
// that a host's status is read again at once when its connection drops or comes back. fn must
// not block.
func WithOnState(fn func(State)) Option { return func(p *Connections) { p.onState = fn } }

// state tells the WithOnState callback of a change.
func (p *Connections) state(s State) {
	if p.onState != nil {
		p.onState(s)
	}
}

// watchDown tells the WithOnState callback when the session s of the connection key ends
// without the pool closing it; it returns when s ends or the pool closes.
func (p *Connections) watchDown(key, address string, s *session) {
	if p.onState == nil {
		return
	}
	go func() {
		select {
		case <-s.lv.Disconnected():
		case <-p.stop:
			return
		}
		if s.closing.Load() || p.ctx.Err() != nil {
			return
		}
		p.log.Debug("Libvirt connection ended", "address", address)
		p.state(State{Key: key, Address: address})
	}()
}

// ContextWithOnOpen returns a context that makes a Connections call fn when a
// call made with it opens a new connection, in addition to the pool's own
// WithOnOpen hook. A controller can so raise an event on the resource whose
// reconcile opened an insecure connection.
func ContextWithOnOpen(ctx context.Context, fn func(OpenInfo)) context.Context {
	return context.WithValue(ctx, onOpenKey{}, fn)
}

// Connections shares libvirt connections among callers. It is safe for concurrent
// use. The zero value is not usable: call NewConnections.
type Connections struct {
	dialTimeout    time.Duration
	keepAlive      time.Duration
	idleTimeout    time.Duration
	breakerInitial time.Duration
	breakerMax     time.Duration
	probeTimeout   time.Duration
	now            func() time.Time
	onOpen         func(OpenInfo)
	onLibvirt      func(ctx context.Context, address string, l *libvirt.Libvirt)
	onState        func(State)
	log            logging.Logger

	mu      sync.Mutex
	entries map[string]*entry
	closed  bool

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	// ctx ends with Close; it cancels dials in progress.
	ctx    context.Context
	cancel context.CancelFunc
}

// NewConnections returns a connection pool.
func NewConnections(opts ...Option) *Connections {
	p := &Connections{
		dialTimeout:    DefaultDialTimeout,
		keepAlive:      DefaultKeepAlive,
		idleTimeout:    DefaultIdleTimeout,
		breakerInitial: DefaultBreakerInitial,
		breakerMax:     DefaultBreakerMax,
		probeTimeout:   DefaultProbeTimeout,
		now:            time.Now,
		log:            logging.NewNopLogger(),
		entries:        map[string]*entry{},
		stop:           make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for _, o := range opts {
		o(p)
	}
	if p.idleTimeout > 0 {
		p.wg.Add(1)
		go p.reaper()
	}
	return p
}

// Get returns a connection to the host c describes, opening it if no
// healthy one is pooled. Errors name the host and say why.
func (p *Connections) Get(ctx context.Context, c Config) (*Conn, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, errors.Wrapf(err, errConnect, c.Address())
	}
	conn := &Conn{conns: p, key: c.connKey(), cfg: c}
	_, release, err := conn.acquire(ctx)
	if err != nil {
		return nil, err
	}
	release()
	return conn, nil
}

// Close closes every pooled connection. Later calls fail.
func (p *Connections) Close() error {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.cancel()
	})
	p.wg.Wait()
	p.mu.Lock()
	p.closed = true
	var sess []*session
	for k, e := range p.entries {
		if s := e.evict(); s != nil {
			sess = append(sess, s)
		}
		delete(p.entries, k)
	}
	p.mu.Unlock()
	closeAll(sess)
	return nil
}

// Len returns the number of pooled connection entries.
func (p *Connections) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

func closeAll(sess []*session) {
	var wg sync.WaitGroup
	for _, s := range sess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close()
		}()
	}
	wg.Wait()
}

func (p *Connections) entry(key string, c Config) (*entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New(errPoolClosed)
	}
	e, ok := p.entries[key]
	if !ok {
		e = &entry{key: key, cfg: c, lastUsed: time.Now()}
		p.entries[key] = e
	}
	return e, nil
}

func (p *Connections) reaper() {
	defer p.wg.Done()
	iv := min(max(p.idleTimeout/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.reap(time.Now())
		}
	}
}

// reap closes entries unused for the idle timeout and without calls.
func (p *Connections) reap(now time.Time) {
	var sess []*session
	p.mu.Lock()
	for k, e := range p.entries {
		s, ok := e.evictIfIdle(now, p.idleTimeout)
		if !ok {
			continue
		}
		delete(p.entries, k)
		if s != nil {
			sess = append(sess, s)
			p.log.Debug("Closing idle libvirt connection", "address", e.cfg.Address())
		}
	}
	p.mu.Unlock()
	closeAll(sess)
}

// open opens a session for c. When old's SSH connection is still alive
// (e.g. only libvirtd restarted), it is reused.
func (p *Connections) open(ctx context.Context, c Config, old *session) (*session, error) {
	if p.dialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.dialTimeout)
		defer cancel()
	}
	info := OpenInfo{Transport: c.Transport, Address: c.Address()}
	s := &session{}
	reused := false
	switch c.Transport {
	case TransportUnix:
		s.d = &streamDialer{dial: func() (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.Socket)
		}}
	default:
		if old != nil && old.ssh != nil && old.ssh.alive() {
			s.ssh, reused = old.ssh, true
		} else {
			sc, err := dialSSH(ctx, c, p.keepAlive)
			if err != nil {
				return nil, err
			}
			s.ssh = sc
		}
		info.Insecure = c.InsecureSkipHostKeyVerification
		info.HostKeyFingerprint = s.ssh.fingerprint
		client := s.ssh.client
		s.d = &streamDialer{dial: func() (net.Conn, error) {
			conn, err := client.Dial("unix", c.Socket)
			return conn, errors.Wrapf(err, errOpenSocket, c.Socket)
		}}
	}
	lv, err := connectLibvirt(ctx, s.d, c.URI)
	if err != nil {
		if s.ssh != nil && (!reused || ctx.Err() != nil) {
			s.ssh.close()
		}
		return nil, &LibvirtOpenError{URI: c.URI, Err: err}
	}
	s.lv = lv
	metrics.Call(ctx, metrics.OpConnectOpen)
	metrics.Opened(metrics.HostLabel(info.Address))
	p.announce(info.Address, lv) //nolint:contextcheck // the subscription lives as long as the connection, not the call that opened it
	if !reused {
		p.log.Debug("Opened libvirt connection", "address", info.Address, "insecure", info.Insecure, "hostKey", info.HostKeyFingerprint)
		if p.onOpen != nil {
			p.onOpen(info)
		}
		if fn, ok := ctx.Value(onOpenKey{}).(func(OpenInfo)); ok && fn != nil {
			fn(info)
		}
	}
	return s, nil
}

// entry is the pooled connection for one Config, and the circuit breaker of its host.
type entry struct {
	key string
	cfg Config

	mu       sync.Mutex
	sess     *session
	inflight int // calls and tunnels using sess, and dials
	lastUsed time.Time
	evicted  bool
	// dial is the connection attempt in progress, nil when none is.
	dial *dialAttempt
	// down is the breaker: failures since the last successful open, nil when there are none.
	down *HostDownError
}

// dialAttempt is one connection attempt; callers wait for done.
type dialAttempt struct {
	done chan struct{}
	sess *session // set before done is closed
	err  error
}

func (e *entry) evict() *session {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evicted = true
	s := e.sess
	e.sess = nil
	return s
}

func (e *entry) evictIfIdle(now time.Time, idle time.Duration) (*session, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight > 0 || now.Sub(e.lastUsed) < idle {
		return nil, false
	}
	e.evicted = true
	s := e.sess
	e.sess = nil
	return s, true
}

func (e *entry) release() {
	e.mu.Lock()
	e.inflight--
	e.lastUsed = time.Now()
	e.mu.Unlock()
}

// acquire returns a healthy session, opening one if needed. On success the caller must call
// e.release when done.
//
// The breaker: while a host's last connection attempt failed and its backoff has not passed,
// acquire fails at once with a *HostDownError, and when it has passed exactly one caller
// starts the next attempt and waits for it; others fail at once meanwhile. Only the first
// attempt to a host with no failure on record is waited for by every caller (bounded by each
// one's context). Attempts run on a context of their own (bounded by the dial timeout and the
// pool's Close), so their outcome is recorded even when the caller that started one gave up.
func (e *entry) acquire(ctx context.Context, p *Connections) (*session, error) {
	e.mu.Lock()
	if e.evicted {
		e.mu.Unlock()
		return nil, errEvicted
	}
	s := e.sess
	if s.healthy() {
		e.inflight++
		e.lastUsed = time.Now()
		e.mu.Unlock()
		return s, nil
	}
	now := p.now()
	a := e.dial
	switch {
	case a == nil && e.down != nil && now.Before(e.down.RetryAt):
		err := e.down.snapshot(false)
		e.mu.Unlock()
		return nil, err
	case a != nil && e.down != nil:
		err := e.down.snapshot(true)
		e.mu.Unlock()
		return nil, err
	case a == nil:
		a = e.startDial(ctx, p, s)
	}
	e.inflight++
	e.lastUsed = time.Now()
	e.mu.Unlock()
	select {
	case <-a.done:
		if a.err != nil {
			e.release()
			return nil, a.err
		}
		return a.sess, nil
	case <-ctx.Done():
		e.release()
		return nil, errors.Wrapf(ctx.Err(), errWaitDial, e.cfg.Address())
	}
}

// startDial starts a connection attempt replacing old; e.mu is held.
func (e *entry) startDial(ctx context.Context, p *Connections, old *session) *dialAttempt {
	a := &dialAttempt{done: make(chan struct{})}
	e.dial = a
	e.inflight++ // the attempt keeps the entry from being reaped
	// The caller's values (its OnOpen hook, its metrics kind), the pool's lifetime.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(p.ctx, cancel) //nolint:contextcheck // the attempt ends with the pool, not with the caller that started it
	// Close does not wait for attempts (a WaitGroup's Add may not race its Wait): it cancels
	// them, and one that succeeds anyway on an evicted entry closes its connection.
	go func() {
		defer cancel()
		defer stop()
		ns, err := p.open(dctx, e.cfg, old)
		if err != nil && p.dialTimeout > 0 && isTimeout(err) {
			err = errors.Wrapf(err, errNoAnswer, p.dialTimeout)
		}
		e.finishDial(p, a, old, ns, err)
	}()
	return a
}

// isTimeout is true when err is a timeout: the dial timeout's context, or a net timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// finishDial records the outcome of attempt a.
func (e *entry) finishDial(p *Connections, a *dialAttempt, old, ns *session, err error) {
	closing := p.ctx.Err() != nil
	e.mu.Lock()
	e.dial = nil
	e.inflight--
	e.lastUsed = time.Now()
	evicted := e.evicted
	switch {
	case err != nil:
		a.err = errors.Wrapf(err, errConnect, e.cfg.Address())
		if !closing && p.breakerInitial > 0 {
			e.down = e.down.failed(e.cfg.Address(), err, p.now(), p.breakerInitial, p.breakerMax)
			metrics.ConnectFailed(metrics.HostLabel(e.cfg.Address()))
			p.log.Debug("Cannot connect to libvirt host", "address", e.cfg.Address(), "failures", e.down.Failures, "retryAt", e.down.RetryAt, "error", err)
		}
	case evicted:
		a.err = errors.Wrapf(errors.New(errPoolClosed), errConnect, e.cfg.Address())
	default:
		if e.down != nil {
			metrics.Reachable(metrics.HostLabel(e.cfg.Address()))
			p.log.Info("Connected to libvirt host again", "address", e.cfg.Address(), "failures", e.down.Failures, "since", e.down.Since)
		}
		e.down = nil
		e.sess, a.sess = ns, ns // each waiting caller counted itself in inflight
	}
	close(a.done)
	e.mu.Unlock()
	switch {
	case err != nil:
		if !closing {
			p.state(State{Key: e.key, Address: e.cfg.Address()})
		}
	case evicted:
		go ns.close()
	default:
		p.state(State{Key: e.key, Address: e.cfg.Address(), Up: true})
		p.watchDown(e.key, e.cfg.Address(), ns)
		e.retireOld(p, old, ns)
	}
}

// retireOld closes old, the session ns replaced (only its libvirt connection when ns reuses its
// SSH connection).
func (e *entry) retireOld(p *Connections, old, ns *session) {
	if old == nil {
		return
	}
	if old.ssh != nil && old.ssh == ns.ssh {
		go old.closeLibvirt()
	} else {
		go old.close()
	}
	p.log.Debug("Reopened libvirt connection", "address", e.cfg.Address())
}
