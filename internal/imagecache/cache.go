package imagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// cleanupTimeout bounds removing debris after a failed publish, which runs
// even when the caller's context has ended.
const cleanupTimeout = 30 * time.Second

// waitPoll is how often Publish looks again while another BaseImage uploads the image it
// asks for.
var waitPoll = 2 * time.Second

// State of a BaseImage volume on the host.
type State string

// States.
const (
	// StateAbsent: none of the data volume, marker or claim exists.
	StateAbsent State = "Absent"
	// StatePublished: the data volume is complete, verified and marked.
	StatePublished State = "Published"
	// StateDebris: something exists but the volume is not published: an
	// upload in progress or cut, a removal cut half-way, a torn marker.
	// Debris is never usable; the next Publish of the image removes it once no
	// live owner claims it.
	StateDebris State = "Debris"
)

// Image is what a pool holds for one data volume name.
type Image struct {
	State  State
	Pool   string
	Volume string
	// Path of the data volume on the host, when it exists.
	Path string
	// Owner is the BaseImage that published the volume (named by the marker), else the one
	// that claimed it (named by the claim); zero when no record could be read. With shared
	// images it is one of possibly many owners, and may be of another namespace: never show
	// it to a BaseImage.
	Owner Owner
	// Marker is the record of the .meta volume, if one could be parsed.
	// For a Published image it holds the digest, sizes and source.
	Marker *Record
	// Claim is the record of the .claim volume, if one could be parsed.
	Claim *Record
	// ClaimModified is the claim volume's mtime as libvirt reports it ("" when unknown): how
	// others tell that its holder still renews it (see claimRenew).
	ClaimModified string
	// Own is the owner record (OwnerName) of the UID the lookup was asked about, when it
	// exists and is valid. HasOwn tells whether the record volume exists at all.
	Own *Record
	// Reason says why an image is Debris.
	Reason string

	HasData, HasMarker, HasClaim, HasOwn bool
}

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

// Liveness tells whether the BaseImage with uid still exists in the cluster. Owner records
// of UIDs it denies are stale: Publish and Remove delete them. It must not deny a UID on
// stale knowledge (ask the API server, not a cache that may lag behind).
type Liveness func(ctx context.Context, uid string) (bool, error)

// Cache publishes, looks up and removes BaseImage volumes on one host.
type Cache struct {
	lv     *libvirt.Client
	dl     Downloads
	http   *http.Client
	now    func() time.Time
	alive  Liveness
	holder string
}

// An Option configures a Cache.
type Option func(*Cache)

// WithClock sets the clock used for record times and durations.
func WithClock(now func() time.Time) Option { return func(c *Cache) { c.now = now } }

// WithLiveness lets the Cache delete owner records of BaseImages that no longer exist.
// Without it, no other owner's record is ever deleted.
func WithLiveness(l Liveness) Option { return func(c *Cache) { c.alive = l } }

// New returns a Cache that reaches the host through lv and downloads what dl
// allows, within its limits: every URL, redirect and dialed address is
// checked against dl.Policy, no proxy is used, and the response headers,
// stalls and the image size are bounded.
func New(lv *libvirt.Client, dl Downloads, opts ...Option) *Cache {
	dl = dl.withDefaults()
	c := &Cache{lv: lv, dl: dl, http: newHTTPClient(dl), now: time.Now, holder: processHolder}
	for _, o := range opts {
		o(c)
	}
	return c
}

// lock takes the base-volume lock of pool (libvirt.LockBases), which the KVMDomain
// controller takes too before it creates an overlay: within the process, no overlay appears
// between a removal's check for users and its delete.
func (c *Cache) lock(ctx context.Context, pool string) (func(), error) {
	return libvirt.LockBases(ctx, c.lv.Address(), pool)
}

const (
	errLookup       = "cannot look up BaseImage volume %s in pool %s"
	errReadRecord   = "cannot read record volume %s in pool %s"
	errWriteRecord  = "cannot write record volume %s in pool %s"
	errDownload     = "cannot download the image from %s"
	errUpload       = "cannot stream the image from %s into volume %s in pool %s"
	errSize         = "the image from %s ended after %d bytes, but the server announced %d"
	errPhysical     = "volume %s holds %d bytes after the upload, but %d were sent"
	errReadBack     = "cannot read back volume %s in pool %s to verify it"
	errStored       = "volume %s in pool %s does not hold what was uploaded: the %d bytes at offset %d differ (another writer or a storage fault); it is not published"
	errNotPublished = "volume %s in pool %s is not published after publishing it: %s"
	errClaimHeld    = "volume %s in pool %s is claimed by an upload or removal that its provider process still renews; retrying later"
	errClaimRace    = "volume %s in pool %s was claimed concurrently; retrying later"
	errNotOurs      = "refusing to remove volume %q: it is not a BaseImage volume"
	errUsers        = "cannot find the users of %s"
	errCleanDebris  = "cannot remove debris of volume %s in pool %s"
	errRemove       = "cannot remove volume %s from pool %s"
	errNoName       = "an image without sha256 has no volume name before its bytes are hashed"
	errOwnerRecord  = "cannot record the owner of volume %s in pool %s"
	errWait         = "gave up waiting for another BaseImage's upload of this image into volume %s"
	errOtherDigest  = "volume %s in pool %s is marked as holding sha256 %s (%s), not %s (%s): it is never used for this image"
)

