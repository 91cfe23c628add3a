package setup

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// Poll intervals of resources that are not Ready yet (see PollHook).
const (
	// MinNotReadyPoll is how soon a resource that just stopped being Ready (or was created) is
	// looked at again.
	MinNotReadyPoll = time.Second
	// notReadyBackoff: every this long a resource stays not Ready adds a second to its poll.
	notReadyBackoff = time.Minute
)

// PollHook sets each resource's next poll from its state. A Ready resource polls at the
// configured interval; one that is not Ready yet (a guest booting or waiting for its address,
// a probe failing, an input not ready) is looked at again after about a second, backing off by
// a second per minute it has waited, up to the configured interval. So a Proxy turns Ready
// within a second or two of its guest, whatever --poll says, and a resource stuck for an hour
// costs no more than a Ready one.
//
// A resource its external client just updated (updated, nil for none) is looked at again after
// MinNotReadyPoll too: what the update did (a rewritten seed, a grown disk) is observed and
// reported then, not a poll interval later.
func PollHook(now func() time.Time, updated *Updated) func(resource.Managed, time.Duration) time.Duration {
	return func(mg resource.Managed, poll time.Duration) time.Duration {
		if updated.take(mg.GetUID()) && poll > MinNotReadyPoll {
			return MinNotReadyPoll
		}
		c := mg.GetCondition(xpv2.TypeReady)
		if c.Status == corev1.ConditionTrue || poll <= MinNotReadyPoll {
			return poll
		}
		since := c.LastTransitionTime.Time
		if since.IsZero() {
			since = mg.GetCreationTimestamp().Time
		}
		waited := now().Sub(since)
		if waited < 0 {
			waited = 0
		}
		d := MinNotReadyPoll + time.Duration(int64(waited/notReadyBackoff))*time.Second
		if d > poll {
			return poll
		}
		return d
	}
}

// Updated remembers the resources whose external client's Update just succeeded, until their
// next poll is set.
type Updated struct{ m sync.Map }

func (u *Updated) mark(uid types.UID) {
	if u != nil {
		u.m.Store(uid, struct{}{})
	}
}

func (u *Updated) take(uid types.UID) bool {
	if u == nil {
		return false
	}
	_, ok := u.m.LoadAndDelete(uid)
	return ok
}

// trackUpdates wraps a connector so that its clients' successful Updates are marked in u.
func trackUpdates[T resource.Managed](c managed.TypedExternalConnector[T], u *Updated) managed.TypedExternalConnector[T] {
	return managed.TypedExternalConnectorFn[T](func(ctx context.Context, mg T) (managed.TypedExternalClient[T], error) {
		ec, err := c.Connect(ctx, mg)
		if err != nil {
			return nil, err
		}
		return &updateTracker[T]{TypedExternalClient: ec, updated: u}, nil
	})
}

type updateTracker[T resource.Managed] struct {
	managed.TypedExternalClient[T]
	updated *Updated
}

func (t *updateTracker[T]) Update(ctx context.Context, mg T) (managed.ExternalUpdate, error) {
	u, err := t.TypedExternalClient.Update(ctx, mg)
	if err == nil {
		t.updated.mark(mg.GetUID())
	}
	return u, err
}
