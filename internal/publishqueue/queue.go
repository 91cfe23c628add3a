// Package publishqueue bounds how many BaseImage publish jobs run at once, in the whole
// provider, per host and per namespace, and queues the others, namespaces taking turns.
//
// A publish job holds about 3 MiB of buffers, an upload connection to its host and a claim
// renewal; hundreds at once run the provider out of memory or libvirtd out of client slots.
// A Queue admits a job when its limits have room and keeps the others waiting. Among the
// waiting jobs the namespace with the fewest jobs running goes first (ties: the job that came
// first), so that one namespace's many jobs do not hold back another's; the per-namespace
// limit keeps one namespace from taking every slot while its jobs run. A host or a namespace at
// its limit does not hold up jobs of other hosts or namespaces. The decision is admit, without
// I/O; the Queue holds the state, one per controller, handed in (no process-wide state).
package publishqueue

import (
	"context"
	"sort"
	"sync"
)

// Limits of concurrent publish jobs; 0 or less is no limit.
type Limits struct {
	// Total bounds the jobs running at once in the process.
	Total int
	// PerHost bounds the jobs running at once against one host.
	PerHost int
	// PerNamespace bounds the jobs of one namespace running at once (on all hosts).
	PerNamespace int
}

// waiter is what admit knows of a waiting ticket: its host and namespace.
type waiter struct {
	host, namespace string
}

// running counts the jobs that run: in all, per host and per namespace.
type running struct {
	total     int
	host      map[string]int
	namespace map[string]int
}

// order returns the indexes of waiting (in order of arrival) in the order they take turns:
// the k-th waiting job of a namespace that runs r jobs comes as that namespace's (r+k+1)-th
// running job, and jobs are taken by that count, lowest first, ties in order of arrival. It
// is round-robin between namespaces that starts with those running the fewest jobs; within a
// namespace, first come first served.
func order(waiting []waiter, run running) []int {
	type turn struct{ count, index int }
	turns := make([]turn, len(waiting))
	k := map[string]int{}
	for i, w := range waiting {
		turns[i] = turn{count: run.namespace[w.namespace] + k[w.namespace], index: i}
		k[w.namespace]++
	}
	sort.Slice(turns, func(a, b int) bool {
		if turns[a].count != turns[b].count {
			return turns[a].count < turns[b].count
		}
		return turns[a].index < turns[b].index
	})
	out := make([]int, len(turns))
	for i, t := range turns {
		out[i] = t.index
	}
	return out
}

// admit decides, without I/O, which of the waiting tickets (in order of arrival) start now,
// given the jobs running: each in its turn (order) when none of the limits is reached,
// counting those admitted before it; one whose host or namespace is at its limit is skipped,
// not waited for. It returns their indexes in waiting, in the order admitted.
func admit(l Limits, waiting []waiter, run running) []int {
	var out []int
	addedHost, addedNS := map[string]int{}, map[string]int{}
	for _, i := range order(waiting, run) {
		w := waiting[i]
		if l.Total > 0 && run.total+len(out) >= l.Total {
			break
		}
		if l.PerHost > 0 && run.host[w.host]+addedHost[w.host] >= l.PerHost {
			continue
		}
		if l.PerNamespace > 0 && run.namespace[w.namespace]+addedNS[w.namespace] >= l.PerNamespace {
			continue
		}
		out = append(out, i)
		addedHost[w.host]++
		addedNS[w.namespace]++
	}
	return out
}

// Queue admits publish jobs within its Limits, namespaces taking turns.
type Queue struct {
	limits Limits

	mu      sync.Mutex
	waiting []*Ticket // in order of arrival
	run     running
}

// New returns a Queue with limits l.
func New(l Limits) *Queue {
	return &Queue{limits: l, run: running{host: map[string]int{}, namespace: map[string]int{}}}
}

// Limits returns the queue's limits.
func (q *Queue) Limits() Limits { return q.limits }