// Lookup returns what pool holds for src, which must have a SHA256 (VolumeName). With a
// non-empty ownerUID it also reads that BaseImage's owner record (Image.Own).
func (c *Cache) Lookup(ctx context.Context, pool string, src Source, ownerUID string) (Image, error) {
	vol := VolumeName(Source{SHA256: src.SHA256, Format: src.Format.orDefault()})
	if vol == "" {
		return Image{Pool: pool}, errors.New(errNoName)
	}
	return c.LookupVolume(ctx, pool, vol, ownerUID)
}

// LookupVolume is Lookup by data volume name, e.g. the name recorded in a BaseImage's status.
// In the steady state (a published volume whose records are remembered) it costs three libvirt
// calls: the data volume's size, the marker's and the owner record's fingerprints.
func (c *Cache) LookupVolume(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	return c.observe(ctx, pool, volume, ownerUID)
}

// lookup reads the state of volume: four volume lookups, at most three
// record downloads of a few hundred bytes and one stat. It trusts nothing remembered: what
// writes and deletes rely on.
func (c *Cache) lookup(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	return c.classify(ctx, pool, volume, ownerUID, false)
}

// settleTries and settlePause bound how often lookupSettled looks again.
var (
	settleTries = 4
	settlePause = 250 * time.Millisecond
)

// lookupSettled is lookup for Publish and Remove, which refuse data that no record names. The
// volumes are read one after the other, so a lookup that overlaps another process's step (an
// upload's claim dropped after its marker was written, a removal deleting the data) can see
// the data but neither record; such a view is looked at again before anything is decided.
func (c *Cache) lookupSettled(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	for try := 1; ; try++ {
		img, err := c.lookup(ctx, pool, volume, ownerUID)
		if err != nil || !img.HasData || img.HasMarker || img.HasClaim || try == settleTries {
			return img, err
		}
		t := time.NewTimer(settlePause)
		select {
		case <-ctx.Done():
			t.Stop()
			return img, ctx.Err()
		case <-t.C:
		}
	}
}

// observe is lookup for Observe: three calls (the data volume's size, the marker's and the
// owner record's fingerprints) when the records and the data volume's path are remembered with
// those fingerprints; otherwise what differs is read. The claim is read only when the marker
// does not mark the volume published (a claim next to a valid marker changes nothing).
func (c *Cache) observe(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	return c.classify(ctx, pool, volume, ownerUID, true)
}

func (c *Cache) classify(ctx context.Context, pool, volume, ownerUID string, cheap bool) (Image, error) { //nolint:gocyclo // classifies the volumes of the protocol in one place, the doc comment of the package names every case
	img := Image{Pool: pool, Volume: volume}
	var physical uint64
	var err error
	if cheap {
		physical, err = c.lv.VolumePhysicalBytes(ctx, pool, volume)
		if err == nil {
			img.HasData, img.Path = true, seen.path(c.memoKey(pool, volume))
			if img.Path == "" {
				dv, verr := c.lv.Volume(ctx, pool, volume)
				if verr == nil {
					img.Path = dv.Path
					seen.put(c.memoKey(pool, volume), memoEntry{path: dv.Path})
				}
				err = verr
			}
		}
	} else {
		var dv libvirt.Volume
		dv, err = c.lv.Volume(ctx, pool, volume)
		if err == nil {
			img.HasData, img.Path = true, dv.Path
		}
	}
	if err != nil && !libvirt.IsNotFound(err) {
		return img, errors.Wrapf(err, errLookup, volume, pool)
	}
	if err != nil {
		img.HasData, img.Path = false, ""
	}
	read := c.readRecord
	if cheap {
		read = c.statRecord
	}
	var markerErr, claimErr error
	img.HasMarker, img.Marker, markerErr, err = read(ctx, pool, MarkerName(volume))
	if err != nil {
		return img, err
	}
	if ownerUID != "" {
		var ownErr error
		img.HasOwn, img.Own, ownErr, err = read(ctx, pool, OwnerName(volume, ownerUID))
		if err != nil {
			return img, err
		}
		if ownErr != nil || !isOwnerRecord(img.Own, volume, ownerUID) {
			img.Own = nil
		}
	}
	marked := img.HasMarker && markerErr == nil && img.Marker.State == RecordPublished && img.Marker.Volume == volume
	if !cheap || !marked || !img.HasData {
		img.HasClaim, img.Claim, claimErr, err = read(ctx, pool, ClaimName(volume))
		if err != nil {
			return img, err
		}
		if img.HasClaim && !cheap {
			// The claim's mtime tells whether its holder renews it; one more call, only while
			// a claim exists.
			cv, cerr := c.lv.Volume(ctx, pool, ClaimName(volume))
			if cerr != nil && !libvirt.IsNotFound(cerr) {
				return img, errors.Wrapf(cerr, errLookup, ClaimName(volume), pool)
			}
			img.ClaimModified = cv.ModifiedAt
		}
		if !img.HasClaim && !cheap {
			claims.forget(c.memoKey(pool, ClaimName(volume))) // nothing to judge any more
		}
	}
	switch {
	case img.Marker != nil && img.Marker.Owner.UID != "":
		img.Owner = img.Marker.Owner
	case img.Claim != nil && img.Claim.Owner.UID != "":
		img.Owner = img.Claim.Owner
	}
	if !img.HasData && !img.HasMarker && !img.HasClaim {
		img.State = StateAbsent
		return img, nil
	}
	img.State = StateDebris
	switch {
	case !img.HasData:
		img.Reason = "the data volume is missing"
	case !img.HasMarker && img.HasClaim && claimErr == nil:
		img.Reason = "the upload started at " + img.Claim.Time.UTC().Format(time.RFC3339) + " is in progress or was cut"
	case !img.HasMarker:
		img.Reason = "the data volume has no marker: its upload did not finish"
	case markerErr != nil:
		img.Reason = "the marker is unusable: " + markerErr.Error()
	case !marked:
		img.Reason = "the marker does not mark this volume published"
	default:
		n := physical
		if !cheap {
			n, err = c.lv.VolumePhysicalBytes(ctx, pool, volume)
			if libvirt.IsNotFound(err) {
				img.HasData, img.Path, img.Reason = false, "", "the data volume is missing"
				return img, nil
			}
			if err != nil {
				return img, errors.Wrapf(err, errLookup, volume, pool)
			}
		}
		if int64(n) != img.Marker.SizeBytes {
			img.Reason = "the data volume holds " + strconv.FormatUint(n, 10) + " bytes, the marker records " + strconv.FormatInt(img.Marker.SizeBytes, 10)
			return img, nil
		}
		img.State, img.Reason = StatePublished, ""
	}
	return img, nil
}

