package setup

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestRequeueLimiter(t *testing.T) {
	l := requeueLimiter()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "vm"}}
	var got []time.Duration
	for range 8 {
		got = append(got, l.When(item))
	}
	if got[0] != time.Second {
		t.Errorf("first requeue after %v, want 1s", got[0])
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] || got[i] > MaxRequeueBackoff {
			t.Errorf("requeue %d after %v (previous %v): want non-decreasing and at most %v", i, got[i], got[i-1], MaxRequeueBackoff)
		}
	}
	if got[len(got)-1] != MaxRequeueBackoff {
		t.Errorf("after %d requeues the backoff is %v, want the cap %v", len(got), got[len(got)-1], MaxRequeueBackoff)
	}
	l.Forget(item)
	if d := l.When(item); d != time.Second {
		t.Errorf("after Forget the backoff is %v, want 1s", d)
	}
}
