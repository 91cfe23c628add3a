package hoststatus

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// Reasons of the Ready condition of a (Cluster)ProviderConfig.
const (
	// ReasonHostReady: SSH reachable, host key matches, libvirt answers every call of a read.
	ReasonHostReady xpv2.ConditionReason = "HostReady"
	// ReasonConfigError: the config or one of its Secrets cannot be read or used.
	ReasonConfigError xpv2.ConditionReason = "ConfigError"
	// ReasonHostKeyMismatch, ReasonHostKeyUnknown, ReasonHostKeyRevoked: the SSH server's host
	// key is not the pinned one (the message names both fingerprints), not pinned at all, or
	// revoked.
	ReasonHostKeyMismatch xpv2.ConditionReason = "HostKeyMismatch"
	ReasonHostKeyUnknown  xpv2.ConditionReason = "HostKeyUnknown"
	ReasonHostKeyRevoked  xpv2.ConditionReason = "HostKeyRevoked"
	// ReasonUnreachable: the SSH connection cannot be made (the dial or handshake error).
	ReasonUnreachable xpv2.ConditionReason = "Unreachable"
	// ReasonLibvirtUnavailable: the host was reached but libvirt's connection cannot be
	// opened (libvirtd stopped, its socket refused).
	ReasonLibvirtUnavailable xpv2.ConditionReason = "LibvirtUnavailable"
	// ReasonLibvirtError: libvirt failed a call of the read.
	ReasonLibvirtError xpv2.ConditionReason = "LibvirtError"
	// ReasonPrerequisiteMissing: the host lacks something the provider needs, named in the
	// message (a libvirt too old, the default pool, sshd's stream-local forwarding).
	ReasonPrerequisiteMissing xpv2.ConditionReason = "PrerequisiteMissing"
)

// Event reasons.
const (
	ReasonBecameUnready event.Reason = "HostUnready"
	ReasonBecameReady   event.Reason = "HostReady"
	ReasonPoolLow       event.Reason = "PoolLow"
	ReasonCordoned      event.Reason = "Cordoned"
	ReasonUncordoned    event.Reason = "Uncordoned"
)

// LowPoolPercent: a pool with less free space than this percentage of its capacity raises a
// warning event.
const LowPoolPercent = 10

const msgReady = "SSH reachable, host key matches, libvirt answers"

// Stage is the step of a status read that failed.
type Stage int

// Stages of a status read.
const (
	// StageConfig reads the config and its Secrets.
	StageConfig Stage = iota
	// StageConnect opens (or reuses) the host's pooled connection.
	StageConnect
	// StageRead makes the libvirt calls of the read.
	StageRead
)

// Condition is the Ready condition of a config whose read failed at stage with err, or
// succeeded (err nil). Its message is err's, which never holds a secret (hostconfig and host
// errors name objects and keys, never their content).
func Condition(stage Stage, err error) xpv2.Condition {
	c := xpv2.Condition{Type: xpv2.TypeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}
	if err == nil {
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonHostReady, msgReady
		return c
	}
	if stage != StageConfig {
		if pe := forwardingRefused(err); pe != nil {
			err = pe
		}
	}
	c.Message = err.Error()
	var hk *host.HostKeyError
	var pe *PrerequisiteError
	switch {
	case errors.As(err, &pe):
		c.Reason = ReasonPrerequisiteMissing
	case stage == StageConfig:
		c.Reason = ReasonConfigError
	case errors.As(err, &hk):
		c.Reason = map[host.HostKeyReason]xpv2.ConditionReason{
			host.HostKeyMismatch: ReasonHostKeyMismatch,
			host.HostKeyRevoked:  ReasonHostKeyRevoked,
		}[hk.Reason]
		if c.Reason == "" {
			c.Reason = ReasonHostKeyUnknown
		}
	case host.IsLibvirtOpenError(err):
		c.Reason = ReasonLibvirtUnavailable
	case stage == StageConnect:
		c.Reason = ReasonUnreachable
	default:
		c.Reason = ReasonLibvirtError
	}
	return c
}

// Usage sums what our domains and volumes take: domains that carry our ownership record
// (ours, by UUID), running or defined, and the volumes of ours in the pools read.
func Usage(r Reading) v1alpha1.HostUsage {
	var u v1alpha1.HostUsage
	var mem, vols uint64
	for _, d := range r.Domains {
		if !r.Ours[d.UUID()] {
			continue
		}
		u.Domains++
		if d.Active {
			u.RunningDomains++
		}
		u.VCPUs += int32(d.VCPUs)
		mem += d.MemoryBytes
	}
	for _, p := range r.Pools {
		for _, b := range p.Volumes {
			u.Volumes++
			vols += b
		}
	}
	u.Memory, u.VolumeBytes = quantity(mem), quantity(vols)
	return u
}

