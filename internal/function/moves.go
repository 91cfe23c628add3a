package function

import (
	"fmt"
	"slices"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"
	"github.com/crossplane/function-sdk-go/resource"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// LabelMovingFrom is on the KVMDomain of a generation that a replica moving off a host (it
// evacuates, or failed over) brings up elsewhere, while it does: its value is the host left.
// The platform's placement.maxMovesPerHost counts these, over every namespace.
const LabelMovingFrom = "proxy.kvm.crossplane.io/moving-from"

// labelComposite is the label Crossplane puts on every composed resource: its XR's name.
const labelComposite = "crossplane.io/composite"

// ReasonMoveQueued: the replica leaves its host, but the platform's maxMovesPerHost new VMs
// for replicas leaving that host are still coming up: it waits for its turn, serving.
const ReasonMoveQueued = "MoveQueued"

// requiredMovesPrefix names the required resources that list the KVMDomains moving off a host:
// requiredMovesPrefix + host.
const requiredMovesPrefix = "moves-"

// queueMoves holds back, under the platform's placement.maxMovesPerHost, the replicas that would
// start moving off a host (at[r].left set, their new generation on at[r].host not composed yet)
// while that many KVMDomains of other Proxies, in any namespace, are moving off it. A held
// replica stays where it is (at[r].host = at[r].left), serving, and its Placed condition says
// that it waits for its turn. A replica whose move has begun goes on. The KVMDomains moving off a
// host are asked for from Crossplane; until it gave them, nothing starts moving.
func queueMoves(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, pol ppv1.ProxyPolicy, view hostView, ns, xr string, observed map[resource.Name]resource.ObservedComposed, at []replicaAt) error {
	if pol.Placement == nil || pol.Placement.MaxMovesPerHost == nil {
		return nil
	}
	limit := int(*pol.Placement.MaxMovesPerHost)
	if limit < 1 {
		return errors.Errorf("invalid function input: placement.maxMovesPerHost %d is below 1", limit)
	}
	moving := map[string]int{} // by host left, others' KVMDomains moving off it
	for r := range at {
		a := &at[r]
		if a.left == "" || a.host == "" || a.host == a.left || slices.Contains(composedHosts(observed, r), a.host) {
			continue // not moving, or its move has begun
		}
		n, known, err := movingOff(req, rsp, a.left, ns, xr, moving)
		if err != nil {
			return err
		}
		why := fmt.Sprintf("host %s %s; replica %d waits for its turn to move: the platform moves at most %d Proxy replicas off a host at once (placement.maxMovesPerHost)",
			a.left, view.leave[a.left], r, limit)
		switch {
		case !known:
			a.host, a.reason, a.why = a.left, ReasonChoosing, msgChoosing
		case n >= limit:
			a.host, a.reason, a.blocked = a.left, ReasonMoveQueued, why
		default:
			moving[a.left]++ // this one takes a turn: the next replica counts it
		}
	}
	return nil
}

// movingOff is how many KVMDomains of other Proxies (any namespace; not xr's own in ns) move
// off host, plus those this call already let go (counted); known is false while Crossplane
// has not given them (they are asked for in rsp).
func movingOff(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, host, ns, xr string, counted map[string]int) (int, bool, error) {
	key := requiredMovesPrefix + host
	asked := requirements(rsp)
	// No namespace: every namespace's. Nothing of them is named anywhere; only counted.
	asked[key] = &fnv1.ResourceSelector{
		ApiVersion: hostsAPIVersion,
		Kind:       v1alpha1.KVMDomainKind,
		Match:      &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{LabelMovingFrom: host}}},
	}
	items, ok, err := request.GetRequiredResource(req, key)
	if err != nil {
		return 0, false, errors.Wrapf(err, "cannot read the KVMDomains moving off host %s", host)
	}
	if !ok {
		return 0, false, nil
	}
	n := counted[host]
	for _, it := range items {
		u := it.Resource
		if u.GetLabels()[LabelMovingFrom] != host || (u.GetNamespace() == ns && u.GetLabels()[labelComposite] == xr) {
			continue
		}
		n++
	}
	return n, true, nil
}
