package fairness

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Busy is how long a request waits when its namespace already holds its share of the
// controller's workers.
const Busy = 500 * time.Millisecond

// RateLimiter is what Reconciler asks how long a request of a namespace waits: a *Limiter, or
// any workqueue.TypedRateLimiter[string] (crossplane-runtime's global bucket then limits all
// namespaces together).
type RateLimiter interface {
	When(namespace string) time.Duration
}

// activeCounter tells how many namespaces share the workers (*Limiter does).
type activeCounter interface {
	Active() int
}

// Reconciler wraps one controller's reconciler. A request first needs a worker share: a
// namespace may run at most workers/active reconciles of this controller at once (at least
// one), where active is the number of namespaces the Limiter saw in its Window; a request over
// that share is requeued after Busy without touching the rate. Then it needs the rate: a
// request the Limiter delays is requeued after the delay, and let through when it comes back
// (its token was reserved), as crossplane-runtime's ratelimiter.Reconciler does.
type Reconciler struct {
	inner   reconcile.Reconciler
	limit   RateLimiter
	workers int

	mu sync.Mutex
	// limited: requests delayed by the Limiter, and when; they pass when they come back. One
	// that never comes back (its resource deleted) is forgotten after forgetLimited.
	limited  map[types.NamespacedName]time.Time
	inFlight map[string]int
}

// forgetLimited is how long a delayed request's pass is kept: far longer than any delay the
// Limiter hands out to a namespace that keeps asking.
const forgetLimited = time.Hour

// NewReconciler wraps r with l; workers is the controller's MaxConcurrentReconciles.
func NewReconciler(r reconcile.Reconciler, l RateLimiter, workers int) *Reconciler {
	return &Reconciler{inner: r, limit: l, workers: max(1, workers),
		limited: map[types.NamespacedName]time.Time{}, inFlight: map[string]int{}}
}

// Reconcile runs the inner reconciler when the request's namespace is within its shares.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	d, run := r.admit(req)
	if !run {
		return reconcile.Result{RequeueAfter: d}, nil
	}
	defer r.done(req.Namespace)
	return r.inner.Reconcile(ctx, req)
}

// admit decides whether req runs now (counting it in flight) or how long it waits.
func (r *Reconciler) admit(req reconcile.Request) (time.Duration, bool) {
	active := 1
	if a, ok := r.limit.(activeCounter); ok {
		active = a.Active()
	}
	r.mu.Lock()
	if r.inFlight[req.Namespace] >= WorkerShare(r.workers, active) {
		r.mu.Unlock()
		return Busy, false
	}
	_, passed := r.limited[req.NamespacedName]
	delete(r.limited, req.NamespacedName)
	r.mu.Unlock()

	if !passed {
		// Outside the lock: the Limiter has its own, and may be shared by every controller.
		if d := r.limit.When(req.Namespace); d > 0 {
			r.mu.Lock()
			r.pass(req.NamespacedName)
			r.mu.Unlock()
			return d, false
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[req.Namespace] >= WorkerShare(r.workers, active) {
		// Another worker took the share meanwhile; the token stays reserved for this request.
		r.pass(req.NamespacedName)
		return Busy, false
	}
	r.inFlight[req.Namespace]++
	return 0, true
}

// pass lets nn through when it comes back, and forgets passes older than forgetLimited.
// Called with mu held.
func (r *Reconciler) pass(nn types.NamespacedName) {
	now := time.Now()
	if len(r.limited) >= 1024 {
		for k, at := range r.limited {
			if now.Sub(at) > forgetLimited {
				delete(r.limited, k)
			}
		}
	}
	r.limited[nn] = now
}

func (r *Reconciler) done(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[ns]--; r.inFlight[ns] <= 0 {
		delete(r.inFlight, ns)
	}
}

// WorkerShare is how many of a controller's workers one namespace may hold while active
// namespaces ask: an equal share, at least one.
func WorkerShare(workers, active int) int {
	return max(1, workers/max(1, active))
}
