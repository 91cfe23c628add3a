package kvmdomain

import (
	"context"
	"fmt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// overlay creates the root disk overlay unless an earlier attempt did. Its ownership record
// comes first, so the overlay never exists without one; an overlay of our name that is not
// ours is never used.
func (e *external) overlay(ctx context.Context, cr *v1alpha1.KVMDomain, t target, base *v1alpha1.BaseImage) error {
	if _, err := e.lv.Volume(ctx, t.pool, t.overlay); err == nil {
		return errors.Wrap(e.records.VerifyFresh(ctx, e.lv, e.host, t.pool, t.overlay, t.owner), errOverlay)
	} else if !libvirt.IsNotFound(err) {
		return errors.Wrap(err, errOverlay)
	}
	if err := e.checkPoolRoom(ctx, t.pool); err != nil {
		return err
	}
	capacity := uint64(base.Status.AtProvider.VirtualSizeBytes)
	if g := cr.Spec.ForProvider.DiskSizeGiB; g != nil {
		want := uint64(*g) << 30
		if want < capacity {
			return errors.Errorf(errDiskTooSmall, *g, capacity)
		}
		capacity = want
	}
	format := string(base.Spec.ForProvider.Format)
	if format == "" {
		format = string(v1alpha1.ImageFormatQCOW2)
	}
	// The backing file is looked up on the host by a base image volume name, never taken as a
	// path from status: an overlay can only ever back onto a cached base image.
	bv, bp := base.Status.AtProvider.VolumeName, base.Status.AtProvider.Pool
	if bp == "" {
		bp = t.pool
	}
	if !imagecache.IsVolumeName(bv) {
		return errors.Errorf(errNotABase, base.GetName(), bv)
	}
	return e.createOverlay(ctx, t, bp, bv, capacity, format)
}

// createOverlay creates the overlay onto the base volume bv of pool bp, through the image
// cache's one way of doing so (imagecache.Shared.CreateOverlay): only while the base is
// published, and never between a removal's check for overlays and its delete.
func (e *external) createOverlay(ctx context.Context, t target, bp, bv string, capacity uint64, format string) error {
	create := func(basePath string) error {
		x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: t.overlay, Format: "qcow2", CapacityBytes: capacity,
			BackingStorePath: basePath, BackingStoreFormat: format})
		if err != nil {
			return err
		}
		if err := e.records.Claim(ctx, e.lv, e.host, t.pool, t.overlay, t.owner); err != nil {
			return err
		}
		faultpoint.Reach(faultpoint.DomainOverlayRecord)
		if _, err := e.lv.CreateVolume(ctx, t.pool, x); err != nil && !libvirt.IsExists(err) {
			return err
		}
		faultpoint.Reach(faultpoint.DomainOverlayCreated)
		return nil
	}
	undo := func() error { return e.lv.DeleteVolume(ctx, t.pool, t.overlay) }
	return errors.Wrap(e.images.CreateOverlay(ctx, e.lv, bp, bv, create, undo), errOverlay)
}

// diskToGrow returns how many bytes the overlay lacks of diskSizeGiB (0: none).
func (e *external) diskToGrow(ctx context.Context, cr *v1alpha1.KVMDomain, t target) (uint64, error) {
	g := cr.Spec.ForProvider.DiskSizeGiB
	if g == nil {
		return 0, nil
	}
	v, err := e.lv.Volume(ctx, t.pool, t.overlay)
	if err != nil {
		return 0, errors.Wrap(err, errLookup)
	}
	if want := uint64(*g) << 30; want > v.CapacityBytes {
		return want - v.CapacityBytes, nil
	}
	return 0, nil
}

