// Package fairness shares the provider's reconcile rate and workers among namespaces, so that
// one namespace's broken resources (a hundred SeedVolumes naming a missing Secret, retried
// every few seconds) cannot take the budget every other namespace needs.
//
// Limiter replaces crossplane-runtime's one global token bucket: each namespace that asked
// recently has a bucket of its own, refilled at an equal share of the global rate, and only a
// reconcile its own bucket lets through takes a token of the global bucket. A namespace over
// its share waits on its own bucket and leaves the global one to the others. Reconciler wraps
// a controller's reconciler with the Limiter and a per-namespace cap on the workers it holds.
package fairness

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Window is how long a namespace counts as active after its last reconcile request: the active
// namespaces share the rate and the workers equally.
const Window = 30 * time.Second

// Limiter shares a global rate of reconciles per second among the namespaces that ask. It is
// a workqueue.TypedRateLimiter[string] whose items are namespaces (the "" namespace is one
// more, for cluster-scoped objects), so it can stand where crossplane-runtime's global rate
// limiter does (controller.Options.GlobalRateLimiter). Safe for concurrent use.
type Limiter struct {
	now   func() time.Time
	rate  float64
	burst int

	mu     sync.Mutex
	global *rate.Limiter
	ns     map[string]*namespace
}

type namespace struct {
	lim  *rate.Limiter
	seen time.Time
}

// An Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the Limiter's clock (tests).
func WithClock(now func() time.Time) Option { return func(l *Limiter) { l.now = now } }

// NewLimiter returns a Limiter of rps reconciles per second with a burst of ten seconds' worth,
// as crossplane-runtime's ratelimiter.NewGlobal.
func NewLimiter(rps int, opts ...Option) *Limiter {
	if rps < 1 {
		rps = 1
	}
	l := &Limiter{now: time.Now, rate: float64(rps), burst: rps * 10, ns: map[string]*namespace{}}
	for _, o := range opts {
		o(l)
	}
	l.global = rate.NewLimiter(rate.Limit(l.rate), l.burst)
	return l
}

// When returns how long a reconcile of a resource of namespace ns waits. The namespace's own
// bucket (an equal share of the rate and of the burst among the namespaces active in the last
// Window) is asked first; while it says wait, the global bucket is not touched. Each call that
// returns a delay has reserved its token: the caller lets the request through when it comes
// back (Reconciler does).
func (l *Limiter) When(ns string) time.Duration {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.ns[ns]
	if st == nil {
		st = &namespace{lim: rate.NewLimiter(rate.Limit(l.rate), l.burst)} // starts full
		l.ns[ns] = st
	}
	st.seen = now
	active := l.activeLocked(now)
	st.lim.SetLimitAt(now, rate.Limit(l.rate/float64(active)))
	st.lim.SetBurstAt(now, max(1, l.burst/active))
	if d := st.lim.ReserveN(now, 1).DelayFrom(now); d > 0 {
		return d
	}
	return l.global.ReserveN(now, 1).DelayFrom(now)
}

// Active is the number of namespaces that asked in the last Window.
func (l *Limiter) Active() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.activeLocked(l.now())
}

// activeLocked counts the namespaces seen within Window and forgets the others.
func (l *Limiter) activeLocked(now time.Time) int {
	for ns, st := range l.ns {
		if now.Sub(st.seen) > Window {
			delete(l.ns, ns)
		}
	}
	return max(1, len(l.ns))
}

// Forget does nothing: a namespace's bucket is forgotten once it has been idle for Window.
func (l *Limiter) Forget(string) {}

// NumRequeues is always 0: the Limiter does not count failures (the controllers' own
// per-resource backoff does).
func (l *Limiter) NumRequeues(string) int { return 0 }
