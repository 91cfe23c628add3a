package probe

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Default limits of a Prober.
const (
	// DefaultPerHost bounds the probes running at once through one host's connection.
	DefaultPerHost = 8
	// DefaultPerNamespace bounds the probes of one namespace running at once on one host, so
	// that guests of one team that accept a connection and never answer hold at most this many
	// of the host's slots.
	DefaultPerNamespace = 2
	// Refresh is the least time between two probes of one resource: a result younger than this
	// is reported without probing again.
	Refresh = time.Second
)

// Check is one readiness probe of a guest. It is comparable: a check that differs from the
// last one (another address, port, URL or timeout) is probed afresh, and results of an
// earlier check are never reported for it.
type Check struct {
	// Addr is the guest's ip:port.
	Addr string
	// HTTP: GET URL through the proxy at Addr must answer Status; else a TCP connect.
	HTTP    bool
	URL     string
	Status  int
	Timeout time.Duration
}

// Run probes once through dial.
func (c Check) Run(ctx context.Context, dial DialFunc) error {
	if c.HTTP {
		return HTTPProxy(ctx, dial, c.Addr, c.URL, c.Status, c.Timeout)
	}
	return TCP(ctx, dial, c.Addr, c.Timeout)
}

// Key names the resource a probe is for, on the host it runs through.
type Key struct {
	Host     string
	Resource types.NamespacedName
}

// Result is a finished probe.
type Result struct {
	Check Check
	// Err is nil when the probe passed.
	Err error
	At  time.Time
}

// Passing tells whether the probe passed.
func (r Result) Passing() bool { return r.Err == nil }

// Prober runs readiness probes in the background, at most PerHost at once per host and
// PerNamespace at once per namespace on a host, and at most one per resource. Observe never
// waits on a guest: it reports the last result and starts the next probe. A result that
// differs from the one before (passing turned failing or back, or the first of a check) wakes
// the resource's reconcile. Safe for concurrent use.
type Prober struct {
	perHost, perNamespace int
	wake                  func(types.NamespacedName)
	now                   func() time.Time

	mu      sync.Mutex
	entries map[Key]*entry
	slots   map[string]chan struct{} // by host, and by host + "\x00" + namespace
}

// entry is what the Prober knows of one resource's probes.
type entry struct {
	last    *Result
	running *Check
	// wanted is the check Observe asked for last.
	wanted Check
}

// A ProberOption configures a Prober.
type ProberOption func(*Prober)

// WithLimits sets the concurrency limits per host and per namespace on a host.
func WithLimits(perHost, perNamespace int) ProberOption {
	return func(p *Prober) { p.perHost, p.perNamespace = max(1, perHost), max(1, perNamespace) }
}

// WithWake sets what a changed result calls: a reconcile request for the resource.
func WithWake(wake func(types.NamespacedName)) ProberOption {
	return func(p *Prober) { p.wake = wake }
}

// WithClock sets the Prober's clock (tests).
func WithClock(now func() time.Time) ProberOption { return func(p *Prober) { p.now = now } }

// NewProber returns a Prober with the default limits and no wake (polls only).
func NewProber(opts ...ProberOption) *Prober {
	p := &Prober{perHost: DefaultPerHost, perNamespace: DefaultPerNamespace, now: time.Now,
		entries: map[Key]*entry{}, slots: map[string]chan struct{}{}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Observe returns the last result of c for k (nil when there is none yet), and starts a probe
// of c through dial when decide says so. It never blocks on the probe.
func (p *Prober) Observe(k Key, c Check, dial DialFunc) *Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[k]
	if e == nil {
		e = &entry{}
		p.entries[k] = e
	}
	e.wanted = c
	report, start := decide(*e, c, p.now())
	if start {
		e.running = &c
		go p.run(k, c, dial, p.slot(k.Host, ""), p.slot(k.Host, k.Resource.Namespace))
	}
	return report
}

// Forget drops what is known of k (a domain that stopped or went away). A probe still running
// finishes without effect.
func (p *Prober) Forget(k Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, k)
}

// decide says, without I/O, what Observe reports for check c given what is known of the
// resource, and whether it starts a probe: only when none runs for it (one at a time per
// resource), and the last result is not of c or is older than Refresh.
func decide(e entry, c Check, now time.Time) (report *Result, start bool) {
	if e.last != nil && e.last.Check == c {
		report = e.last
	}
	switch {
	case e.running != nil:
		return report, false
	case report == nil:
		return nil, true
	}
	return report, now.Sub(report.At) >= Refresh
}

// changed tells whether next differs from prev enough to wake the resource: a first result
// of its check, or passing turned failing or back.
func changed(prev *Result, next Result) bool {
	return prev == nil || prev.Check != next.Check || prev.Passing() != next.Passing()
}

// slot returns the semaphore of host (namespace "") or of namespace on host. Called with mu
// held.
func (p *Prober) slot(host, namespace string) chan struct{} {
	key, n := host, p.perHost
	if namespace != "" {
		key, n = host+"\x00"+namespace, p.perNamespace
	}
	s := p.slots[key]
	if s == nil {
		s = make(chan struct{}, n)
		p.slots[key] = s
	}
	return s
}

// run waits for a slot of the namespace, then of the host, probes, and records the result.
// The probe is bounded by its check's timeout, not by any reconcile.
func (p *Prober) run(k Key, c Check, dial DialFunc, host, namespace chan struct{}) {
	namespace <- struct{}{}
	host <- struct{}{}
	err := c.Run(context.Background(), dial)
	<-host
	<-namespace
	r := Result{Check: c, Err: err, At: p.now()}

	p.mu.Lock()
	e := p.entries[k]
	if e == nil || e.running == nil || *e.running != c {
		p.mu.Unlock() // forgotten meanwhile
		return
	}
	// A resource that asked for another check meanwhile is woken to start it.
	wake := changed(e.last, r) || e.wanted != c
	e.last, e.running = &r, nil
	p.mu.Unlock()
	if wake && p.wake != nil {
		p.wake(k.Resource)
	}
}