// growDisk grows the overlay to diskSizeGiB: through QEMU while the guest runs (it holds the
// image open), else on the volume. The guest's partition and filesystem are its own to grow.
func (e *external) growDisk(ctx context.Context, cr *v1alpha1.KVMDomain, t target, d libvirt.DomainInfo) error {
	grow, err := e.diskToGrow(ctx, cr, t)
	if err != nil || grow == 0 {
		return err
	}
	if err := e.records.VerifyFresh(ctx, e.lv, e.host, t.pool, t.overlay, t.owner); err != nil {
		return errors.Wrap(err, errResizeOverlay)
	}
	want := uint64(*cr.Spec.ForProvider.DiskSizeGiB) << 30
	v, err := e.lv.Volume(ctx, t.pool, t.overlay)
	if err != nil {
		return errors.Wrap(err, errResizeOverlay)
	}
	if d.State == libvirt.StateRunning || d.State == libvirt.StatePaused {
		err = e.lv.BlockResize(ctx, d.Name, v.Path, want)
	} else {
		err = e.lv.ResizeVolume(ctx, t.pool, t.overlay, want)
	}
	if err != nil {
		return errors.Wrap(err, errResizeOverlay)
	}
	e.recorder.Event(cr, event.Normal(reasonDiskGrown, fmt.Sprintf(
		"root disk grown to %d GiB: the guest must grow its partition and filesystem (cloud-init's growpart does so at boot)", *cr.Spec.ForProvider.DiskSizeGiB)))
	return nil
}

func (e *external) Create(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalCreation, error) {
	// Observe found no domain: a new one is never placed on a cordoned host. The managed
	// reconciler raises the warning event and sets Synced=False with this error.
	if err := cordoned(e.unschedulable, e.host, e.source); err != nil {
		return managed.ExternalCreation{}, err
	}
	cr.SetConditions(xpv2.Creating())
	in, err := e.inputs(ctx, cr)
	if err != nil {
		return managed.ExternalCreation{}, err
	}
	if e.consoleInPool {
		p, err := e.lv.Pool(ctx, e.target(cr).pool)
		if err != nil {
			return managed.ExternalCreation{}, errors.Wrap(err, "cannot look up the pool for the console log")
		}
		in.consoleLog = consoleLogFor(true, p, e.target(cr).domain)
	}
	x, err := e.spec(cr, in, "")
	if err != nil {
		return managed.ExternalCreation{}, err
	}
	t := e.target(cr)
	if _, err := e.observed(cr, t); err != nil {
		return managed.ExternalCreation{}, err
	}
	// Refusals come before anything is made on the host.
	if err := e.checkSize(cr, in.base); err != nil {
		return managed.ExternalCreation{}, err
	}
	if err := e.checkGrants(ctx, cr, t); err != nil {
		return managed.ExternalCreation{}, err
	}
	if err := e.overlay(ctx, cr, t, in.base); err != nil {
		return managed.ExternalCreation{}, err
	}
	// Observe found no domain of this name; if one appeared since, DefineDomain of a domain
	// with another UUID fails and nothing of it is touched.
	if err := e.define(ctx, cr, x); err != nil {
		return managed.ExternalCreation{}, err
	}
	faultpoint.Reach(faultpoint.DomainDefined)
	name := t.domain
	if cr.Spec.ForProvider.Autostart {
		if err := e.lv.SetAutostart(ctx, name, true); err != nil {
			return managed.ExternalCreation{}, err
		}
	}
	if cr.Spec.ForProvider.PowerState != v1alpha1.PowerStateStopped {
		if err := e.lv.StartDomain(ctx, name); err != nil {
			return managed.ExternalCreation{}, err
		}
		faultpoint.Reach(faultpoint.DomainStarted)
	}
	return managed.ExternalCreation{}, nil
}

// define defines a new domain under the host's lock, checking again that its MAC address is
// still unique and its namespace under its domain limit (another KVMDomain may have taken
// either since checkGrants), and that the host has room for it (room.go): two domains placed
// on the host from the same view of it cannot both take its last room. One that lost the last
// slot this way leaves its overlay, which its deletion removes.
func (e *external) define(ctx context.Context, cr *v1alpha1.KVMDomain, x string) error {
	unlock, err := e.defines.lock(ctx, e.host)
	if err != nil {
		return err
	}
	defer unlock()
	// One reading of the host's domains serves both checks.
	defs, err := e.lv.DomainDefinitions(ctx)
	if err != nil {
		return errors.Wrap(err, errMACCheck)
	}
	if err := e.checkMACIn(cr, defs); err != nil {
		return err
	}
	if err := e.checkRoom(ctx, cr, defs); err != nil {
		return err
	}
	return e.lv.DefineDomain(ctx, x)
}