// isOwnerRecord is true when r is a valid owner record of uid for volume.
func isOwnerRecord(r *Record, volume, uid string) bool {
	return r != nil && r.State == RecordOwner && r.Volume == volume && r.Owner.UID == uid
}

// readRecord reads a record volume. exists tells whether the volume
// exists; rec is set when its JSON parsed (even if invalid, so its owner can
// be checked), invalid says why it is unusable.
func (c *Cache) readRecord(ctx context.Context, pool, name string) (exists bool, rec *Record, invalid error, err error) {
	var buf bytes.Buffer
	err = c.lv.Download(ctx, pool, name, &buf, 0, maxRecordBytes)
	if libvirt.IsNotFound(err) {
		return false, nil, nil, nil
	}
	if err != nil {
		return false, nil, nil, errors.Wrapf(err, errReadRecord, name, pool)
	}
	r, derr := DecodeRecord(buf.Bytes())
	if derr == nil || r.Owner.UID != "" {
		rec = &r
	}
	return true, rec, derr, nil
}

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
		if img.Marker.SHA256 != src.SHA256 || img.Marker.Format != src.Format.orDefault() {
			return publishPlan{}, errors.Errorf(errOtherDigest, img.Volume, img.Pool, img.Marker.SHA256, img.Marker.Format, src.SHA256, src.Format.orDefault())
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

// writeRecord creates a raw volume holding r. On failure it removes what it
// created; IsExists from libvirt is returned as is.
func (c *Cache) writeRecord(ctx context.Context, pool, name string, r Record) error {
	b, err := r.Encode()
	if err != nil {
		return err
	}
	return c.writeRecordBytes(ctx, pool, name, b)
}

// writeRecordBytes is writeRecord of an encoded record.
func (c *Cache) writeRecordBytes(ctx context.Context, pool, name string, b []byte) error {
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: name, Format: libvirt.FormatRaw, CapacityBytes: uint64(len(b))})
	if err != nil {
		return err
	}
	if _, err := c.lv.CreateVolume(ctx, pool, x); err != nil {
		return err
	}
	if err := c.lv.Upload(ctx, pool, name, bytes.NewReader(b), uint64(len(b))); err != nil {
		c.bestEffortDelete(ctx, pool, name)
		return errors.Wrapf(err, errWriteRecord, name, pool)
	}
	return nil
}

// bestEffortDelete deletes a volume even after ctx ended; what it cannot
// delete is debris for the next attempt.
func (c *Cache) bestEffortDelete(ctx context.Context, pool string, names ...string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, n := range names {
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil && !libvirt.IsNotFound(err) {
			return false
		}
	}
	return true
}

// verifyStored reads back the sampled blocks of vol and compares each with the digest taken
// while it was streamed.
func (c *Cache) verifyStored(ctx context.Context, pool, vol string, samples []blockSample) error {
	for _, b := range samples {
		h := sha256.New()
		if err := c.lv.Download(ctx, pool, vol, h, uint64(b.Offset), uint64(b.Len)); err != nil {
			return errors.Wrapf(err, errReadBack, vol, pool)
		}
		var got [sha256.Size]byte
		copy(got[:], h.Sum(nil))
		if got != b.Sum {
			return errors.Errorf(errStored, vol, pool, b.Len, b.Offset)
		}
	}
	return nil
}

// Publish makes the image src asks for available in pool, owned (among others) by owner, and
// returns it. The data volume is DigestVolumeName of the image's sha256: one per pool and
// digest, shared by every BaseImage that asks for those bytes, whatever its URL or namespace.
// First the owner record of owner is added (OwnerName). If the volume is published with that
// digest, nothing is downloaded (Result.Reused). If another live owner is uploading it,
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
	src.Format = src.Format.orDefault()
	asked := src
	finalURL := ""
	if src.SHA256 == "" {
		sum, fu, err := c.digest(ctx, src)
		if err != nil {
			return Result{}, err
		}
		src.SHA256, finalURL = sum, fu
	}
	vol := DigestVolumeName(src.SHA256, src.Format)
	for step := 0; ; step++ {
		res, wait, err := c.publishStep(ctx, pool, vol, src, asked, owner, step == 0, progress)
		if res.FinalURL == "" {
			res.FinalURL = finalURL
		}
		var dm *DigestMismatchError
		if asked.SHA256 == "" && errors.As(err, &dm) {
			err = &ChangedError{URL: dm.URL, First: dm.Want, Second: dm.Got}
		}
		if !wait {
			return res, err
		}
		t := time.NewTimer(waitPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, errors.Wrapf(ctx.Err(), errWait, vol)
		case <-t.C:
		}
	}
}