// quantity is n bytes as a Quantity.
func quantity(n uint64) *resource.Quantity {
	return resource.NewQuantity(int64(min(n, 1<<62)), resource.BinarySI)
}

// Figures is the status of the host at address from a successful read at now.
func Figures(address string, r Reading, now metav1.Time) *v1alpha1.HostStatus {
	s := &v1alpha1.HostStatus{
		Address:        address,
		LastSeen:       &now,
		LibvirtVersion: lv.Version(r.Node.LibvirtVersion),
		QEMUVersion:    lv.Version(r.Node.HypervisorVersion),
		CPUs:           r.Node.CPUs,
		MemoryTotal:    quantity(r.Node.MemoryBytes),
		MemoryFree:     quantity(r.FreeMemory),
		Managed:        Usage(r),
	}
	for _, p := range r.Pools {
		hp := v1alpha1.HostPool{Name: p.Name, Missing: p.Missing}
		if !p.Missing {
			hp.Active = p.Pool.Active
			hp.Capacity, hp.Allocation, hp.Available = quantity(p.Pool.CapacityBytes), quantity(p.Pool.AllocationBytes), quantity(p.Pool.AvailableBytes)
		}
		s.Pools = append(s.Pools, hp)
	}
	sort.Slice(s.Pools, func(i, j int) bool { return s.Pools[i].Name < s.Pools[j].Name })
	return s
}

// Next is the status after a read: cond is its Ready condition; hs the host's status when the
// read succeeded, nil when it failed (the figures of the last successful read stay, with
// their lastSeen, and only the address is updated).
func Next(old v1alpha1.ProviderConfigStatus, unschedulable bool, address string, cond xpv2.Condition, hs *v1alpha1.HostStatus) v1alpha1.ProviderConfigStatus {
	n := *old.DeepCopy()
	n.Unschedulable = unschedulable
	switch {
	case hs != nil:
		n.Host = hs
	case address != "":
		if n.Host == nil {
			n.Host = &v1alpha1.HostStatus{}
		}
		n.Host.Address = address
	}
	n.SetConditions(cond)
	return n
}

// lowPool is true for a pool with less than LowPoolPercent of its capacity available.
func lowPool(p v1alpha1.HostPool) bool {
	if p.Missing || !p.Active || p.Capacity == nil || p.Available == nil || p.Capacity.Value() <= 0 {
		return false
	}
	return p.Available.Value()*100 < p.Capacity.Value()*LowPoolPercent
}

// Events are the events a change of status from old to n raises on the config: a warning
// when the host becomes unready (or stays unready for another reason), a normal event when it
// is ready again, a warning for each pool that falls under LowPoolPercent free, and a normal
// event when the host is cordoned or uncordoned. Messages come from the status, which never
// holds a secret.
func Events(old, n v1alpha1.ProviderConfigStatus) []event.Event {
	var out []event.Event
	was, is := old.GetCondition(xpv2.TypeReady), n.GetCondition(xpv2.TypeReady)
	switch {
	case is.Status == corev1.ConditionFalse && (was.Status != corev1.ConditionFalse || was.Reason != is.Reason):
		out = append(out, event.Warning(ReasonBecameUnready, errors.Errorf("host is not ready (%s): %s", is.Reason, is.Message)))
	case is.Status == corev1.ConditionTrue && was.Status == corev1.ConditionFalse:
		out = append(out, event.Normal(ReasonBecameReady, "host is ready again: "+msgReady))
	}
	if n.Host != nil && is.Status == corev1.ConditionTrue {
		before := map[string]bool{}
		if old.Host != nil {
			for _, p := range old.Host.Pools {
				before[p.Name] = lowPool(p)
			}
		}
		for _, p := range n.Host.Pools {
			if lowPool(p) && !before[p.Name] {
				out = append(out, event.Warning(ReasonPoolLow, errors.Errorf("storage pool %s has %s of %s available, under %d%%",
					p.Name, p.Available.String(), p.Capacity.String(), LowPoolPercent)))
			}
		}
	}
	if old.Unschedulable != n.Unschedulable {
		if n.Unschedulable {
			out = append(out, event.Normal(ReasonCordoned, "host cordoned (spec.unschedulable): no new domains are created on it; those there keep running"))
		} else {
			out = append(out, event.Normal(ReasonUncordoned, "host uncordoned: new domains may be created on it"))
		}
	}
	return out
}

// describe is a short description of a status for logs.
func describe(s v1alpha1.ProviderConfigStatus) string {
	c := s.GetCondition(xpv2.TypeReady)
	return fmt.Sprintf("%s %s", c.Status, c.Reason)
}
