package publishqueue

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// ws builds waiters from "host/namespace" pairs (a bare host is of namespace "ns").
func ws(jobs ...string) []waiter {
	out := make([]waiter, len(jobs))
	for i, j := range jobs {
		h, ns, ok := strings.Cut(j, "/")
		if !ok {
			ns = "ns"
		}
		out[i] = waiter{host: h, namespace: ns}
	}
	return out
}

// run builds the running counts from "host/namespace" jobs (a bare host is of namespace "ns").
func run(jobs ...string) running {
	r := running{host: map[string]int{}, namespace: map[string]int{}}
	for _, w := range ws(jobs...) {
		r.total++
		r.host[w.host]++
		r.namespace[w.namespace]++
	}
	return r
}

func TestOrder(t *testing.T) {
	cases := map[string]struct {
		reason  string
		waiting []waiter
		running running
		want    []int
	}{
		"OneNamespace": {
			reason:  "Within one namespace, first come first served.",
			waiting: ws("a/x", "b/x", "a/x"),
			running: run("a/x"),
			want:    []int{0, 1, 2},
		},
		"RoundRobin": {
			reason:  "A namespace that queued many jobs first does not go before another's single later job: namespaces take turns.",
			waiting: ws("a/x", "a/x", "a/x", "a/x", "a/y", "a/z", "a/z"),
			running: run(),
			want:    []int{0, 4, 5, 1, 6, 2, 3},
		},
		"FewestRunningFirst": {
			reason:  "The namespace running fewer jobs goes first, though its jobs came later.",
			waiting: ws("a/x", "a/x", "a/y", "a/y"),
			running: run("a/x", "b/x", "b/y"),
			want:    []int{2, 0, 3, 1},
		},
		"TiesByArrival": {
			reason:  "Between namespaces running as many jobs, the job that came first goes first.",
			waiting: ws("a/y", "a/x"),
			running: run("a/x", "b/y"),
			want:    []int{0, 1},
		},
		"Empty": {
			reason:  "Nothing waits.",
			running: run("a/x"),
			want:    []int{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := order(tc.waiting, tc.running)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\norder(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	cases := map[string]struct {
		reason  string
		limits  Limits
		waiting []waiter
		running running
		want    []int
	}{
		"Unlimited": {
			reason:  "Without limits every waiting job starts.",
			waiting: ws("a", "a", "b"),
			running: run("a", "a", "a", "a", "a"),
			want:    []int{0, 1, 2},
		},
		"TotalInOrder": {
			reason:  "The global limit admits the first comers of one namespace, in order of arrival.",
			limits:  Limits{Total: 3},
			waiting: ws("a", "b", "c", "d"),
			running: run("x"),
			want:    []int{0, 1},
		},
		"TotalFull": {
			reason:  "Nothing starts while the global limit is reached.",
			limits:  Limits{Total: 2, PerHost: 5, PerNamespace: 5},
			waiting: ws("a/y"),
			running: run("b", "b"),
			want:    nil,
		},
		"PerHostSkipsFullHost": {
			reason:  "A host at its limit does not hold up jobs of other hosts behind it.",
			limits:  Limits{Total: 10, PerHost: 2},
			waiting: ws("a", "a", "b", "a", "c"),
			running: run("a"),
			want:    []int{0, 2, 4},
		},
		"PerHostAndTotal": {
			reason:  "Both limits hold at once: the per-host one skips, the global one stops.",
			limits:  Limits{Total: 3, PerHost: 1},
			waiting: ws("a", "b", "b", "c", "d"),
			running: run("a"),
			want:    []int{1, 3},
		},
		"PerNamespaceSkipsFullNamespace": {
			reason:  "A namespace at its limit does not hold up another namespace's jobs behind its own.",
			limits:  Limits{Total: 10, PerNamespace: 2},
			waiting: ws("a/x", "a/x", "a/x", "b/y"),
			running: run("a/x"),
			want:    []int{3, 0},
		},
		"OneNamespaceCannotFillAllSlots": {
			reason:  "One namespace's many jobs take at most its share; the free slots stay for other namespaces' jobs to come.",
			limits:  Limits{Total: 16, PerHost: 4, PerNamespace: 2},
			waiting: ws("a/x", "b/x", "c/x", "a/y", "b/y", "c/z"),
			running: run(),
			want:    []int{0, 3, 5, 1, 4},
		},
		"TurnsForTheLastSlot": {
			reason:  "The last free slot goes to the namespace running the fewest jobs, not to the first comer.",
			limits:  Limits{Total: 4},
			waiting: ws("a/x", "a/x", "b/y"),
			running: run("a/x", "a/x", "b/z"),
			want:    []int{2},
		},
		"FairTurnOnAFullHost": {
			reason:  "The namespace whose turn it is waits for its full host, and the next turns, on hosts with room, start meanwhile, each namespace within its share: the per-host limit, the per-namespace limit and the turns together.",
			limits:  Limits{Total: 10, PerHost: 2, PerNamespace: 2},
			waiting: ws("a/y", "b/x", "b/x", "c/w"),
			running: run("a/x", "a/z"),
			want:    []int{3, 1},
		},
		"HostLimitBelowNamespaceShare": {
			reason:  "On one host the host's limit bounds a namespace's jobs too; the namespace's turn does not take a second slot there once the host is full.",
			limits:  Limits{Total: 16, PerHost: 4, PerNamespace: 4},
			waiting: ws("a/x", "a/x", "a/x", "a/y"),
			running: run("a/x", "a/z"),
			want:    []int{3, 0},
		},
		"Empty": {
			reason:  "No waiting job, nothing to admit.",
			limits:  Limits{Total: 1, PerHost: 1, PerNamespace: 1},
			running: run(),
			want:    nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := admit(tc.limits, tc.waiting, tc.running)
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
	enter := func(name, host string) *Ticket { return q.Enter(host, "ns", func() { woken[name]++ }) }

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
	if q.run.total != 0 || len(q.run.host) != 0 || len(q.run.namespace) != 0 || len(q.waiting) != 0 {
		t.Errorf("empty queue: %+v, waiting %d; want all zero", q.run, len(q.waiting))
	}
}

// TestQueueTurns runs one namespace's flood through a Queue: it takes only its share, a
// later namespace's job starts at once, and the next free slot goes to the namespace running
// the fewest jobs; the positions follow the turns.
func TestQueueTurns(t *testing.T) {
	q := New(Limits{Total: 3, PerHost: 3, PerNamespace: 2})
	var flood []*Ticket
	for range 5 {
		flood = append(flood, q.Enter("h", "flood", nil))
	}
	quiet1 := q.Enter("h", "quiet", nil)
	quiet2 := q.Enter("h", "quiet", nil)
	other := q.Enter("h", "other", nil)

	got := []pos{}
	for _, tk := range append(append([]*Ticket{}, flood...), quiet1, quiet2, other) {
		got = append(got, position(tk))
	}
	// Running: flood 0 and 1 (its share), quiet1 (a slot left free by the share). Waiting,
	// in turns: other (runs 0), quiet2 (runs 1), flood 2, 3, 4 (run 2 and more).
	want := []pos{
		{Admitted: true, Waiting: 5}, {Admitted: true, Waiting: 5},
		{Place: 3, Waiting: 5}, {Place: 4, Waiting: 5}, {Place: 5, Waiting: 5},
		{Admitted: true, Waiting: 5}, {Place: 2, Waiting: 5}, {Place: 1, Waiting: 5},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after entering: -want, +got:\n%s", diff)
	}

	// A flood job ends: the slot goes to other, not to the flood's next job that came first.
	flood[0].Done()
	if diff := cmp.Diff(pos{Admitted: true, Waiting: 4}, position(other)); diff != "" {
		t.Errorf("other after a flood job ended: -want, +got:\n%s", diff)
	}
	// quiet1 ends: quiet2 (its namespace then runs none) goes before the flood's third job
	// (the flood runs one), though that came first.
	quiet1.Done()
	if diff := cmp.Diff(pos{Admitted: true, Waiting: 3}, position(quiet2)); diff != "" {
		t.Errorf("quiet2 after quiet1 ended: -want, +got:\n%s", diff)
	}
	if diff := cmp.Diff(pos{Place: 1, Waiting: 3}, position(flood[2])); diff != "" {
		t.Errorf("flood[2] still waiting: -want, +got:\n%s", diff)
	}
	for _, tk := range append(append([]*Ticket{}, flood...), quiet2, other) {
		tk.Done()
	}
	if q.run.total != 0 || len(q.run.host) != 0 || len(q.run.namespace) != 0 || len(q.waiting) != 0 {
		t.Errorf("empty queue: %+v, waiting %d; want all zero", q.run, len(q.waiting))
	}
}