// publishStep is one attempt of Publish on the data volume vol of src (which has its digest);
// asked is the source as the BaseImage gave it. wait tells that another owner's upload is in
// progress. The base lock is held while records are read and written, not during the upload:
// the claim protects that. The first step sweeps the volume's stale owner records; the steps
// of a wait read only the record of the claim's owner.
func (c *Cache) publishStep(ctx context.Context, pool, vol string, src, asked Source, owner Owner, sweep bool, progress ProgressFunc) (res Result, wait bool, err error) { //nolint:gocyclo // planPublish holds the decisions; what is left is the steps of the protocol, each returning its error
	unlock, err := c.lock(ctx, pool)
	if err != nil {
		return Result{}, false, err
	}
	defer func() {
		// A failed attempt does not keep the volume's name owned: its debris (if any) is
		// claimed, and others waiting for this upload take over once this record is gone.
		// The next attempt adds it again.
		// (The controller starts a BaseImage's next attempt only after a cancelled one ended.)
		if err != nil && res.Image.State != StatePublished {
			c.bestEffortDelete(ctx, pool, OwnerName(vol, owner.UID))
		}
	}()
	defer func() { unlock() }() // unlock is idempotent; it is also called before the upload
	// What Lookup remembers of this volume is stale once Publish changed it.
	c.forget(pool, vol, owner.UID)
	defer c.forget(pool, vol, owner.UID)

	if err := c.ensureOwner(ctx, pool, vol, owner, asked); err != nil {
		return Result{}, false, err
	}
	faultpoint.Reach(faultpoint.BaseOwnerWritten)
	live := map[string]bool{}
	if sweep {
		others, err := c.otherOwners(ctx, pool, vol, owner.UID)
		if err != nil {
			return Result{}, false, err
		}
		live = liveUIDs(others)
	}
	img, err := c.lookupSettled(ctx, pool, vol, owner.UID)
	if err != nil {
		return Result{Image: img}, false, err
	}
	if cl := img.Claim; cl != nil && cl.Owner.UID != owner.UID && !sweep {
		if _, live[cl.Owner.UID], err = c.ownerLive(ctx, pool, vol, OwnerName(vol, cl.Owner.UID)); err != nil {
			return Result{Image: img}, false, err
		}
	}
	ourClaim := c.ours(img, owner.UID)
	l := leaseUnknown
	if img.HasClaim && !ourClaim {
		l = c.claimLease(img)
	}
	plan, err := planPublish(img, owner, src, live, ourClaim, l)
	if err != nil {
		return Result{Image: img}, false, err
	}
	switch {
	case plan.Wait:
		return Result{Image: img}, true, nil
	case plan.Reuse:
		if plan.DropClaim && c.lv.DeleteVolume(ctx, pool, ClaimName(vol)) == nil {
			img.HasClaim, img.Claim = false, nil
		}
		return Result{Image: img, Reused: true}, false, nil
	}
	// Even debris is never deleted under an overlay: whatever made it, a guest's disk depends
	// on the file.
	if plan.CheckUsers {
		u, err := c.Users(ctx, img.Path)
		if err != nil {
			return Result{Image: img}, false, err
		}
		if u.InUse() {
			return Result{Image: img}, false, &InUseError{Pool: pool, Volume: vol, Users: u.Users, Doubts: u.Doubts}
		}
	}
	for _, n := range plan.Delete {
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil && !libvirt.IsNotFound(err) {
			return Result{Image: img}, false, errors.Wrapf(err, errCleanDebris, vol, pool)
		}
	}
	claims.forget(c.memoKey(pool, ClaimName(vol)))
	claim := Record{State: RecordClaimed, Volume: vol, Owner: owner, Holder: c.holder, SourceURL: redactURL(src.URL), ExpectedSHA256: src.SHA256, Format: src.Format, Time: c.now().UTC()}
	cb, err := claim.Encode()
	if err != nil {
		return Result{}, false, err
	}
	if err := c.writeRecordBytes(ctx, pool, ClaimName(vol), cb); err != nil {
		if libvirt.IsExists(err) {
			return Result{}, false, errors.Errorf(errClaimRace, vol, pool)
		}
		return Result{}, false, err
	}
	faultpoint.Reach(faultpoint.BaseClaimWritten)
	unlock()

	// The claim is renewed until the upload's outcome is on the host: the marker written, or
	// what the upload wrote deleted. An upload whose claim is lost stops, publishes nothing and
	// deletes nothing.
	hctx, release := c.hold(ctx, pool, ClaimName(vol), cb)
	start := c.now()
	res, err = c.upload(hctx, pool, vol, src, asked.SHA256, owner, progress)
	res.Duration = c.now().Sub(start)
	if err != nil {
		// Remove the data volume, then the claim, while the claim is still ours: what cannot
		// be removed stays claimed by owner, for its next attempt. A claim that is not ours any
		// more guards another process's upload now: nothing of it is touched.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		mine, cerr := c.stillOurs(cctx, pool, vol, owner.UID)
		switch {
		case mine:
			if c.bestEffortDelete(ctx, pool, vol, MarkerName(vol)) {
				c.bestEffortDelete(ctx, pool, ClaimName(vol))
			}
		case cerr == nil && ctx.Err() == nil:
			err = errors.Wrap(err, errClaimLost.Error())
		}
		cancel()
		release()
		return res, false, err
	}
	release()
	faultpoint.Reach(faultpoint.BaseMarkerWritten)
	_ = c.lv.DeleteVolume(ctx, pool, ClaimName(vol)) // a stale claim of ours is harmless

	img, err = c.lookup(ctx, pool, vol, owner.UID)
	res.Image = img
	if err != nil {
		return res, false, err
	}
	if img.State != StatePublished {
		return res, false, errors.Errorf(errNotPublished, vol, pool, img.Reason)
	}
	return res, false, nil
}

