package imagecache

import (
	"context"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errNotPublished = "volume %s in pool %s is not published after publishing it: %s"
	errClaimRace    = "volume %s in pool %s was claimed concurrently; retrying later"
	errCleanDebris  = "cannot remove debris of volume %s in pool %s"
	errOwnerRecord  = "cannot record the owner of volume %s in pool %s"
	errWait         = "gave up waiting for another BaseImage's upload of this image into volume %s"
	errOtherDigest  = "volume %s in pool %s is marked as holding sha256 %s (%s), not %s (%s): it is never used for this image"
)

// Result of a Publish.
type Result struct {
	Image Image
	// Reused is true when the image was already published: nothing was
	// uploaded. The image's owner record was added.
	Reused bool
	// Bytes uploaded and how long downloading and uploading took.
	Bytes    int64
	Duration time.Duration
	// FinalURL is where the bytes came from after redirects, when this Publish downloaded
	// them (without password).
	FinalURL string
}

// BytesPerSecond is the throughput of the upload, 0 if nothing was uploaded.
func (r Result) BytesPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Duration.Seconds()
}

// Publish makes the image src asks for available in pool, owned (among others) by owner, and
// returns it. The data volume is DigestVolumeName of the image's sha256: one per pool and
// digest, shared by every BaseImage that asks for those bytes, whatever its URL or namespace.
// First the owner record of owner is added (OwnerName). If the volume is published with that
// digest by another BaseImage (or another is uploading it), src.URL is downloaded and hashed
// first (prove: a digest is not possession), then the volume is attached without an upload
// (Result.Reused). If another live owner is uploading it,
// Publish waits for that upload (until ctx ends). Otherwise debris is removed and the image is
// streamed from src.URL straight into the volume while its sha256 is computed; a digest other
// than src.SHA256 fails with a *DigestMismatchError and leaves nothing behind. progress may be
// nil.
//
// Without src.SHA256 the image is first downloaded once to compute its digest (nothing is
// stored), then published for that digest as above: the volume is shared only by digest, and
// a second download that does not hash the same (the server changed the file meanwhile) fails
// with a *ChangedError, worth retrying.
//
// Errors: IsDigestMismatch, IsFormatError (terminal, see IsTerminal); IsOwnedByOther for a
// data volume of the digest's name that no record names; anything else is worth retrying.
func (c *Cache) Publish(ctx context.Context, pool string, src Source, owner Owner, progress ProgressFunc) (Result, error) {
	if err := src.Validate(); err != nil {
		return Result{}, err
	}
	if owner.UID == "" {
		return Result{}, errors.New(errNoOwnerUID)
	}
	owner.ClusterID = c.clusterID
	src.Format = src.Format.OrDefault()
	asked := src
	src, finalURL, proved, err := c.resolveSource(ctx, pool, src, owner)
	if err != nil {
		return Result{}, err
	}
	vol := DigestVolumeName(src.SHA256, src.Format)
	for step := 0; ; step++ {
		res, next, err := c.publishStep(ctx, pool, vol, src, asked, owner, step == 0, proved, progress)
		if res.FinalURL == "" {
			res.FinalURL = finalURL
		}
		var dm *DigestMismatchError
		if asked.SHA256 == "" && errors.As(err, &dm) {
			err = &ChangedError{URL: dm.URL, First: dm.Want, Second: dm.Got}
		}
		switch {
		case err != nil || next == stepDone:
			return res, err
		case next == stepProve:
			if finalURL, err = c.prove(ctx, src); err != nil {
				return res, err
			}
			proved = true
		default:
			if err := sleep(ctx, c.sh.timing.waitPoll); err != nil {
				return res, errors.Wrapf(err, errWait, vol)
			}
		}
	}
}

// resolveSource gives src its digest, proving possession first where Publish must: an
// unpinned image is hashed from its own URL (that is the proof); a pinned one whose bytes
// another namespace published is downloaded and hashed now (prove). It returns the URL the
// bytes came from when it downloaded them, and whether that proved possession.
func (c *Cache) resolveSource(ctx context.Context, pool string, src Source, owner Owner) (Source, string, bool, error) {
	if src.SHA256 == "" {
		sum, finalURL, err := c.fetch.Digest(ctx, src.URL, src.Format)
		if err != nil {
			return src, "", false, err
		}
		src.SHA256 = sum
		return src, finalURL, true, nil
	}
	img, err := c.lookup(ctx, pool, DigestVolumeName(src.SHA256, src.Format), owner.UID)
	if err != nil {
		return src, "", false, err
	}
	if img.State == StatePublished && img.Marker != nil && img.Marker.SHA256 == src.SHA256 && needsProof(img, owner) {
		finalURL, err := c.prove(ctx, src)
		return src, finalURL, err == nil, err
	}
	return src, "", false, nil
}

// What a publishStep asks Publish to do next.
type nextStep int

const (
	stepDone nextStep = iota
	// stepWait: another owner's upload is in progress; look again after a pause.
	stepWait
	// stepProve: the bytes are (being) cached by another BaseImage; download this one's own
	// URL and hash it before attaching (prove).
	stepProve
)

