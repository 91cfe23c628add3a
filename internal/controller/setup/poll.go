package setup

import (
	"time"

	corev1 "k8s.io/api/core/v1"

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
func PollHook(now func() time.Time) func(resource.Managed, time.Duration) time.Duration {
	return func(mg resource.Managed, poll time.Duration) time.Duration {
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