// resize puts new vcpu and memory into the persistent definition; a running guest sees them at
// its next boot, and status.atProvider.restartPending says so.
func (e *external) resize(ctx context.Context, cr *v1alpha1.KVMDomain, d libvirt.DomainInfo) error {
	persistent, err := domainxml.SizeOf(d.InactiveXML)
	if err != nil || persistent == wantSize(cr) {
		return err
	}
	in, err := e.inputs(ctx, cr)
	if err != nil {
		return err
	}
	in.consoleLog, _ = domainxml.ConsoleLogOf(d.InactiveXML) // a redefinition keeps its log
	x, err := e.spec(cr, in, d.UUID)
	if err != nil {
		return err
	}
	if err := e.lv.DefineDomain(ctx, x); err != nil {
		return err
	}
	if d.State == libvirt.StateRunning {
		e.recorder.Event(cr, event.Normal(reasonRestartPending, "vcpu/memory changed: the new values apply at the guest's next restart"))
	}
	return nil
}

// switchSeed points the domain's seed cdrom at the SeedVolume's current volume once that is
// verified (Ready): the definition is redefined (so the next boot reads it, and the ownership
// mark records the new digest), and a running domain gets the new medium at once, so even a
// reboot from inside the guest reads it. The volume the guest read before is left to the
// SeedVolume, which removes it once no domain uses it.
func (e *external) switchSeed(ctx context.Context, cr *v1alpha1.KVMDomain, d *libvirt.DomainInfo) error {
	want := e.seedWanted(ctx, cr)
	if want == nil {
		return nil
	}
	def, live := seedSwitches(*d, *want, d.State == libvirt.StateRunning)
	if !def && !live {
		return nil
	}
	x, err := e.respec(ctx, cr, *d)
	if err != nil {
		return err
	}
	if def {
		if err := e.lv.DefineDomain(ctx, x); err != nil {
			return err
		}
		d.InactiveXML = x
	}
	if live {
		disk, err := domainxml.SeedDisk(x)
		if err != nil {
			return err
		}
		if err := e.lv.ChangeMedia(ctx, d.Name, disk); err != nil {
			return err
		}
	}
	e.recorder.Event(cr, event.Normal(reasonSeedSwitched, "The seed cdrom now reads "+want.Name+"; the guest reads it at its next boot"))
	return nil
}

// respec builds the definition of an existing domain d again from cr and its inputs. The
// overlay keeps backing onto the base it was made from: the ownership mark keeps saying so.
func (e *external) respec(ctx context.Context, cr *v1alpha1.KVMDomain, d libvirt.DomainInfo) (string, error) {
	in, err := e.inputs(ctx, cr)
	if err != nil {
		return "", err
	}
	if o, err := domainxml.OwnerOf(d.InactiveXML); err == nil && o != nil && o.BaseVolume != "" {
		in.base = in.base.DeepCopy()
		in.base.Status.AtProvider.VolumeName = o.BaseVolume
	}
	in.consoleLog, _ = domainxml.ConsoleLogOf(d.InactiveXML) // a redefinition keeps its log
	return e.spec(cr, in, d.UUID)
}

func (e *external) Update(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalUpdate, error) {
	t := e.target(cr)
	name := t.domain
	if _, err := e.observed(cr, t); err != nil {
		return managed.ExternalUpdate{}, err
	}
	d, err := e.lv.Domain(ctx, name)
	if err != nil {
		return managed.ExternalUpdate{}, errors.Wrap(err, errLookup)
	}
	if err := checkOwner(d, cr); err != nil {
		return managed.ExternalUpdate{}, err
	}
	want := cr.Spec.ForProvider
	if err := e.growDisk(ctx, cr, t, d); err != nil {
		return managed.ExternalUpdate{}, err
	}

	if err := e.switchSeed(ctx, cr, &d); err != nil {
		return managed.ExternalUpdate{}, err
	}
	if err := e.resize(ctx, cr, d); err != nil {
		return managed.ExternalUpdate{}, err
	}
	if d.Autostart != want.Autostart {
		if err := e.lv.SetAutostart(ctx, name, want.Autostart); err != nil {
			return managed.ExternalUpdate{}, err
		}
	}

	switch {
	case want.PowerState == v1alpha1.PowerStateStopped && d.State != libvirt.StateShutOff:
		return managed.ExternalUpdate{}, e.powerOff(ctx, cr, name, d.State)
	case want.PowerState != v1alpha1.PowerStateStopped && d.State == libvirt.StateShutOff:
		e.shutdowns.done(cr.GetUID())
		return managed.ExternalUpdate{}, e.lv.StartDomain(ctx, name)
	}
	return managed.ExternalUpdate{}, nil
}
