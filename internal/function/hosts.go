package function

import (
	"fmt"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// PhaseHostNotReady is the phase of a Proxy whose serving VM is on a host that is not Ready
// (the provider cannot reach it, or libvirt there does not answer) while no other replica is
// Ready: what the VM does is not known. It stays in the Service (it may well still answer)
// until another replica is Ready or its host answers again.
const PhaseHostNotReady = "HostNotReady"

// hostView is what a call reads of the hosts Crossplane gave for the hosts requirement: the
// hosts whose replicas leave them (evacuating, or not Ready for longer than the platform's
// failoverAfter), and the hosts that are not Ready. A zero hostView (the hosts not given yet)
// moves nothing and doubts nothing.
type hostView struct {
	// leave says, by host, why the replicas placed there are placed anew: "is evacuating",
	// or how long it has not been Ready.
	leave map[string]string
	// down says, by host, why a host is not Ready (its Ready condition's message).
	down map[string]string
	// recheck is how long until a host that is not Ready reaches failoverAfter (0: none
	// does): the function asks Crossplane to call again by then.
	recheck time.Duration
}

// leaves is true when replicas placed on host h are placed anew.
func (v hostView) leaves(h string) bool { return v.leave[h] != "" }

// readHosts reads the hosts Crossplane gave (nothing while it has not given them): which
// evacuate (spec.evacuate on a cordoned host), which are not Ready, and, when the platform
// sets placement.failoverAfter, which have not been Ready for that long.
func readHosts(req *fnv1.RunFunctionRequest, pol ppv1.ProxyPolicy, now time.Time) (hostView, error) {
	after, err := failoverAfter(pol)
	if err != nil {
		return hostView{}, err
	}
	got, ok, err := request.GetRequiredResource(req, RequirementHosts)
	if err != nil {
		return hostView{}, errors.Wrap(err, "cannot read the hosts (ClusterProviderConfigs) Crossplane gave")
	}
	if !ok {
		return hostView{}, nil
	}
	v := hostView{leave: map[string]string{}, down: map[string]string{}}
	for _, r := range got {
		var c v1alpha1.ClusterProviderConfig
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.Resource.Object, &c); err != nil {
			return hostView{}, errors.Wrap(err, "cannot read a ClusterProviderConfig Crossplane gave")
		}
		name := c.GetName()
		if c.Spec.Unschedulable && c.Spec.Evacuate {
			v.leave[name] = "is evacuating"
		}
		cond := c.GetCondition(xpv2.TypeReady)
		if cond.Status != corev1.ConditionFalse {
			continue // Ready, or never read yet (no condition): nothing is known against it
		}
		v.down[name] = notReadyMessage(name, cond.Message)
		if after <= 0 || cond.LastTransitionTime.IsZero() || v.leave[name] != "" {
			continue
		}
		gone := now.Sub(cond.LastTransitionTime.Time)
		if gone >= after {
			v.leave[name] = fmt.Sprintf("has not been Ready for %s (the platform fails over after %s)", gone.Round(time.Second), after)
			continue
		}
		if left := after - gone; v.recheck == 0 || left < v.recheck {
			v.recheck = left
		}
	}
	return v, nil
}

// notReadyMessage says that host h is not Ready, and why when its condition says.
func notReadyMessage(h, why string) string {
	if why == "" {
		return "host " + h + " is not Ready"
	}
	return "host " + h + " is not Ready: " + why
}

// failoverAfter is the platform's placement.failoverAfter (0: unset), refused below
// ppv1.MinFailoverAfter.
func failoverAfter(pol ppv1.ProxyPolicy) (time.Duration, error) {
	if pol.Placement == nil || pol.Placement.FailoverAfter == nil {
		return 0, nil
	}
	minimum, err := time.ParseDuration(ppv1.MinFailoverAfter)
	if err != nil {
		return 0, errors.Wrap(err, "cannot parse the minimum of placement.failoverAfter")
	}
	if d := pol.Placement.FailoverAfter.Duration; d < minimum {
		return 0, errors.Errorf("invalid function input: placement.failoverAfter %s is below %s: a host's reboot or a libvirtd restart would move Proxies", d, minimum)
	}
	return pol.Placement.FailoverAfter.Duration, nil
}