// digest downloads src once, checking its format and the limits as Publish does, and returns
// the sha256 of its bytes and the URL they came from. Nothing is stored.
func (c *Cache) digest(ctx context.Context, src Source) (string, string, error) {
	shownURL := redactURL(src.URL)
	pctx, stalled, cancel := withStall(ctx)
	defer cancel()
	resp, finalURL, total, err := c.get(pctx, src.URL)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only body
	s := newImageStream(resp.Body, src.Format, total, c.dl.Limits.MaxBytes, c.dl.Limits.StallTimeout, stalled, nil)
	_, cerr := io.Copy(io.Discard, s)
	srcErr := s.failed()
	_ = resp.Body.Close()
	s.close()
	if err := c.sourceFailure(ctx, pctx, srcErr, shownURL, finalURL); err != nil {
		return "", "", err
	}
	if cerr != nil {
		return "", "", errors.Wrapf(cerr, errDownload, shownURL)
	}
	if total > 0 && s.n != total {
		return "", "", errors.Errorf(errSize, shownURL, s.n, total)
	}
	return s.sum(), finalURL, nil
}

// upload downloads src into a new data volume vol, verifies it against src.SHA256, refreshes
// the pool and writes the marker. expected is the digest the BaseImage gave ("" when src.SHA256
// was computed by a first download): the marker records it, and is Verified only with one.
func (c *Cache) upload(ctx context.Context, pool, vol string, src Source, expected string, owner Owner, progress ProgressFunc) (Result, error) { //nolint:gocyclo // verifyUpload holds the decisions; what is left is the steps of the upload, each returning its error
	shownURL := redactURL(src.URL)
	pctx, stalled, cancel := withStall(ctx)
	defer cancel()
	resp, finalURL, total, err := c.get(pctx, src.URL)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only body

	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: libvirt.FormatRaw, CapacityBytes: uint64(total)})
	if err != nil {
		return Result{}, err
	}
	if _, err := c.lv.CreateVolume(ctx, pool, x); libvirt.IsExists(err) {
		// A file the pool has not listed yet (e.g. left by a cut upload
		// before a libvirtd restart): make libvirt see it, remove it.
		if err := c.lv.RefreshPool(ctx, pool); err != nil {
			return Result{}, err
		}
		if err := c.lv.DeleteVolume(ctx, pool, vol); err != nil {
			return Result{}, err
		}
		_, err = c.lv.CreateVolume(ctx, pool, x)
		if err != nil {
			return Result{}, err
		}
	} else if err != nil {
		return Result{}, err
	}
	faultpoint.Reach(faultpoint.BaseDataCreated)

	s := newImageStream(resp.Body, src.Format, total, c.dl.Limits.MaxBytes, c.dl.Limits.StallTimeout, stalled, progress)
	uerr := c.lv.Upload(pctx, pool, vol, s, uint64(total))
	srcErr := s.failed()  // before closing the body makes the reader fail
	_ = resp.Body.Close() // unblocks the reader goroutine
	s.close()
	res := Result{Bytes: s.n, FinalURL: finalURL}
	if err := c.sourceFailure(ctx, pctx, srcErr, shownURL, finalURL); err != nil {
		return res, err
	}
	if uerr != nil {
		if srcErr != nil && ctx.Err() == nil {
			// The download failed; libvirt only saw the stream aborted.
			return res, errors.Wrapf(srcErr, errUpload, shownURL, vol, pool)
		}
		return res, errors.Wrapf(uerr, errUpload, shownURL, vol, pool)
	}
	if s.err != nil {
		return res, errors.Wrapf(s.err, errUpload, shownURL, vol, pool)
	}
	faultpoint.Reach(faultpoint.BaseUploaded)
	// libvirt's own refresh after an upload is skipped while another volume
	// of the pool is being built; refresh so that it reports the probed
	// format and virtual size.
	if err := c.lv.RefreshPool(ctx, pool); err != nil {
		return res, err
	}
	n, err := c.lv.VolumePhysicalBytes(ctx, pool, vol)
	if err != nil {
		return res, err
	}
	sum := s.sum()
	virtual, err := verifyUpload(src, shownURL, vol, uploaded{N: s.n, Total: total, Physical: int64(n), SHA256: sum, VirtualSize: s.virtualSize})
	if err != nil {
		return res, err
	}
	// What the host stored, not only what was streamed: sampled blocks read back (see
	// imageStream.samples), and the claim still ours, right before the marker makes the
	// volume usable.
	if err := c.verifyStored(ctx, pool, vol, s.samples); err != nil {
		return res, err
	}
	if mine, err := c.stillOurs(ctx, pool, vol, owner.UID); err != nil || !mine {
		if err == nil {
			err = errClaimLost
		}
		return res, err
	}
	marker := Record{
		State: RecordPublished, Volume: vol, Owner: owner,
		SourceURL: shownURL, FinalURL: finalURL,
		ExpectedSHA256: expected, SHA256: sum, Verified: expected != "",
		Format: src.Format, SizeBytes: s.n, VirtualSizeBytes: virtual,
		Time: c.now().UTC(),
	}
	return res, c.writeRecord(ctx, pool, MarkerName(vol), marker)
}

