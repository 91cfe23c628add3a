package kvmdomain

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/probe"
)

// Probe states in status.atProvider.probe besides "failing: <why>".
const (
	probePassing = "passing"
	probePending = "pending"
)

// defaultProbeTimeout bounds a probe whose timeoutSeconds is not set.
const defaultProbeTimeout = 5 * time.Second

// probeCheck is the check readiness probe p asks of the guest at ip.
func probeCheck(p *v1alpha1.ReadinessProbe, ip string) probe.Check {
	c := probe.Check{Timeout: time.Duration(p.TimeoutSeconds) * time.Second}
	if c.Timeout <= 0 {
		c.Timeout = defaultProbeTimeout
	}
	switch {
	case p.TCP != nil:
		c.Addr = probe.Addr(ip, p.TCP.Port)
	case p.HTTPProxy != nil:
		c.Addr, c.HTTP, c.URL, c.Status = probe.Addr(ip, p.HTTPProxy.Port), true, p.HTTPProxy.URL, int(p.HTTPProxy.ExpectedStatus)
	}
	return c
}

// observeProbe reports the last result of the guest's readiness probe p and has the host's
// Prober start the next one; it never waits on the guest (decision 48). The result, when it
// differs from the one before, wakes this KVMDomain (domainevents.Watcher.Wake).
func (e *external) observeProbe(cr *v1alpha1.KVMDomain, p *v1alpha1.ReadinessProbe) {
	var r *probe.Result
	if e.probes != nil {
		r = e.probes.Observe(e.probeKey(cr), probeCheck(p, cr.Status.AtProvider.IPv4), e.dial)
	}
	reportProbe(cr, r)
}

// forgetProbe drops what the Prober knows of cr's probe: its domain stopped or goes away.
func (e *external) forgetProbe(cr *v1alpha1.KVMDomain) {
	if e.probes != nil {
		e.probes.Forget(e.probeKey(cr))
	}
}

func (e *external) probeKey(cr *v1alpha1.KVMDomain) probe.Key {
	return probe.Key{Host: e.host, Resource: types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}}
}

// reportProbe sets the probe's state and the Ready condition from r, the last result (nil: none
// yet). A domain whose status says passing stays Available until the first result of this
// process (a provider restart does not flip every Ready domain); one with no result yet is
// pending.
func reportProbe(cr *v1alpha1.KVMDomain, r *probe.Result) {
	at := &cr.Status.AtProvider
	switch {
	case r == nil && at.Probe == probePassing:
		cr.SetConditions(xpv2.Available())
	case r == nil:
		at.Probe = probePending
		cr.SetConditions(xpv2.Unavailable().WithMessage("readiness probe pending: it runs in the background, and its result is reported as soon as it ends"))
	case r.Err != nil:
		at.Probe = "failing: " + r.Err.Error()
		cr.SetConditions(xpv2.Unavailable().WithMessage("readiness probe " + at.Probe))
	default:
		at.Probe = probePassing
		cr.SetConditions(xpv2.Available())
	}
}
