// Package placement decides where a Proxy that names no host runs, and whether a new domain
// fits on a host. Both use the same arithmetic (Room): what the provider's own domains already
// hold on a host, against the host's CPUs and memory times the host's allocation ratios
// (ClusterProviderConfig spec.allocation). The function places with it (internal/function);
// the provider refuses, under its per-host lock, a new domain that does not fit
// (internal/controller/kvmdomain), so two placements made from the same view of a host cannot
// both take its last room. Nothing here talks to libvirt or Kubernetes.
package placement

import (
	"fmt"
	"sort"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

const mib = 1 << 20

// ErrHostFull starts the message of a refused domain: the provider's Synced=False message
// holds it, and the function recognises it by it.
const ErrHostFull = "host full"

// Ratios are a host's allocation ratios.
type Ratios struct {
	CPU, Memory float64
}

// HostOf is a ClusterProviderConfig as placement sees it: its Ready condition, cordon,
// allocation ratios, and the size and usage the provider's host status controller wrote.
func HostOf(c *v1alpha1.ClusterProviderConfig) Host {
	h := Host{Name: c.GetName(), Unschedulable: c.Spec.Unschedulable, Evacuating: c.Spec.Unschedulable && c.Spec.Evacuate}
	h.Ready = c.GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue
	h.Ratios, h.RatiosErr = RatiosOf(c.Spec.Allocation)
	if s := c.Status.Host; s != nil {
		h.Size.VCPUs = int64(s.CPUs)
		if s.MemoryTotal != nil {
			h.Size.MemoryBytes = s.MemoryTotal.Value()
		}
		h.Used.VCPUs = int64(s.Managed.VCPUs)
		if s.Managed.Memory != nil {
			h.Used.MemoryBytes = s.Managed.Memory.Value()
		}
	}
	return h
}

// RatiosOf returns the ratios a host's spec.allocation gives, each defaulted when unset. A
// ratio that is not above zero is an error naming the field.
func RatiosOf(a *v1alpha1.AllocationRatios) (Ratios, error) {
	cpu, mem := resource.MustParse(v1alpha1.DefaultCPUAllocationRatio), resource.MustParse(v1alpha1.DefaultMemoryAllocationRatio)
	r := Ratios{CPU: cpu.AsApproximateFloat64(), Memory: mem.AsApproximateFloat64()}
	if a == nil {
		return r, nil
	}
	if a.CPU != nil {
		r.CPU = a.CPU.AsApproximateFloat64()
		if r.CPU <= 0 {
			return r, errors.Errorf("spec.allocation.cpu must be above 0, got %s", a.CPU.String())
		}
	}
	if a.Memory != nil {
		r.Memory = a.Memory.AsApproximateFloat64()
		if r.Memory <= 0 {
			return r, errors.Errorf("spec.allocation.memory must be above 0, got %s", a.Memory.String())
		}
	}
	return r, nil
}

// Size is CPU and memory: a host's, what domains hold, or what one asks for.
type Size struct {
	VCPUs       int64
	MemoryBytes int64
}

// Room is what is left on a host of the given size, whose provider domains hold used, under
// ratios r. It may be negative (a host committed beyond its ratios, e.g. after they were
// lowered).
func Room(host, used Size, r Ratios) Size {
	return Size{
		VCPUs:       int64(float64(host.VCPUs)*r.CPU) - used.VCPUs,
		MemoryBytes: int64(float64(host.MemoryBytes)*r.Memory) - used.MemoryBytes,
	}
}

// Fit says why want does not fit in room: "" when it fits.
func Fit(room, want Size) string {
	var why []string
	if want.MemoryBytes > room.MemoryBytes {
		why = append(why, fmt.Sprintf("needs %d MiB of memory, %d MiB left", want.MemoryBytes/mib, max(room.MemoryBytes, 0)/mib))
	}
	if want.VCPUs > room.VCPUs {
		why = append(why, fmt.Sprintf("needs %d vCPUs, %d left", want.VCPUs, max(room.VCPUs, 0)))
	}
	return strings.Join(why, " and ")
}

// Host is a candidate host as its ClusterProviderConfig tells it.
type Host struct {
	Name string
	// Ready is the config's Ready condition: the provider read the host on its last poll.
	Ready bool
	// Unschedulable is the config's spec.unschedulable: the host is cordoned.
	Unschedulable bool
	// Evacuating is the config's spec.evacuate (on a cordoned host): what was placed on it
	// moves to other hosts.
	Evacuating bool
	// Size is the host's CPUs and memory, Used what the provider's domains hold there.
	Size, Used Size
	// Ratios are the host's allocation ratios; RatiosErr says why they are invalid.
	Ratios    Ratios
	RatiosErr error
	// Excluded says why the Proxy may not go to this host whatever its room (its BaseImage is
	// on another host, the host does not admit its namespace); "" none.
	Excluded string
}

// Skip is a host placement passed over, and why.
type Skip struct {
	Host   string
	Reason string
}

// Decision is the outcome of Place: the chosen host ("" when none fits) and every host passed
// over, in name order.
type Decision struct {
	Host    string
	Room    Size // what is left on Host once want is placed there
	Skipped []Skip
}

// Place chooses, among hosts, the one where want fits with the most memory left once placed;
// ties go to the most vCPUs left, then to the first name. Unready, cordoned and full hosts are
// skipped, each with its reason.
func Place(hosts []Host, want Size) Decision {
	hs := append([]Host(nil), hosts...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })
	var d Decision
	found := false
	for _, h := range hs {
		room := Room(h.Size, h.Used, h.Ratios)
		why := ""
		switch {
		case h.Excluded != "":
			why = h.Excluded
		case !h.Ready:
			why = "not Ready (the provider could not read it on its last poll)"
		case h.Evacuating:
			why = "evacuating (spec.evacuate)"
		case h.Unschedulable:
			why = "cordoned (spec.unschedulable)"
		case h.RatiosErr != nil:
			why = h.RatiosErr.Error()
		case h.Size.VCPUs == 0 || h.Size.MemoryBytes == 0:
			why = "its CPUs and memory are not known yet"
		default:
			why = Fit(room, want)
		}
		if why != "" {
			d.Skipped = append(d.Skipped, Skip{Host: h.Name, Reason: why})
			continue
		}
		left := Size{VCPUs: room.VCPUs - want.VCPUs, MemoryBytes: room.MemoryBytes - want.MemoryBytes}
		if !found || left.MemoryBytes > d.Room.MemoryBytes || (left.MemoryBytes == d.Room.MemoryBytes && left.VCPUs > d.Room.VCPUs) {
			d.Host, d.Room, found = h.Name, left, true
		}
	}
	return d
}

// Why is the one-line account of a decision that placed nothing: each host and why it was
// skipped.
func (d Decision) Why() string {
	if len(d.Skipped) == 0 {
		return "no host (ClusterProviderConfig) matches"
	}
	parts := make([]string, len(d.Skipped))
	for i, s := range d.Skipped {
		parts[i] = s.Host + ": " + s.Reason
	}
	return "no host fits: " + strings.Join(parts, "; ")
}