// get sends the GET of rawURL under ctx, through the guarded client: the
// policy is checked on the URL, on every redirect and on every address
// dialed. It returns a 200 response, the URL it finally came from (without
// password) and its announced size (0 when unknown); an announced size over
// the limit is refused before anything is read.
func (c *Cache) get(ctx context.Context, rawURL string) (*http.Response, string, int64, error) {
	shownURL := redactURL(rawURL)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, "", 0, errors.Wrapf(err, errDownload, shownURL)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The policy's and the limits' own messages say all; the *url.Error
		// around them would repeat the URL.
		var re *RefusedError
		if errors.As(err, &re) {
			return nil, "", 0, re
		}
		var le *LimitError
		if errors.As(err, &le) {
			return nil, "", 0, le
		}
		return nil, "", 0, errors.Wrapf(err, errDownload, shownURL)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, "", 0, &HTTPStatusError{URL: shownURL, StatusCode: resp.StatusCode, Status: resp.Status}
	}
	finalURL := redactURL(resp.Request.URL.String())
	total := max(resp.ContentLength, 0)
	if total > c.dl.Limits.MaxBytes {
		_ = resp.Body.Close()
		return nil, "", 0, &LimitError{URL: finalURL, Config: c.dl.Config, Limit: LimitSize, MaxBytes: c.dl.Limits.MaxBytes, Announced: total}
	}
	return resp, finalURL, total, nil
}

// sourceFailure is the error of a stream that failed because of its source:
// bytes that cannot be a base image (*FormatError), more bytes than the size
// limit or a stall (*LimitError). It is nil when the source is not to blame.
// pctx is the download's context from withStall, ctx the caller's.
func (c *Cache) sourceFailure(ctx, pctx context.Context, srcErr error, shownURL, finalURL string) error {
	var fe *FormatError
	if errors.As(srcErr, &fe) {
		fe.URL = shownURL
		return fe
	}
	var le *LimitError
	if errors.As(srcErr, &le) {
		le.URL, le.Config = finalURL, c.dl.Config
		return le
	}
	if errors.Is(context.Cause(pctx), errStalled) && ctx.Err() == nil {
		return &LimitError{URL: finalURL, Config: c.dl.Config, Limit: LimitStall, Timeout: c.dl.Limits.StallTimeout}
	}
	return nil
}

// Removal is what Remove did.
type Removal struct {
	// Kept: other BaseImages still own the volume; only the caller's owner record was
	// removed. Owners counts the others (never who they are: they may be of other
	// namespaces).
	Kept   bool
	Owners int
}

