package kvmdomain

import (
	"context"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/placement"
)

const (
	errRoomCheck = "cannot check the host's room for a new domain"
	// errHostFull starts with placement.ErrHostFull, which the Proxy function recognises.
	errHostFull = placement.ErrHostFull + ": %s (%s) has no room for this domain: it %s, at allocation ratios cpu %.4g and memory %.4g (%s spec.allocation); the provider's domains on it hold %d vCPUs and %d MiB. The domain is created once room is made (a domain deleted, the ratios raised)"
)

// checkRoom refuses a new domain that does not fit on its host: the vCPUs and memory of the
// domains that carry the provider's ownership mark (whatever their namespace; only their sum is
// told), with this one's, must stay within the host's CPUs and memory times the config's
// allocation ratios (internal/placement, the figures Proxy placement uses). It runs under the
// host's lock (define), on the domains actually defined, so two domains placed from the same
// stale view of the host cannot both take its last room. The managed reconciler shows the
// refusal as Synced=False ("create failed: host full: ...") and a CannotCreateExternalResource
// warning event, and retries with its backoff.
// defs are the host's domain definitions, read by define under the lock.
func (e *external) checkRoom(ctx context.Context, cr *v1alpha1.KVMDomain, defs []string) error {
	r, err := placement.RatiosOf(e.allocation)
	if err != nil {
		return errors.Wrapf(err, "%s", e.source)
	}
	node, err := e.lv.NodeInfo(ctx)
	if err != nil {
		return errors.Wrap(err, errRoomCheck)
	}
	return roomFor(defs, node, r, string(cr.GetUID()), wantSize(cr), e.host, e.source)
}

// roomFor is checkRoom's decision: nil when want fits on the host of node, whose domains are
// defs, under ratios r; the domain of uid (this resource's) is not counted.
func roomFor(defs []string, node libvirt.NodeInfo, r placement.Ratios, uid string, want domainxml.Size, host, source string) error {
	used, err := ourUsage(defs, uid)
	if err != nil {
		return errors.Wrap(err, errRoomCheck)
	}
	size := placement.Size{VCPUs: int64(node.CPUs), MemoryBytes: int64(node.MemoryBytes)}
	w := placement.Size{VCPUs: int64(want.VCPU), MemoryBytes: int64(want.MemoryMiB) << 20}
	why := placement.Fit(placement.Room(size, used, r), w)
	if why == "" {
		return nil
	}
	return errors.Errorf(errHostFull, host, source, why, r.CPU, r.Memory, source, used.VCPUs, used.MemoryBytes>>20)
}

// ourUsage sums the vCPUs and memory of the domains among defs that carry the provider's
// ownership mark, but for the one of uid.
func ourUsage(defs []string, uid string) (placement.Size, error) {
	var used placement.Size
	for _, d := range defs {
		o, err := domainxml.OwnerOf(d)
		if err != nil {
			return used, err
		}
		if o == nil || o.ManagedBy != domainxml.ManagedBy || o.UID == "" || o.UID == uid {
			continue
		}
		s, err := domainxml.SizeOf(d)
		if err != nil {
			return used, err
		}
		used.VCPUs += int64(s.VCPU)
		used.MemoryBytes += int64(s.MemoryMiB) << 20
	}
	return used, nil
}
