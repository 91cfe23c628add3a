package kvmdomain

import (
	"context"
	"fmt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errPoolRoom   = "cannot read the free space of storage pool %s"
	errResume     = "cannot resume the domain QEMU paused on an I/O error"
	msgPausedIO   = "domain is Paused: QEMU paused it when a write to its disk failed (its storage pool %s is full, or was); it is resumed once the pool has %d MiB free (limits.minFreePoolMiB of %s)"
	msgResumed    = "resumed the guest QEMU had paused on an I/O error: storage pool %s has %d MiB free again"
	reasonResumed = event.Reason("ResumedAfterIOError")
)

// rootDiskBytes is the capacity the overlay of a new domain gets: diskSizeGiB, or its base
// image's virtual size when that is larger.
func rootDiskBytes(cr *v1alpha1.KVMDomain, base *v1alpha1.BaseImage) uint64 {
	capacity := uint64(max(base.Status.AtProvider.VirtualSizeBytes, 0))
	if g := cr.Spec.ForProvider.DiskSizeGiB; g != nil {
		capacity = max(capacity, uint64(*g)<<30)
	}
	return capacity
}

// checkSize refuses, before anything is made on the host, a new domain over the config's
// size caps (limits.maxVCPU, maxMemoryMiB, maxDiskSizeGiB). Domains that exist are left
// alone: Update's resize is not refused.
func (e *external) checkSize(cr *v1alpha1.KVMDomain, base *v1alpha1.BaseImage) error {
	p := cr.Spec.ForProvider
	return e.limits.Domain(int64(p.VCPU), int64(p.MemoryMiB), rootDiskBytes(cr, base))
}

// checkCount refuses a new domain when its namespace has limits.maxDomainsPerNamespace domains
// on the host already, counted among defs by their ownership marks. Create asks it before
// anything is made, and again under the host's lock right before the definition, so that two
// creates at once cannot both take the last slot.
func (e *external) checkCount(cr *v1alpha1.KVMDomain, defs []string) error {
	if e.limits.MaxDomainsPerNamespace <= 0 {
		return nil
	}
	n, err := hostlimits.CountDomains(defs, cr.GetNamespace(), string(cr.GetUID()))
	if err != nil {
		return errors.Wrap(err, errMACCheck)
	}
	return e.limits.DomainCount(n)
}

// checkPoolRoom refuses a new overlay in a pool with less than limits.minFreePoolMiB free: a
// guest on a full pool is paused by QEMU at its first write.
func (e *external) checkPoolRoom(ctx context.Context, pool string) error {
	p, err := e.lv.Pool(ctx, pool)
	if err != nil {
		return errors.Wrapf(err, errPoolRoom, pool)
	}
	return e.limits.Room(pool, p.AvailableBytes, 0)
}

// resumeAfterIOError resumes a domain that QEMU paused on an I/O error once its root disk's
// pool has room again, says so in an event and marks d running; otherwise, while the pool is
// still full, it returns why the domain stays paused (for the Ready condition). A domain
// paused for another reason (the user's virsh suspend, ...), an import, or one whose resource
// wants it stopped is never resumed.
func (e *external) resumeAfterIOError(ctx context.Context, cr *v1alpha1.KVMDomain, t target, d *libvirt.DomainInfo, imported bool) (string, error) {
	want := cr.Spec.ForProvider.PowerState != v1alpha1.PowerStateStopped
	if d.State != libvirt.StatePaused || !d.PausedIOError || !want || imported || e.observeOnly(cr) {
		return "", nil
	}
	// libvirt's figures of a directory pool are those of its last refresh (and of the volumes
	// made and deleted through it since): the guest's own writes, which filled the pool, are
	// not in them. Read the pool afresh, or the guest is resumed into a pool that is still
	// full and pauses again at once. Only a guest paused on an I/O error costs this.
	if err := e.lv.RefreshPool(ctx, t.pool); err != nil {
		return "", errors.Wrapf(err, errPoolRoom, t.pool)
	}
	p, err := e.lv.Pool(ctx, t.pool)
	if err != nil {
		return "", errors.Wrapf(err, errPoolRoom, t.pool)
	}
	if !e.limits.Resume(hostlimits.PausedIOError, want, p.AvailableBytes) {
		return fmt.Sprintf(msgPausedIO, t.pool, max(e.limits.MarginBytes()>>20, 1), e.limits.Source), nil
	}
	if err := e.lv.ResumeDomain(ctx, d.Name); err != nil {
		return "", errors.Wrap(err, errResume)
	}
	e.recorder.Event(cr, event.Normal(reasonResumed, fmt.Sprintf(msgResumed, t.pool, p.AvailableBytes>>20)))
	d.State, d.PausedIOError = libvirt.StateRunning, false
	return "", nil
}