// A Ticket is one job's place: waiting, then admitted, then done.
type Ticket struct {
	q               *Queue
	host, namespace string
	// onAdmit is called once the ticket is admitted after waiting (nil: nothing).
	onAdmit func()
	// ready is closed once the ticket is admitted.
	ready chan struct{}
	// Under q.mu.
	admitted, done bool
}

// Enter joins the queue for a job of namespace against host; the ticket is admitted at once
// when the limits allow. onAdmit, if not nil, is called (without the queue's lock) when a
// ticket that had to wait is admitted, so that its job can say so at once. The caller must
// call Done.
func (q *Queue) Enter(host, namespace string, onAdmit func()) *Ticket {
	t := &Ticket{q: q, host: host, namespace: namespace, onAdmit: onAdmit, ready: make(chan struct{})}
	q.mu.Lock()
	q.waiting = append(q.waiting, t)
	started := q.admitLocked()
	q.mu.Unlock()
	q.tell(started, t)
	return t
}

// waitersLocked is what admit and order know of the waiting tickets.
func (q *Queue) waitersLocked() []waiter {
	ws := make([]waiter, len(q.waiting))
	for i, t := range q.waiting {
		ws[i] = waiter{host: t.host, namespace: t.namespace}
	}
	return ws
}

// admitLocked admits what admit decides and returns the tickets admitted.
func (q *Queue) admitLocked() []*Ticket {
	idx := admit(q.limits, q.waitersLocked(), q.run)
	if len(idx) == 0 {
		return nil
	}
	take := make(map[int]bool, len(idx))
	started := make([]*Ticket, 0, len(idx))
	for _, i := range idx {
		t := q.waiting[i]
		take[i] = true
		t.admitted = true
		q.run.host[t.host]++
		q.run.namespace[t.namespace]++
		q.run.total++
		close(t.ready)
		started = append(started, t)
	}
	keep := q.waiting[:0:0]
	for i, t := range q.waiting {
		if !take[i] {
			keep = append(keep, t)
		}
	}
	q.waiting = keep
	return started
}

// tell calls the admission hook of the started tickets other than entered (which has not
// waited).
func (q *Queue) tell(started []*Ticket, entered *Ticket) {
	for _, t := range started {
		if t != entered && t.onAdmit != nil {
			t.onAdmit()
		}
	}
}

// Wait returns once t is admitted (at once when it is already, even with ctx ended), or with
// ctx's error when ctx ends first (t stays in the queue until Done).
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.ready:
		return nil
	default:
	}
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Position tells where t stands: admitted, or its place in the order the waiting tickets take
// turns (1 is the next to start when there is room; see order) and how many wait in all. The
// place may change as jobs of other namespaces come and go.
func (t *Ticket) Position() (admitted bool, place, waiting int) {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.admitted {
		return true, 0, len(q.waiting)
	}
	for p, i := range order(q.waitersLocked(), q.run) {
		if q.waiting[i] == t {
			return false, p + 1, len(q.waiting)
		}
	}
	return false, 0, len(q.waiting) // done without being admitted
}

// Done ends t: an admitted ticket frees its place for the next waiting one, a waiting ticket
// leaves the queue. It may be called more than once.
func (t *Ticket) Done() {
	q := t.q
	q.mu.Lock()
	if t.done {
		q.mu.Unlock()
		return
	}
	t.done = true
	if t.admitted {
		decr(q.run.host, t.host)
		decr(q.run.namespace, t.namespace)
		q.run.total--
	} else {
		for i, w := range q.waiting {
			if w == t {
				q.waiting = append(q.waiting[:i:i], q.waiting[i+1:]...)
				break
			}
		}
	}
	started := q.admitLocked()
	q.mu.Unlock()
	q.tell(started, nil)
}

// decr counts one job less for key in m, dropping it at zero.
func decr(m map[string]int, key string) {
	m[key]--
	if m[key] <= 0 {
		delete(m, key)
	}
}
