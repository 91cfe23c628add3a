package imagecache

import (
	"context"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errNotOurs   = "refusing to remove volume %q: it is not a BaseImage volume"
	errRemove    = "cannot remove volume %s from pool %s"
	errRestore   = "cannot restore the marker of volume %s"
	errClaimHeld = "volume %s in pool %s is claimed by an upload or removal that its provider process still renews; retrying later"
)

// sweeperUID names Sweep in the removal claims it writes: no BaseImage has it.
const sweeperUID = "provider-kvm-sweep"

// Removal is what Remove did.
type Removal struct {
	// Kept: other BaseImages still own the volume; only the caller's owner record was
	// removed. Owners counts the others (never who they are: they may be of other
	// namespaces).
	Kept   bool
	Owners int
	// Left: the caller was the last owner and let go of the volume: its record was removed
	// and the volume stays, published and without owners, for Sweep to remove once unused and
	// checkable. Either only disks of other namespaces use it (OtherUsers counts them, never
	// which they are), or nothing was seen to use it but its users could not be ruled out for
	// these reasons (Doubts).
	Left       bool
	OtherUsers int
	Doubts     []string
}

// Remove detaches the BaseImage ownerUID from volume (a name VolumeName returned) and deletes
// the volume, its marker and claim when no owner is left. Stale owner records (see
// WithLiveness) are deleted first. While other owners remain, only the caller's record goes
// (Removal.Kept). A volume already gone is success. The last owner's Remove fails with
// IsInUse, keeping its record (so the volume stays owned), while a volume in any pool backs
// onto it or a domain's disk uses it; Sweep's also while that cannot be ruled out where
// overlays of it can be (an inactive pool, a shut-off domain's disk whose backing chain
// libvirt does not show; see OverlayPools); the error says which.
// It fails with IsOwnedByOther for a volume the caller does not own whose publisher still
// exists, or that no record names. A BaseImage (ownerUID not "") that is the last owner of a
// volume nothing is seen to use, but whose users cannot be ruled out, lets go of it instead
// (Removal.Doubts): its record goes, the volume stays for Sweep. planRemove decides; Remove
// runs its steps under the base lock of the pool.
func (c *Cache) Remove(ctx context.Context, pool, volume, ownerUID string) (Removal, error) {
	if !IsVolumeName(volume) {
		return Removal{}, errors.Errorf(errNotOurs, volume)
	}
	unlock, err := c.lock(ctx, pool)
	if err != nil {
		return Removal{}, err
	}
	defer unlock()
	c.forget(pool, volume, ownerUID)
	defer c.forget(pool, volume, ownerUID)
	f, err := c.removeFacts(ctx, pool, volume, ownerUID)
	if err != nil {
		return Removal{}, err
	}
	p, err := c.planRemoveWithFacts(ctx, &f)
	if err != nil {
		return Removal{}, err
	}
	return c.removeSteps(ctx, f, p)
}

// removeFacts reads what planRemove starts from: the volume and the other live owners
// (deleting stale records), and how the claim stands.
func (c *Cache) removeFacts(ctx context.Context, pool, volume, ownerUID string) (removeFacts, error) {
	img, err := c.lookupSettled(ctx, pool, volume, ownerUID)
	if err != nil {
		return removeFacts{}, err
	}
	others, err := c.otherOwners(ctx, pool, volume, ownerUID)
	if err != nil {
		return removeFacts{}, err
	}
	f := removeFacts{img: img, uid: ownerUID, namespace: c.namespace, others: len(others), ourClaim: c.ours(img, ownerUID)}
	if ownerUID == "" {
		f.namespace = "" // Sweep owns no disks
	}
	return f, nil
}

// planRemoveWithFacts runs planRemove, finding each fact it asks for, until it decides.
func (c *Cache) planRemoveWithFacts(ctx context.Context, f *removeFacts) (removePlan, error) {
	for {
		p, err := planRemove(*f)
		if err != nil || p.Need == needNothing {
			return p, err
		}
		switch p.Need {
		case needPublisher:
			f.askedPublisher = true
			if f.publisherLive, err = c.ownerAlive(ctx, f.img.Owner); err != nil {
				return removePlan{}, err
			}
		case needUsers:
			// A scan of this host from the last few seconds will do: the check after
			// unpublishing reads the host afresh (inUse).
			u, err := c.usersRecent(ctx, f.img.Path)
			if err != nil {
				return removePlan{}, err
			}
			f.usage = &u
		case needLease:
			f.judgedLease, f.lease = true, c.claimLease(f.img)
		}
	}
}

