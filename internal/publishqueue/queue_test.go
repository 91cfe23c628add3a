package publishqueue

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestAdmit(t *testing.T) {
	ws := func(hosts ...string) []waiter {
		out := make([]waiter, len(hosts))
		for i, h := range hosts {
			out[i] = waiter{host: h}
		}
		return out
	}
	cases := map[string]struct {
		reason  string
		limits  Limits
		waiting []waiter
		running map[string]int
		total   int
		want    []int
	}{
		"Unlimited": {
			reason:  "Without limits every waiting job starts.",
			waiting: ws("a", "a", "b"),
			running: map[string]int{"a": 5},
			total:   5,
			want:    []int{0, 1, 2},
		},
		"TotalInOrder": {
			reason:  "The global limit admits the first comers, in order of arrival.",
			limits:  Limits{Total: 3},
			waiting: ws("a", "b", "c", "d"),
			running: map[string]int{"x": 1},
			total:   1,
			want:    []int{0, 1},
		},
		"TotalFull": {
			reason:  "Nothing starts while the global limit is reached.",
			limits:  Limits{Total: 2, PerHost: 5},
			waiting: ws("a"),
			running: map[string]int{"b": 2},
			total:   2,
			want:    nil,
		},
		"PerHostSkipsFullHost": {
			reason:  "A host at its limit does not hold up jobs of other hosts behind it.",
			limits:  Limits{Total: 10, PerHost: 2},
			waiting: ws("a", "a", "b", "a", "c"),
			running: map[string]int{"a": 1},
			total:   1,
			want:    []int{0, 2, 4},
		},
		"PerHostAndTotal": {
			reason:  "Both limits hold at once: the per-host one skips, the global one stops.",
			limits:  Limits{Total: 3, PerHost: 1},
			waiting: ws("a", "b", "b", "c", "d"),
			running: map[string]int{"a": 1},
			total:   1,
			want:    []int{1, 3},
		},
		"Empty": {
			reason: "No waiting job, nothing to admit.",
			limits: Limits{Total: 1, PerHost: 1},
			want:   nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := admit(tc.limits, tc.waiting, tc.running, tc.total)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nadmit(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

type pos struct {
	Admitted       bool
	Place, Waiting int
}

func position(t *Ticket) pos {
	a, p, w := t.Position()
	return pos{a, p, w}
}

// TestQueue runs tickets through a Queue: positions while waiting, admission in order as
// places free up, and a waiting ticket that leaves.
func TestQueue(t *testing.T) {
	q := New(Limits{Total: 2, PerHost: 1})
	woken := map[string]int{}
	enter := func(name, host string) *Ticket { return q.Enter(host, func() { woken[name]++ }) }

	a1 := enter("a1", "a")
	a2 := enter("a2", "a")
	b1 := enter("b1", "b")
	c1 := enter("c1", "c")
	a3 := enter("a3", "a")

	got := map[string]pos{"a1": position(a1), "a2": position(a2), "b1": position(b1), "c1": position(c1), "a3": position(a3)}
	want := map[string]pos{
		"a1": {Admitted: true, Waiting: 3},
		"a2": {Place: 1, Waiting: 3},
		"b1": {Admitted: true, Waiting: 3},
		"c1": {Place: 2, Waiting: 3},
		"a3": {Place: 3, Waiting: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after entering: -want, +got:\n%s", diff)
	}
	if err := a1.Wait(context.Background()); err != nil {
		t.Fatalf("a1.Wait: %v", err)
	}

	// c1 leaves while waiting (its job was cancelled); a1 ends: a2 is next for host a.
	c1.Done()
	a1.Done()
	a1.Done() // twice frees nothing more
	got = map[string]pos{"a2": position(a2), "a3": position(a3)}
	want = map[string]pos{"a2": {Admitted: true, Waiting: 1}, "a3": {Place: 1, Waiting: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after a1 ended: -want, +got:\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"a2": 1}, woken); diff != "" {
		t.Errorf("woken: -want, +got:\n%s", diff)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a3.Wait(ctx); err == nil {
		t.Errorf("a3.Wait with an ended context: want its error, got nil")
	}
	b1.Done()
	a2.Done()
	if diff := cmp.Diff(pos{Admitted: true}, position(a3)); diff != "" {
		t.Errorf("a3 at the end: -want, +got:\n%s", diff)
	}
	a3.Done()
	if q.total != 0 || len(q.running) != 0 || len(q.waiting) != 0 {
		t.Errorf("empty queue: total %d, running %v, waiting %d; want all zero", q.total, q.running, len(q.waiting))
	}
}
