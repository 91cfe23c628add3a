package fairness

import (
	"container/heap"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

// arrival is a request of item i at virtual time at; passed: its token was reserved earlier.
type arrival struct {
	at     time.Duration
	i      int
	passed bool
}

type arrivals []arrival

func (a arrivals) Len() int { return len(a) }
func (a arrivals) Less(i, j int) bool {
	return a[i].at < a[j].at || (a[i].at == a[j].at && a[i].i < a[j].i)
}
func (a arrivals) Swap(i, j int) { a[i], a[j] = a[j], a[i] }
func (a *arrivals) Push(x any)   { *a = append(*a, x.(arrival)) }
func (a *arrivals) Pop() any     { o := *a; x := o[len(o)-1]; *a = o[:len(o)-1]; return x }

// simulateFlood runs, in virtual time, n items of namespace "flood" that fail every
// reconcile and are retried with the controllers' per-item backoff (1 s doubling to
// MaxRequeueBackoff's 10 s), through when; at quietAt one request of namespace "quiet" asks.
// It returns how long that request waited, and how many flood reconciles ran.
func simulateFlood(when func(now time.Duration, ns string) time.Duration, n int, quietAt time.Duration) (quietWait time.Duration, floodRuns int) {
	q := &arrivals{}
	fails := make([]int, n)
	for i := range n {
		heap.Push(q, arrival{i: i})
	}
	quiet := -1
	heap.Push(q, arrival{at: quietAt, i: quiet})
	for q.Len() > 0 {
		a := heap.Pop(q).(arrival)
		if !a.passed {
			ns := "flood"
			if a.i == quiet {
				ns = "quiet"
			}
			if d := when(a.at, ns); d > 0 {
				heap.Push(q, arrival{at: a.at + d, i: a.i, passed: true})
				continue
			}
		}
		if a.i == quiet {
			return a.at - quietAt, floodRuns
		}
		floodRuns++
		fails[a.i]++
		backoff := min(time.Second<<(fails[a.i]-1), 10*time.Second)
		heap.Push(q, arrival{at: a.at + backoff, i: a.i})
	}
	return 0, floodRuns
}

// TestFloodSimulation: 150 SeedVolumes of one namespace failing for ever (a missing Secret)
// and one request of another namespace 30 s later, at the provider's default 10 reconciles per
// second, in virtual time (the real bed's figure is in docs/testing.md). With
// crossplane-runtime's one global bucket the other namespace's request waits behind the
// flood's reserved tokens; with the Limiter it waits for none of them.
func TestFloodSimulation(t *testing.T) {
	start := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		reason string
		when   func() func(now time.Duration, ns string) time.Duration
		want   time.Duration
	}{
		"GlobalBucket": {
			reason: "one shared bucket: the flood's demand (15/s) exceeds 10/s, and the debt is the other namespace's wait",
			when: func() func(time.Duration, string) time.Duration {
				b := &workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(10, 100)}
				return func(now time.Duration, ns string) time.Duration {
					return b.Limiter.ReserveN(start.Add(now), 1).DelayFrom(start.Add(now))
				}
			},
			want: 11 * time.Second,
		},
		"Fair": {
			reason: "the flood waits on its own bucket; the other namespace's request runs at once",
			when: func() func(time.Duration, string) time.Duration {
				var now time.Duration
				l := NewLimiter(10, WithClock(func() time.Time { return start.Add(now) }))
				return func(at time.Duration, ns string) time.Duration {
					now = at
					return l.When(ns)
				}
			},
			want: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wait, runs := simulateFlood(tc.when(), 150, 30*time.Second)
			t.Logf("%s: the quiet namespace's request waited %s; %d flood reconciles ran before it", name, wait, runs)
			if diff := cmp.Diff(tc.want, wait); diff != "" {
				t.Errorf("\n%s\nwait of the quiet namespace: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
