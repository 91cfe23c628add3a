package imagecache

import (
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// The decisions of Publish and Remove, without I/O: what the host holds goes in, the steps to
// take come out. publish.go and remove.go run them.

// publishPlan is what one step of Publish does, given what is on the host (see planPublish).
type publishPlan struct {
	// Reuse: the image is published with the digest asked for; nothing is downloaded.
	Reuse bool
	// DropClaim: a claim of ours was left next to the published image.
	DropClaim bool
	// Wait: another live owner is uploading (or removing) the image; look again later.
	Wait bool
	// CheckUsers: a data volume exists; before it is deleted, no overlay may use it.
	CheckUsers bool
	// Delete lists the debris to remove, in order: marker, data, claim.
	Delete []string
	// WriteClaim: our claim must be written before the upload.
	WriteClaim bool
}

// planPublish decides, without I/O, what Publish does with img on behalf of owner, for the
// image src (with its digest). live holds the UIDs of the other owners whose records are
// live; ourClaim tells that the claim (if any) is one this process holds for owner, l how
// fresh it is otherwise (see claimRenew). A published image is reused only when its marker
// records exactly src's digest and format. A claim that is not ours is waited for while its
// holder renews it, whichever BaseImage it names; one whose freshness cannot be told is
// waited for while it names another live owner, as before leases. A stale claim, or one of an
// owner that is gone, is debris anyone may clean. Data that no record names is refused (we
// write the claim before the data and drop it only after the marker, so such data was never
// ours).
func planPublish(img Image, owner Owner, src Source, live map[string]bool, ourClaim bool, l lease) (publishPlan, error) {
	if img.State == StatePublished {
		if img.Marker.SHA256 != src.SHA256 || img.Marker.Format != src.Format.OrDefault() {
			return publishPlan{}, errors.Errorf(errOtherDigest, img.Volume, img.Pool, img.Marker.SHA256, img.Marker.Format, src.SHA256, src.Format.OrDefault())
		}
		return publishPlan{Reuse: true, DropClaim: ourClaim}, nil
	}
	if img.HasClaim && !ourClaim {
		switch {
		case l == leaseFresh:
			return publishPlan{Wait: true}, nil
		case l == leaseUnknown && img.Claim != nil && img.Claim.Owner.UID != owner.UID && live[img.Claim.Owner.UID]:
			return publishPlan{Wait: true}, nil
		}
	}
	if img.HasData && img.Owner.UID == "" && !img.HasClaim {
		return publishPlan{}, &OwnedByOtherError{Pool: img.Pool, Volume: img.Volume}
	}
	return planClean(img), nil
}

// planClean is the plan for debris (ours, stale, of owners that are gone, torn records) or
// nothing: start clean, with a claim of our own written anew (its bytes are what the lease
// renews).
func planClean(img Image) publishPlan {
	p := publishPlan{CheckUsers: img.HasData, WriteClaim: true}
	if img.HasMarker {
		p.Delete = append(p.Delete, MarkerName(img.Volume))
	}
	if img.HasData {
		p.Delete = append(p.Delete, img.Volume)
	}
	if img.HasClaim {
		p.Delete = append(p.Delete, ClaimName(img.Volume))
	}
	return p
}

// uploaded is what an upload wrote, for verifyUpload.
type uploaded struct {
	// N bytes were streamed; Total were announced (0: unknown); Physical are on the host.
	N, Total, Physical int64
	SHA256             string
	// VirtualSize from the qcow2 header (0 for raw).
	VirtualSize int64
}

// verifyUpload decides, without I/O, whether the stored volume is the complete image src asks
// for, and returns the virtual size a guest sees.
func verifyUpload(src Source, shownURL, vol string, u uploaded) (int64, error) {
	if u.Total > 0 && u.N != u.Total {
		return 0, errors.Errorf(errSize, shownURL, u.N, u.Total)
	}
	if src.SHA256 != "" && u.SHA256 != src.SHA256 {
		return 0, &DigestMismatchError{URL: shownURL, Want: src.SHA256, Got: u.SHA256}
	}
	if u.Physical != u.N {
		return 0, errors.Errorf(errPhysical, vol, u.Physical, u.N)
	}
	if src.Format == FormatRaw {
		return u.N, nil
	}
	return u.VirtualSize, nil
}

// removeFacts is what Remove knows of the host when it decides.
type removeFacts struct {
	// img is the volume as lookupSettled saw it, with the caller's owner record.
	img Image
	// uid is the caller's UID ("" for Sweep).
	uid string
	// namespace of the caller (WithNamespace; "" for Sweep): its disks keep its record.
	namespace string
	// others counts the live owners besides the caller (stale records are already deleted).
	others int
	// publisherLive tells, once asked (askedPublisher), whether the one owner a volume from
	// before shared images names still exists.
	askedPublisher, publisherLive bool
	// usage is what uses the data volume, once found (nil: not yet).
	usage *Usage
	// ourClaim: the claim is an upload claim this process holds for uid; else lease tells how
	// fresh it is, once judged (judgedLease).
	ourClaim, judgedLease bool
	lease                 lease
}

// removeNeed is a fact planRemove lacks; Remove finds it and plans again.
type removeNeed int

const (
	needNothing removeNeed = iota
	// needPublisher: ask the Liveness whether the publisher of a legacy volume exists.
	needPublisher
	// needUsers: find what uses the data volume (Users).
	needUsers
	// needLease: judge the lease of a claim this process does not hold.
	needLease
)

// removePlan is what Remove does, given what is on the host (see planRemove).
type removePlan struct {
	// Need is a fact to find before planning again; nothing else is set.
	Need removeNeed
	// Kept: other owners remain; only the caller's record goes (DeleteOwn). Nothing else
	// follows.
	Kept bool
	// DeleteOwn: delete the caller's owner record; with Kept or Left, or for an absent image,
	// that is all.
	DeleteOwn bool
	// Left: the caller is the last owner and lets go (DeleteOwn) of a volume it may not
	// delete: only disks of other namespaces use it, or nothing is seen to use it but its
	// users cannot be ruled out (Doubts). The volume stays, published and without owners, for
	// Sweep to remove once unused and checkable. Nothing else follows.
	Left   bool
	Doubts []string
	// Done: nothing is left to remove (with DeleteOwn, the caller's record first).
	Done bool
	// WriteClaim: write a removing claim before anything is deleted.
	WriteClaim bool
	// Unpublish: delete the marker, then look for owners and users again (recheckRemove).
	Unpublish bool
	// Delete lists what goes last, in order: data, the caller's record, claim.
	Delete []string
}

// planRemove decides, without I/O, what Remove does with f.img for the caller f.uid. While
// other owners remain, only the caller's record goes, unless disks of the caller's namespace
// use the volume: then its record stays (planOwnDisks). An absent image needs only that record
// deleted. Data that no record names is never ours; a volume from before shared images is the
// one owner's its marker names, while that owner exists. A data volume in use (or whose users
// cannot be ruled out) stays, and so does an upload another process still renews; its last
// owner's record stays too, unless only other namespaces' disks use it (planUsers: the owner
// leaves). Otherwise the volume is claimed for removal, unpublished, and deleted.
func planRemove(f removeFacts) (removePlan, error) {
	img := f.img
	switch {
	case f.others > 0:
		if p, err := planOwnDisks(f); err != nil || p.Need != needNothing {
			return p, err
		}
		return removePlan{Kept: true, DeleteOwn: img.HasOwn}, nil
	case img.State == StateAbsent:
		return removePlan{Done: true, DeleteOwn: img.HasOwn}, nil
	}
	for _, check := range []func(removeFacts) (removePlan, error){planNotOwner, planUsers, planClaim} {
		if p, err := check(f); err != nil || p.Need != needNothing || p.Left {
			return p, err
		}
	}
	return removePlan{
		WriteClaim: !img.HasClaim,
		Unpublish:  img.HasMarker,
		Delete:     []string{img.Volume, OwnerName(img.Volume, f.uid), ClaimName(img.Volume)},
	}, nil
}

// planOwnDisks keeps the record of a co-owner whose namespace's disks use the volume (or may:
// a doubt about one of them), so that the volume stays owned by a BaseImage of each namespace
// that uses it.
func planOwnDisks(f removeFacts) (removePlan, error) {
	switch {
	case !f.img.HasOwn || !f.img.HasData || f.namespace == "":
		return removePlan{}, nil
	case f.usage == nil:
		return removePlan{Need: needUsers}, nil
	}
	if v := viewUsage(*f.usage, f.namespace); len(v.OwnUsers) > 0 || len(v.OwnDoubts) > 0 {
		return removePlan{}, f.inUse()
	}
	return removePlan{}, nil
}

// inUse is the InUseError of f's volume and usage, for f's namespace.
func (f removeFacts) inUse() error {
	return &InUseError{Pool: f.img.Pool, Volume: f.img.Volume, Users: f.usage.Users, Doubts: f.usage.Doubts, Namespace: f.namespace}
}

// planNotOwner refuses a caller without an owner record what it may not remove: data that no
// record names, or a volume from before shared images whose one owner (its marker names it)
// still exists. Anyone may remove a volume whose owners are all gone, once unused (Sweep does).
func planNotOwner(f removeFacts) (removePlan, error) {
	img := f.img
	switch {
	case img.HasOwn:
		return removePlan{}, nil
	case img.HasData && img.Owner.UID == "":
		// No record names anyone: not made by us, never ours to delete.
		return removePlan{}, &OwnedByOtherError{Pool: img.Pool, Volume: img.Volume}
	case isDigestName(img.Volume) || img.Owner.UID == f.uid:
		return removePlan{}, nil
	case !f.askedPublisher:
		return removePlan{Need: needPublisher}, nil
	case f.publisherLive:
		return removePlan{}, &OwnedByOtherError{Pool: img.Pool, Volume: img.Volume, Owner: img.Owner}
	}
	return removePlan{}, nil
}

// planUsers keeps a data volume that is in use, or whose users cannot be ruled out. A
// BaseImage (not Sweep) that is its last owner lets go of it (Left) so that its deletion waits
// neither for another namespace's disks nor for a pool to come back: when nothing is seen to
// use the volume and only doubts remain, or when only other namespaces' disks use it. It keeps
// its record while its own namespace's disks use it (or may), or while disks are in use and a
// pool cannot be checked (nobody can tell whose disks are in it).
func planUsers(f removeFacts) (removePlan, error) {
	switch {
	case !f.img.HasData:
		return removePlan{}, nil
	case f.usage == nil:
		return removePlan{Need: needUsers}, nil
	case !f.usage.InUse():
		return removePlan{}, nil
	case len(f.usage.Users) == 0 && len(f.usage.Doubts) > 0 && f.uid != "":
		return removePlan{Left: true, DeleteOwn: f.img.HasOwn, Doubts: f.usage.Doubts}, nil
	}
	if v := viewUsage(*f.usage, f.namespace); f.img.HasOwn && f.namespace != "" &&
		len(v.OwnUsers) == 0 && len(v.OwnDoubts) == 0 && len(v.HostDoubts) == 0 {
		return removePlan{Left: true, DeleteOwn: true}, nil
	}
	return removePlan{}, f.inUse()
}

// planClaim keeps an upload or removal another process still renews: that process may
// publish for owners added meanwhile, or finish its own cleanup.
func planClaim(f removeFacts) (removePlan, error) {
	switch {
	case !f.img.HasClaim || f.ourClaim:
		return removePlan{}, nil
	case !f.judgedLease:
		return removePlan{Need: needLease}, nil
	case f.lease == leaseFresh:
		return removePlan{}, errors.Errorf(errClaimHeld, f.img.Volume, f.img.Pool)
	}
	return removePlan{}, nil
}

// recheckPlan is what Remove does after unpublishing (see planRecheck).
type recheckPlan struct {
	// Restore: write the marker back (the volume was published) and drop the removal claim.
	Restore, DropClaim bool
	// Kept: owners appeared; detach as planRemove's Kept does.
	Kept bool
}

// planRecheck decides, without I/O, what Remove does once the marker is gone, from a second
// look at the owners (others, or ownersErr) and users (usersErr, an InUseError when in use):
// an overlay created by another process or an owner added between the first checks and
// unpublishing publishes the volume again and leaves it be, failing with what was found. A
// KVMDomain checks the marker after creating its overlay, and Publish reads it after adding
// its owner record, so one of the two sides sees the other.
func planRecheck(img Image, others int, ownersErr, usersErr error) (recheckPlan, error) {
	if ownersErr == nil && usersErr == nil && others == 0 {
		return recheckPlan{}, nil
	}
	p := recheckPlan{Restore: img.State == StatePublished, DropClaim: true}
	switch {
	case usersErr != nil:
		return p, usersErr
	case ownersErr != nil:
		return p, ownersErr
	}
	p.Kept = true
	return p, nil
}