// Remove detaches the BaseImage ownerUID from volume (a name VolumeName returned) and deletes
// the volume, its marker and claim when no owner is left. Stale owner records (see
// WithLiveness) are deleted first. While other owners remain, only the caller's record goes
// (Removal.Kept). A volume already gone is success. The last owner's Remove fails with
// IsInUse, keeping its record (so the volume stays owned), while a volume in any pool backs
// onto it or a domain's disk uses it, or while that cannot be ruled out (an inactive pool, a
// shut-off domain's disk whose backing chain libvirt does not show); the error says which.
// It fails with IsOwnedByOther for a volume the caller does not own whose publisher still
// exists, or that no record names.
func (c *Cache) Remove(ctx context.Context, pool, volume, ownerUID string) (Removal, error) { //nolint:gocyclo // the removal protocol step by step (owners, claim, unpublish, re-check, delete), each returning its error
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
	img, err := c.lookupSettled(ctx, pool, volume, ownerUID)
	if err != nil {
		return Removal{}, err
	}
	own := OwnerName(volume, ownerUID)
	detach := func(others []Record) (Removal, error) {
		if img.HasOwn {
			if err := c.lv.DeleteVolume(ctx, pool, own); err != nil {
				return Removal{}, errors.Wrapf(err, errRemove, volume, pool)
			}
		}
		return Removal{Kept: true, Owners: len(others)}, nil
	}
	others, err := c.otherOwners(ctx, pool, volume, ownerUID)
	if err != nil {
		return Removal{}, err
	}
	if len(others) > 0 {
		return detach(others)
	}
	if img.State == StateAbsent {
		if img.HasOwn {
			return Removal{}, errors.Wrapf(c.lv.DeleteVolume(ctx, pool, own), errRemove, volume, pool)
		}
		return Removal{}, nil
	}
	if !img.HasOwn {
		// Not an owner: a volume whose owners are all gone (anyone may remove it once unused:
		// Sweep does), or one from before shared images, whose marker names its one owner.
		if img.HasData && img.Owner.UID == "" {
			// No record names anyone: not made by us, never ours to delete.
			return Removal{}, &OwnedByOtherError{Pool: pool, Volume: volume}
		}
		if !isDigestName(volume) && img.Owner.UID != ownerUID {
			alive := true
			if c.alive != nil {
				if alive, err = c.alive(ctx, img.Owner.UID); err != nil {
					return Removal{}, err
				}
			}
			if alive {
				return Removal{}, &OwnedByOtherError{Pool: pool, Volume: volume, Owner: img.Owner}
			}
		}
	}
	inUse := func() error {
		if !img.HasData {
			return nil
		}
		u, err := c.Users(ctx, img.Path)
		if err != nil {
			return err
		}
		if u.InUse() {
			return &InUseError{Pool: pool, Volume: volume, Users: u.Users, Doubts: u.Doubts}
		}
		return nil
	}
	if err := inUse(); err != nil {
		return Removal{}, err
	}
	// An upload another process still renews is never deleted under it: that process may
	// publish for owners added meanwhile, or finish its own cleanup.
	if img.HasClaim && !c.ours(img, ownerUID) && c.claimLease(img) == leaseFresh {
		return Removal{}, errors.Errorf(errClaimHeld, volume, pool)
	}
	if !img.HasClaim {
		remover := Owner{UID: ownerUID}
		if ownerUID == "" {
			remover.UID = sweeperUID // a record must name someone
		}
		claim := Record{State: RecordRemoving, Volume: volume, Owner: remover, Holder: c.holder, Time: c.now().UTC()}
		if img.Marker != nil {
			claim.SourceURL, claim.Format = img.Marker.SourceURL, img.Marker.Format
		}
		if err := c.writeRecord(ctx, pool, ClaimName(volume), claim); err != nil && !libvirt.IsExists(err) {
			return Removal{}, errors.Wrapf(err, errRemove, volume, pool)
		}
		faultpoint.Reach(faultpoint.BaseRemoveClaim)
	}
	if img.HasMarker {
		if err := c.lv.DeleteVolume(ctx, pool, MarkerName(volume)); err != nil {
			return Removal{}, errors.Wrapf(err, errRemove, volume, pool)
		}
		faultpoint.Reach(faultpoint.BaseRemoveMarker)
		// An overlay created (by another process: within this one the base lock excludes it)
		// or an owner added between the first checks and unpublishing: publish again and
		// leave the volume be. A KVMDomain checks the marker after creating its overlay, and
		// Publish reads it after adding its owner record, so one of the two sides sees the
		// other.
		others, oerr := c.otherOwners(ctx, pool, volume, ownerUID)
		uerr := inUse()
		if oerr != nil || uerr != nil || len(others) > 0 {
			if img.State == StatePublished {
				if werr := c.writeRecord(ctx, pool, MarkerName(volume), *img.Marker); werr != nil {
					return Removal{}, errors.Wrapf(werr, "cannot restore the marker of volume %s", volume)
				}
			}
			_ = c.lv.DeleteVolume(ctx, pool, ClaimName(volume))
			switch {
			case uerr != nil:
				return Removal{}, uerr
			case oerr != nil:
				return Removal{}, oerr
			}
			return detach(others)
		}
	}
	for _, n := range []string{volume, own, ClaimName(volume)} {
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil {
			return Removal{}, errors.Wrapf(err, errRemove, volume, pool)
		}
		faultpoint.Reach(faultpoint.BaseRemoveDeleted)
	}
	return Removal{}, nil
}

// sweeperUID names Sweep in the removal claims it writes: no BaseImage has it.
const sweeperUID = "provider-kvm-sweep"