// needsProof is true when img holds, or another BaseImage is uploading, bytes that a BaseImage
// of another namespace than owner's downloaded: a digest is not possession (decision 50). Bytes
// its own namespace downloaded (itself, another of its BaseImages, or the same BaseImage
// recreated with a new UID, as after a restore from a backup) it may attach to.
func needsProof(img Image, owner Owner) bool {
	var by *Record
	switch {
	case img.State == StatePublished:
		by = img.Marker
	case img.HasClaim:
		by = img.Claim
	default:
		return false
	}
	return by == nil || (by.Owner.UID != owner.UID && (owner.Namespace == "" || !by.Owner.sameNamespace(owner)))
}

// prove downloads src from its own URL, within the config's policy and limits, and checks
// that its bytes hash to src.SHA256, before the BaseImage attaches to a volume of that digest
// that another BaseImage cached: knowing a digest does not give access to the image. Nothing
// is stored; it costs one download of the image, as long as publishing it would have taken
// without the upload to the host, so "Ready" comes no sooner than for an image nobody cached.
// A digest that does not match fails like an upload's would (*DigestMismatchError), with no
// word of what the host holds. It returns the URL the bytes came from.
func (c *Cache) prove(ctx context.Context, src Source) (string, error) {
	sum, finalURL, err := c.fetch.Digest(ctx, src.URL, src.Format)
	if err != nil {
		return "", err
	}
	if sum != src.SHA256 {
		return "", &DigestMismatchError{URL: redactURL(src.URL), Want: src.SHA256, Got: sum}
	}
	return finalURL, nil
}

// publishStep is one attempt of Publish on the data volume vol of src (which has its digest);
// asked is the source as the BaseImage gave it; proved tells that src's URL was hashed to its
// digest by this Publish. next tells that another owner's upload is in progress (stepWait), or
// that the bytes are another BaseImage's and this one must prove it has them (stepProve: its
// owner record is removed again, so that it is never seen attached before). The base lock is
// held while records are read and written, not during the upload: the claim protects that.
// The first step sweeps the volume's stale owner records; the steps of a wait read only the
// record of the claim's owner.
func (c *Cache) publishStep(ctx context.Context, pool, vol string, src, asked Source, owner Owner, sweep, proved bool, progress ProgressFunc) (res Result, next nextStep, err error) {
	unlock, err := c.lock(ctx, pool)
	if err != nil {
		return Result{}, stepDone, err
	}
	defer func() {
		// A failed attempt does not keep the volume's name owned: its debris (if any) is
		// claimed, and others waiting for this upload take over once this record is gone.
		// The next attempt adds it again.
		// (The controller starts a BaseImage's next attempt only after a cancelled one ended.)
		if (err != nil && res.Image.State != StatePublished) || next == stepProve {
			c.bestEffortDelete(ctx, pool, OwnerName(vol, owner.UID))
		}
	}()
	defer func() { unlock() }() // unlock is idempotent; it is also called before the upload
	// What Lookup remembers of this volume is stale once Publish changed it.
	c.forget(pool, vol, owner.UID)
	defer c.forget(pool, vol, owner.UID)

	img, plan, err := c.planStep(ctx, pool, vol, src, asked, owner, sweep)
	switch {
	case err != nil:
		return Result{Image: img}, stepDone, err
	case !proved && (plan.Wait || plan.Reuse) && needsProof(img, owner):
		return Result{Image: img}, stepProve, nil
	case plan.Wait:
		return Result{Image: img}, stepWait, nil
	case plan.Reuse:
		if plan.DropClaim && c.lv.DeleteVolume(ctx, pool, ClaimName(vol)) == nil {
			img.HasClaim, img.Claim = false, nil
		}
		return Result{Image: img, Reused: true}, stepDone, nil
	}
	return c.uploadStep(ctx, img, plan, pool, vol, src, asked, owner, unlock, progress)
}

// uploadStep cleans the debris plan lists, claims img's volume for owner's upload and uploads
// src into it, releasing the base lock (unlock) once the claim is written.
func (c *Cache) uploadStep(ctx context.Context, img Image, plan publishPlan, pool, vol string, src, asked Source, owner Owner, unlock func(), progress ProgressFunc) (Result, nextStep, error) {
	if err := c.clean(ctx, img, plan); err != nil {
		return Result{Image: img}, stepDone, err
	}
	cb, err := c.writeUploadClaim(ctx, pool, vol, src, owner)
	if err != nil {
		return Result{}, stepDone, err
	}
	unlock()
	res, err := c.uploadClaimed(ctx, pool, vol, src, asked, owner, cb, progress)
	return res, stepDone, err
}

