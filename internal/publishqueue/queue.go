// Package publishqueue bounds how many BaseImage publish jobs run at once, in the whole
// provider and per host, and queues the others in order of arrival.
//
// A publish job holds about 3 MiB of buffers, an upload connection to its host and a claim
// renewal; hundreds at once run the provider out of memory or libvirtd out of client slots.
// A Queue admits a job when both limits have room and keeps the others waiting, first come
// first served among those whose host has room (a host at its limit does not hold up jobs of
// other hosts). The decision is admit, without I/O; the Queue holds the state, one per
// controller, handed in (no process-wide state).
package publishqueue

import (
	"context"
	"sync"
)

// Limits of concurrent publish jobs; 0 or less is no limit.
type Limits struct {
	// Total bounds the jobs running at once in the process.
	Total int
	// PerHost bounds the jobs running at once against one host.
	PerHost int
}

// waiter is what admit knows of a waiting ticket: its host.
type waiter struct {
	host string
}

// admit decides, without I/O, which of the waiting tickets (in order of arrival) start now,
// given the jobs running per host and in all (total): each in turn when neither limit is
// reached, counting those admitted before it. It returns their indexes in waiting, in order.
func admit(l Limits, waiting []waiter, running map[string]int, total int) []int {
	var out []int
	added := map[string]int{}
	for i, w := range waiting {
		if l.Total > 0 && total+len(out) >= l.Total {
			break
		}
		if l.PerHost > 0 && running[w.host]+added[w.host] >= l.PerHost {
			continue
		}
		out = append(out, i)
		added[w.host]++
	}
	return out
}

// Queue admits publish jobs within its Limits, first come first served.
type Queue struct {
	limits Limits

	mu      sync.Mutex
	waiting []*Ticket
	running map[string]int
	total   int
}

// New returns a Queue with limits l.
func New(l Limits) *Queue {
	return &Queue{limits: l, running: map[string]int{}}
}

// Limits returns the queue's limits.
func (q *Queue) Limits() Limits { return q.limits }

// A Ticket is one job's place: waiting, then admitted, then done.
type Ticket struct {
	q    *Queue
	host string
	// onAdmit is called once the ticket is admitted after waiting (nil: nothing).
	onAdmit func()
	// ready is closed once the ticket is admitted.
	ready chan struct{}
	// Under q.mu.
	admitted, done bool
}

// Enter joins the queue for a job against host, behind every ticket waiting already; the
// ticket is admitted at once when the limits allow. onAdmit, if not nil, is called (without
// the queue's lock) when a ticket that had to wait is admitted, so that its job can say so at
// once. The caller must call Done.
func (q *Queue) Enter(host string, onAdmit func()) *Ticket {
	t := &Ticket{q: q, host: host, onAdmit: onAdmit, ready: make(chan struct{})}
	q.mu.Lock()
	q.waiting = append(q.waiting, t)
	started := q.admitLocked()
	q.mu.Unlock()
	q.tell(started, t)
	return t
}

// admitLocked admits what admit decides and returns the tickets admitted.
func (q *Queue) admitLocked() []*Ticket {
	ws := make([]waiter, len(q.waiting))
	for i, t := range q.waiting {
		ws[i] = waiter{host: t.host}
	}
	idx := admit(q.limits, ws, q.running, q.total)
	if len(idx) == 0 {
		return nil
	}
	started := make([]*Ticket, 0, len(idx))
	keep := q.waiting[:0:0]
	next := 0
	for i, t := range q.waiting {
		if next < len(idx) && idx[next] == i {
			next++
			t.admitted = true
			q.running[t.host]++
			q.total++
			close(t.ready)
			started = append(started, t)
			continue
		}
		keep = append(keep, t)
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

// Position tells where t stands: admitted, or its place among the waiting tickets (1 is the
// next to start when there is room) and how many wait in all.
func (t *Ticket) Position() (admitted bool, place, waiting int) {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.admitted {
		return true, 0, len(q.waiting)
	}
	for i, w := range q.waiting {
		if w == t {
			return false, i + 1, len(q.waiting)
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
		q.running[t.host]--
		if q.running[t.host] <= 0 {
			delete(q.running, t.host)
		}
		q.total--
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