// Sweep deletes the stale owner records (see WithLiveness) of every shared volume of pool, and
// removes each volume left without an owner once nothing uses it, as its last owner's Remove
// would: a volume whose owners all vanished without a Remove (deleted without their finalizer,
// or a cluster restored from a backup whose BaseImages were not recreated) does not stay
// forever. It returns the volumes it removed and, per volume it kept, why. Without a Liveness
// it does nothing.
func (c *Cache) Sweep(ctx context.Context, pool string) (removed []string, kept map[string]error, err error) {
	if c.alive == nil {
		return nil, nil, nil
	}
	vols, err := c.digestVolumes(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	keep := func(v string, err error) {
		if kept == nil {
			kept = map[string]error{}
		}
		kept[v] = err
	}
	for _, v := range vols {
		// Stale records go first, without the lock (no BaseImage that is gone adds its record
		// again); only a volume left without live owners is worth a removal.
		others, err := c.otherOwners(ctx, pool, v, "")
		if err != nil {
			if ctx.Err() != nil {
				return removed, kept, err
			}
			keep(v, err)
			continue
		}
		if len(others) > 0 {
			continue
		}
		r, err := c.Remove(ctx, pool, v, "")
		switch {
		case err != nil && ctx.Err() != nil:
			return removed, kept, err
		case err != nil:
			keep(v, err)
		case !r.Kept:
			removed = append(removed, v)
		}
	}
	return removed, kept, nil
}

// digestVolumes are the digest-named data volumes of the pool (those any of its volumes belong
// to), sorted.
func (c *Cache) digestVolumes(ctx context.Context, pool string) ([]string, error) {
	names, err := c.lv.VolumeNames(ctx, pool)
	if err != nil {
		return nil, err
	}
	vols := map[string]bool{}
	for _, n := range names {
		if v, ok := dataVolumeOf(n); ok && isDigestName(v) {
			vols[v] = true
		}
	}
	return slices.Sorted(maps.Keys(vols)), nil
}

// Usage is what Users found of a base volume's users.
type Usage struct {
	// Users are volumes backing onto the file ("volume POOL/NAME") and domains whose disks
	// use it ("domain NAME disk DEV").
	Users []string
	// Doubts say what could not be checked: a pool that is inactive or cannot be read, a
	// domain disk whose backing chain cannot be seen. Any doubt keeps the volume.
	Doubts []string
}

// InUse is true when the file is in use, or that cannot be ruled out.
func (u Usage) InUse() bool { return len(u.Users) > 0 || len(u.Doubts) > 0 }

// Users lists what uses the file basePath: volumes in any pool whose backing store it is and
// domains (running or not, whoever defined them) whose disks use it directly or in their
// backing chain; and what it could not check (Usage.Doubts): an inactive pool or one it cannot
// read, a disk that is a volume it cannot resolve, a qcow2 (or unknown format) disk outside
// every active pool whose backing chain libvirt does not show (a shut-off domain's).
func (c *Cache) Users(ctx context.Context, basePath string) (Usage, error) {
	u, inPool, err := c.poolUsers(ctx, basePath)
	if err != nil {
		return Usage{}, err
	}
	disks, err := c.lv.DomainDisks(ctx)
	if err != nil {
		return Usage{}, errors.Wrapf(err, errUsers, basePath)
	}
	for _, d := range disks {
		if d.Path == basePath {
			u.Users = append(u.Users, "domain "+d.Domain+" disk "+d.Target)
		} else if doubt := diskDoubt(d, inPool); doubt != "" {
			u.Doubts = append(u.Doubts, doubt)
		}
	}
	sort.Strings(u.Users)
	sort.Strings(u.Doubts)
	u.Users, u.Doubts = slices.Compact(u.Users), slices.Compact(u.Doubts)
	return u, nil
}

// poolUsers lists the volumes of every pool that back onto basePath, the doubts of pools it
// cannot read, and the paths of every volume it read.
func (c *Cache) poolUsers(ctx context.Context, basePath string) (Usage, map[string]bool, error) {
	pools, err := c.lv.AllPools(ctx)
	if err != nil {
		return Usage{}, nil, errors.Wrapf(err, errUsers, basePath)
	}
	var u Usage
	inPool := map[string]bool{}
	for _, p := range pools {
		if !p.Active {
			u.Doubts = append(u.Doubts, "pool "+p.Name+" is inactive, so its volumes cannot be checked (start the pool, or delete it)")
			continue
		}
		vols, err := c.lv.Volumes(ctx, p.Name)
		if libvirt.IsNotFound(err) {
			continue
		}
		if err != nil {
			u.Doubts = append(u.Doubts, "pool "+p.Name+" cannot be read: "+err.Error())
			continue
		}
		for _, v := range vols {
			inPool[v.Path] = true
			if v.BackingStorePath == basePath && v.Path != basePath {
				u.Users = append(u.Users, "volume "+p.Name+"/"+v.Name)
			}
		}
	}
	return u, inPool, nil
}

// diskDoubt says why a domain disk (not the base itself) might back onto the base without
// anyone being able to tell, or "" when it cannot: its chain is listed (a running domain's),
// it is a volume of a pool that was read (its backing store was checked there), or it cannot
// have a backing file (cdrom, floppy, raw).
func diskDoubt(d libvirt.DomainDisk, inPool map[string]bool) string {
	switch {
	case d.Backing || d.ChainKnown || d.Device == "cdrom" || d.Device == "floppy" || d.Format == "raw":
		return ""
	case d.Path == "":
		return "domain " + d.Domain + " disk " + d.Target + " is volume " + d.Pool + "/" + d.Volume + ", which cannot be read"
	case !inPool[d.Path]:
		return "domain " + d.Domain + " disk " + d.Target + " is " + d.Path + ", which is in no active pool, and libvirt shows no backing chain for it while the domain is not running"
	}
	return ""
}

// Owned lists the BaseImage volumes of pool that ownerUID has an owner record on, and those
// (published or debris) whose marker or claim names it without one (debris of its uploads,
// volumes from before shared images), e.g. to find its images after a restart with empty
// status, or all of them on deletion. Image.Own is set from its owner record.
func (c *Cache) Owned(ctx context.Context, pool, ownerUID string) ([]Image, error) {
	names, err := c.lv.VolumeNames(ctx, pool)
	if err != nil {
		return nil, err
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	done := map[string]bool{}
	var out []Image
	for _, n := range names {
		name, ok := dataVolumeOf(n)
		if !ok || done[name] {
			continue
		}
		done[name] = true
		if isDigestName(name) && !present[OwnerName(name, ownerUID)] && !present[ClaimName(name)] {
			continue // neither an owner record of ours nor a claim that could be ours: no need to read
		}
		img, err := c.lookup(ctx, pool, name, ownerUID)
		if err != nil {
			return nil, err
		}
		ownsDebris := img.Claim != nil && img.Claim.Owner.UID == ownerUID
		legacy := !isDigestName(name) && img.Owner.UID == ownerUID // a volume from before shared images names its one owner
		if img.HasOwn || ownsDebris || legacy {
			out = append(out, img)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Volume < out[j].Volume })
	return out, nil
}
