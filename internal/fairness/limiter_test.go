package fairness

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// outcome summarises a run of When calls per namespace: how many ran at once, and the delay
// of its last call.
type outcome struct {
	Now  int
	Last time.Duration
}

func TestLimiterWhen(t *testing.T) {
	start := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	repeat := func(ns string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = ns
		}
		return out
	}
	cases := map[string]struct {
		reason string
		rps    int
		calls  []string
		want   map[string]outcome
	}{
		"AloneGetsEverything": {
			reason: "a namespace alone has the whole burst, then waits on the rate",
			rps:    10,
			calls:  repeat("a", 101),
			want:   map[string]outcome{"a": {Now: 100, Last: 100 * time.Millisecond}},
		},
		"BrokenNamespaceLeavesTheRest": {
			reason: "150 requests of one namespace while another is active: it gets half the burst and waits on its own bucket; the other's request runs at once",
			rps:    10,
			calls:  append(append([]string{"b"}, repeat("a", 150)...), "b"),
			want: map[string]outcome{
				"a": {Now: 50, Last: 20 * time.Second}, // 100 more at its share, 5/s
				"b": {Now: 2, Last: 0},
			},
		},
		"LateComerRunsAtOnce": {
			reason: "a namespace that arrives after another drained the global burst waits for one global token (100 ms at 10/s), not behind the other's 50 reserved ones: those wait on the other's own bucket",
			rps:    10,
			calls:  append(repeat("a", 150), "b"),
			want: map[string]outcome{
				"a": {Now: 100, Last: 5 * time.Second},
				"b": {Now: 0, Last: 100 * time.Millisecond},
			},
		},
		"ThreeShare": {
			reason: "three active namespaces share the burst of 30 in thirds",
			rps:    3,
			calls:  append([]string{"b", "c"}, repeat("a", 12)...),
			want: map[string]outcome{
				"a": {Now: 10, Last: 2 * time.Second},
				"b": {Now: 1}, "c": {Now: 1},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := NewLimiter(tc.rps, WithClock(func() time.Time { return start }))
			got := map[string]outcome{}
			for _, ns := range tc.calls {
				d := l.When(ns)
				o := got[ns]
				if d == 0 {
					o.Now++
				}
				o.Last = d
				got[ns] = o
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nWhen(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestLimiterActive(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	l := NewLimiter(10, WithClock(func() time.Time { return now }))
	l.When("a")
	l.When("b")
	steps := []struct {
		after time.Duration
		want  int
	}{
		{0, 2},
		{Window, 2},
		{time.Second, 1}, // both idle past the window: forgotten, one share for whoever asks
	}
	var got, want []int
	for _, s := range steps {
		now = now.Add(s.after)
		got, want = append(got, l.Active()), append(want, s.want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Active() over time: -want, +got:\n%s", diff)
	}
}

func TestWorkerShare(t *testing.T) {
	cases := map[string]struct {
		workers, active, want int
	}{
		"Alone":           {workers: 10, active: 1, want: 10},
		"Two":             {workers: 10, active: 2, want: 5},
		"Three":           {workers: 10, active: 3, want: 3},
		"MoreThanWorkers": {workers: 10, active: 40, want: 1},
		"NoneCounted":     {workers: 10, active: 0, want: 10},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, WorkerShare(tc.workers, tc.active)); diff != "" {
				t.Errorf("WorkerShare(%d, %d): -want, +got:\n%s", tc.workers, tc.active, diff)
			}
		})
	}
}