// removeSteps runs p: detach, or claim, unpublish, check again and delete.
func (c *Cache) removeSteps(ctx context.Context, f removeFacts, p removePlan) (Removal, error) {
	img := f.img
	if p.Left {
		if _, err := c.detach(ctx, f, false, 0); err != nil {
			return Removal{}, err
		}
		return Removal{Left: true, OtherUsers: viewUsage(*f.usage, f.namespace).OtherUsers, Doubts: visibleDoubts(p.Doubts, f.namespace)}, nil
	}
	if p.Kept || p.Done {
		return c.detach(ctx, f, p.Kept, f.others)
	}
	if p.WriteClaim {
		if err := c.writeRemovalClaim(ctx, img, f.uid); err != nil {
			return Removal{}, err
		}
	}
	if p.Unpublish {
		if r, stop, err := c.unpublish(ctx, f); stop {
			return r, err
		}
	}
	for _, n := range p.Delete {
		if err := c.lv.DeleteVolume(ctx, img.Pool, n); err != nil {
			return Removal{}, errors.Wrapf(err, errRemove, img.Volume, img.Pool)
		}
		faultpoint.Reach(faultpoint.BaseRemoveDeleted)
	}
	return Removal{}, nil
}

// detach deletes the caller's owner record, if it has one: all a Remove does while other
// owners remain (kept), or of an image already gone.
func (c *Cache) detach(ctx context.Context, f removeFacts, kept bool, others int) (Removal, error) {
	if f.img.HasOwn {
		if err := c.lv.DeleteVolume(ctx, f.img.Pool, OwnerName(f.img.Volume, f.uid)); err != nil {
			return Removal{}, errors.Wrapf(err, errRemove, f.img.Volume, f.img.Pool)
		}
	}
	if !kept {
		return Removal{}, nil
	}
	return Removal{Kept: true, Owners: others}, nil
}

// writeRemovalClaim writes the "removing" claim of img's volume for uid (Sweep's name when
// "").
func (c *Cache) writeRemovalClaim(ctx context.Context, img Image, uid string) error {
	remover := Owner{UID: uid, ClusterID: c.clusterID}
	if uid == "" {
		remover.UID = sweeperUID // a record must name someone
	}
	claim := Record{State: RecordRemoving, Volume: img.Volume, Owner: remover, Holder: c.holder, Time: c.now().UTC()}
	if img.Marker != nil {
		claim.SourceURL, claim.Format = img.Marker.SourceURL, img.Marker.Format
	}
	if err := c.writeRecord(ctx, img.Pool, ClaimName(img.Volume), claim); err != nil && !libvirt.IsExists(err) {
		return errors.Wrapf(err, errRemove, img.Volume, img.Pool)
	}
	faultpoint.Reach(faultpoint.BaseRemoveClaim)
	return nil
}

// unpublish deletes the marker, then looks for owners and users again (an overlay created by
// another process, within this one the base lock excludes it, or an owner added meanwhile).
// stop tells that the removal ends here, with r and err: the marker restored, the claim
// dropped.
func (c *Cache) unpublish(ctx context.Context, f removeFacts) (r Removal, stop bool, err error) {
	img := f.img
	if err := c.lv.DeleteVolume(ctx, img.Pool, MarkerName(img.Volume)); err != nil {
		return Removal{}, true, errors.Wrapf(err, errRemove, img.Volume, img.Pool)
	}
	faultpoint.Reach(faultpoint.BaseRemoveMarker)
	others, oerr := c.otherOwners(ctx, img.Pool, img.Volume, f.uid)
	uerr := c.inUse(ctx, img)
	p, perr := planRecheck(img, len(others), oerr, uerr)
	if p.Restore {
		if werr := c.writeRecord(ctx, img.Pool, MarkerName(img.Volume), *img.Marker); werr != nil {
			return Removal{}, true, errors.Wrapf(werr, errRestore, img.Volume)
		}
	}
	if p.DropClaim {
		_ = c.lv.DeleteVolume(ctx, img.Pool, ClaimName(img.Volume))
	}
	switch {
	case perr != nil:
		return Removal{}, true, perr
	case p.Kept:
		r, err := c.detach(ctx, f, true, len(others))
		return r, true, err
	}
	return Removal{}, false, nil
}

// inUse fails with an InUseError while img's data volume is in use, or that cannot be ruled
// out.
func (c *Cache) inUse(ctx context.Context, img Image) error {
	if !img.HasData {
		return nil
	}
	u, err := c.Users(ctx, img.Path)
	if err != nil {
		return err
	}
	if u.InUse() {
		return &InUseError{Pool: img.Pool, Volume: img.Volume, Users: u.Users, Doubts: u.Doubts, Namespace: c.namespace}
	}
	return nil
}
