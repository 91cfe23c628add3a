package fairness

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
)

// fixedLimiter delays every request by d, with active namespaces.
type fixedLimiter struct {
	d      time.Duration
	active int
	asked  int
}

func (f *fixedLimiter) When(string) time.Duration { f.asked++; return f.d }
func (f *fixedLimiter) Active() int               { return f.active }

func TestReconciler(t *testing.T) {
	errBoom := errors.New("boom")
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "x"}}
	type want struct {
		result reconcile.Result
		err    error
		ran    bool
		asked  int
	}
	cases := map[string]struct {
		reason   string
		limiter  *fixedLimiter
		workers  int
		inFlight map[string]int
		limited  bool
		innerErr error
		want     want
	}{
		"Runs": {
			reason:  "a request within the rate and the worker share runs",
			limiter: &fixedLimiter{active: 2}, workers: 10,
			inFlight: map[string]int{"a": 4},
			want:     want{ran: true, asked: 1},
		},
		"InnerError": {
			reason:  "the inner reconciler's error is returned",
			limiter: &fixedLimiter{active: 1}, workers: 10, innerErr: errBoom,
			want: want{ran: true, asked: 1, err: errBoom},
		},
		"RateLimited": {
			reason:  "a request the limiter delays waits that long, without running",
			limiter: &fixedLimiter{d: 3 * time.Second, active: 1}, workers: 10,
			want: want{result: reconcile.Result{RequeueAfter: 3 * time.Second}, asked: 1},
		},
		"ComesBack": {
			reason:  "a request that was delayed runs when it comes back, without a second token",
			limiter: &fixedLimiter{d: 3 * time.Second, active: 1}, workers: 10, limited: true,
			want: want{ran: true},
		},
		"OverWorkerShare": {
			reason:  "a namespace holding its share of the workers (10 workers, 2 namespaces: 5) waits, and takes no token",
			limiter: &fixedLimiter{active: 2}, workers: 10,
			inFlight: map[string]int{"a": 5, "b": 1},
			want:     want{result: reconcile.Result{RequeueAfter: Busy}},
		},
		"OtherNamespaceBusy": {
			reason:  "another namespace's workers do not count against this one",
			limiter: &fixedLimiter{active: 2}, workers: 10,
			inFlight: map[string]int{"b": 5},
			want:     want{ran: true, asked: 1},
		},
		"AlwaysOne": {
			reason:  "with more namespaces than workers, each may still run one",
			limiter: &fixedLimiter{active: 50}, workers: 10,
			inFlight: map[string]int{"b": 1, "c": 1},
			want:     want{ran: true, asked: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ran := false
			inner := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				ran = true
				return reconcile.Result{}, tc.innerErr
			})
			r := NewReconciler(inner, tc.limiter, tc.workers)
			for ns, n := range tc.inFlight {
				r.inFlight[ns] = n
			}
			if tc.limited {
				r.limited[req.NamespacedName] = time.Now()
			}
			res, err := r.Reconcile(context.Background(), req)
			got := want{result: res, err: err, ran: ran, asked: tc.limiter.asked}
			if diff := cmp.Diff(tc.want, got, test.EquateErrors(), cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("\n%s\nReconcile(...): -want, +got:\n%s", tc.reason, diff)
			}
			if n := r.inFlight["a"]; n != tc.inFlight["a"] {
				t.Errorf("\n%s\nin flight after Reconcile: want %d, got %d", tc.reason, tc.inFlight["a"], n)
			}
		})
	}
}