// planStep adds owner's record, reads the volume and the owners it needs to know of, and
// plans the step (planPublish).
func (c *Cache) planStep(ctx context.Context, pool, vol string, src, asked Source, owner Owner, sweep bool) (Image, publishPlan, error) {
	if err := c.ensureOwner(ctx, pool, vol, owner, asked); err != nil {
		return Image{}, publishPlan{}, err
	}
	faultpoint.Reach(faultpoint.BaseOwnerWritten)
	live := map[string]bool{}
	if sweep {
		others, err := c.otherOwners(ctx, pool, vol, owner.UID)
		if err != nil {
			return Image{}, publishPlan{}, err
		}
		live = liveUIDs(others)
	}
	img, err := c.lookupSettled(ctx, pool, vol, owner.UID)
	if err != nil {
		return img, publishPlan{}, err
	}
	if cl := img.Claim; cl != nil && cl.Owner.UID != owner.UID && !sweep {
		if _, live[cl.Owner.UID], err = c.ownerLive(ctx, pool, vol, OwnerName(vol, cl.Owner.UID)); err != nil {
			return img, publishPlan{}, err
		}
	}
	ourClaim := c.ours(img, owner.UID)
	l := leaseUnknown
	if img.HasClaim && !ourClaim {
		l = c.claimLease(img)
	}
	if l == leaseFresh {
		slow, err := c.tooSlow(ctx, img, owner)
		if err != nil {
			return img, publishPlan{}, err
		}
		if slow {
			l = leaseStale // taken over like a stale claim: its holder's renewal finds it gone
		}
	}
	plan, err := planPublish(img, owner, src, live, ourClaim, l)
	return img, plan, err
}

// clean removes the debris plan lists, once nothing uses the data volume: even debris is
// never deleted under an overlay, whatever made it, a guest's disk depends on the file.
func (c *Cache) clean(ctx context.Context, img Image, plan publishPlan) error {
	if plan.CheckUsers {
		if err := c.inUse(ctx, img); err != nil {
			return err
		}
	}
	for _, n := range plan.Delete {
		if err := c.lv.DeleteVolume(ctx, img.Pool, n); err != nil && !libvirt.IsNotFound(err) {
			return errors.Wrapf(err, errCleanDebris, img.Volume, img.Pool)
		}
	}
	c.sh.claims.forget(c.memoKey(img.Pool, ClaimName(img.Volume)))
	return nil
}

// writeUploadClaim writes owner's claim of vol for an upload of src and returns its bytes,
// which the lease renews.
func (c *Cache) writeUploadClaim(ctx context.Context, pool, vol string, src Source, owner Owner) ([]byte, error) {
	claim := Record{State: RecordClaimed, Volume: vol, Owner: owner, Holder: c.holder, SourceURL: redactURL(src.URL), ExpectedSHA256: src.SHA256, Format: src.Format, Time: c.now().UTC()}
	cb, err := claim.Encode()
	if err != nil {
		return nil, err
	}
	if err := c.writeRecordBytes(ctx, pool, ClaimName(vol), cb); err != nil {
		if libvirt.IsExists(err) {
			return nil, errors.Errorf(errClaimRace, vol, pool)
		}
		return nil, err
	}
	faultpoint.Reach(faultpoint.BaseClaimWritten)
	return cb, nil
}

// uploadClaimed uploads src into vol while renewing the claim cb, until the upload's outcome
// is on the host: the marker written, or what the upload wrote deleted. An upload whose claim
// is lost stops, publishes nothing and deletes nothing. It returns the published image.
func (c *Cache) uploadClaimed(ctx context.Context, pool, vol string, src, asked Source, owner Owner, cb []byte, progress ProgressFunc) (Result, error) {
	hctx, release := c.hold(ctx, pool, ClaimName(vol), cb)
	start := c.now()
	res, err := c.upload(hctx, pool, vol, src, asked.SHA256, owner, progress)
	res.Duration = c.now().Sub(start)
	if err != nil {
		err = c.abandon(ctx, pool, vol, owner, err)
		release()
		return res, err
	}
	release()
	faultpoint.Reach(faultpoint.BaseMarkerWritten)
	_ = c.lv.DeleteVolume(ctx, pool, ClaimName(vol)) // a stale claim of ours is harmless

	img, err := c.lookup(ctx, pool, vol, owner.UID)
	res.Image = img
	if err != nil {
		return res, err
	}
	if img.State != StatePublished {
		return res, errors.Errorf(errNotPublished, vol, pool, img.Reason)
	}
	return res, nil
}

// abandon cleans up after the failed upload (err) of vol: the data volume, then the claim,
// while the claim is still ours; what cannot be removed stays claimed by owner, for its next
// attempt. A claim that is not ours any more guards another process's upload now: nothing of
// it is touched, and the error says so.
func (c *Cache) abandon(ctx context.Context, pool, vol string, owner Owner, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	mine, cerr := c.stillOurs(cctx, pool, vol, owner.UID)
	switch {
	case mine:
		if c.bestEffortDelete(ctx, pool, vol, MarkerName(vol)) {
			c.bestEffortDelete(ctx, pool, ClaimName(vol))
		}
	case cerr == nil && ctx.Err() == nil:
		return errors.Wrap(err, errClaimLost.Error())
	}
	return err
}
