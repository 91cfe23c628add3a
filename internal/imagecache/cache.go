package imagecache

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// cleanupTimeout bounds removing debris after a failed publish, which runs
// even when the caller's context has ended.
const cleanupTimeout = 30 * time.Second

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
	// Debris is never usable; its owner's next Publish removes it.
	StateDebris State = "Debris"
)

// Image is what a pool holds for one data volume name.
type Image struct {
	State  State
	Pool   string
	Volume string
	// Path of the data volume on the host, when it exists.
	Path string
	// Owner named by the marker, else by the claim; zero when no record
	// could be read.
	Owner Owner
	// Marker is the record of the .meta volume, if one could be parsed.
	// For a Published image it holds the digest, sizes and source.
	Marker *Record
	// Claim is the record of the .claim volume, if one could be parsed.
	Claim *Record
	// Reason says why an image is Debris.
	Reason string

	HasData, HasMarker, HasClaim bool
}

// Result of a Publish.
type Result struct {
	Image Image
	// Reused is true when the image was already published: nothing was
	// downloaded.
	Reused bool
	// Bytes uploaded and how long downloading and uploading took.
	Bytes    int64
	Duration time.Duration
}

// BytesPerSecond is the throughput of the upload, 0 if nothing was uploaded.
func (r Result) BytesPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Duration.Seconds()
}

// Cache publishes, looks up and removes BaseImage volumes on one host.
type Cache struct {
	lv   *libvirt.Client
	dl   Downloads
	http *http.Client
	now  func() time.Time
}

// An Option configures a Cache.
type Option func(*Cache)

// WithClock sets the clock used for record times and durations.
func WithClock(now func() time.Time) Option { return func(c *Cache) { c.now = now } }

// New returns a Cache that reaches the host through lv and downloads what dl
// allows, within its limits: every URL, redirect and dialed address is
// checked against dl.Policy, no proxy is used, and the response headers,
// stalls and the image size are bounded.
func New(lv *libvirt.Client, dl Downloads, opts ...Option) *Cache {
	dl = dl.withDefaults()
	c := &Cache{lv: lv, dl: dl, http: newHTTPClient(dl), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	return c
}

// volumeLocks serializes Publish and Remove of one volume within the
// process, e.g. a new reconcile and a cancelled one still aborting.
var volumeLocks sync.Map // string -> chan struct{}

func (c *Cache) lock(ctx context.Context, pool, volume string) (func(), error) {
	v, _ := volumeLocks.LoadOrStore(c.lv.Address()+"\x00"+pool+"\x00"+volume, make(chan struct{}, 1))
	ch := v.(chan struct{}) //nolint:forcetypeassert // only chans are stored
	select {
	case ch <- struct{}{}:
		return sync.OnceFunc(func() { <-ch }), nil
	case <-ctx.Done():
		return nil, errors.Wrapf(ctx.Err(), "gave up waiting for another operation on volume %s", volume)
	}
}

const (
	errLookup       = "cannot look up BaseImage volume %s in pool %s"
	errReadRecord   = "cannot read record volume %s in pool %s"
	errWriteRecord  = "cannot write record volume %s in pool %s"
	errDownload     = "cannot download the image from %s"
	errUpload       = "cannot stream the image from %s into volume %s in pool %s"
	errSize         = "the image from %s ended after %d bytes, but the server announced %d"
	errPhysical     = "volume %s holds %d bytes after the upload, but %d were sent"
	errNotPublished = "volume %s in pool %s is not published after publishing it: %s"
	errClaimRace    = "volume %s in pool %s was claimed concurrently; retrying later"
	errNotOurs      = "refusing to remove volume %q: it is not a BaseImage volume"
	errUsers        = "cannot find the users of %s"
	errCleanDebris  = "cannot remove debris of volume %s in pool %s"
	errRemove       = "cannot remove volume %s from pool %s"
)

// Lookup returns what pool holds for src. With a non-empty ownerUID it
// fails with IsOwnedByOther (and still returns the Image) when the volume
// belongs to another owner.
func (c *Cache) Lookup(ctx context.Context, pool string, src Source, ownerUID string) (Image, error) {
	return c.LookupVolume(ctx, pool, VolumeName(src), ownerUID)
}

// LookupVolume is Lookup by data volume name, e.g. the name recorded in a
// BaseImage's status.
func (c *Cache) LookupVolume(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	img, err := c.observe(ctx, pool, volume)
	if err != nil {
		return img, err
	}
	if ownerUID != "" {
		return img, checkOwner(img, ownerUID)
	}
	return img, nil
}

// lookup reads the state of volume: three volume lookups, at most two
// record downloads of a few hundred bytes and one stat. It trusts nothing remembered: what
// writes and deletes rely on.
func (c *Cache) lookup(ctx context.Context, pool, volume string) (Image, error) {
	return c.classify(ctx, pool, volume, false)
}

// observe is lookup for Observe: three calls (the data volume's size, the marker's and the
// claim's fingerprints) when the records and the data volume's path are remembered with
// those fingerprints; otherwise what differs is read.
func (c *Cache) observe(ctx context.Context, pool, volume string) (Image, error) {
	return c.classify(ctx, pool, volume, true)
}

func (c *Cache) classify(ctx context.Context, pool, volume string, cheap bool) (Image, error) { //nolint:gocyclo // classifies the three volumes of the protocol in one place, the doc comment of the package names every case
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
	img.HasClaim, img.Claim, claimErr, err = read(ctx, pool, ClaimName(volume))
	if err != nil {
		return img, err
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
		img.Reason = "the upload by " + img.Claim.Owner.String() + " started at " + img.Claim.Time.UTC().Format(time.RFC3339) + " is in progress or was cut"
	case !img.HasMarker:
		img.Reason = "the data volume has no marker: its upload did not finish"
	case markerErr != nil:
		img.Reason = "the marker is unusable: " + markerErr.Error()
	case img.Marker.State != RecordPublished || img.Marker.Volume != volume:
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

// checkOwner fails when a record of img names an owner other than uid.
func checkOwner(img Image, uid string) error {
	for _, r := range []*Record{img.Marker, img.Claim} {
		if r != nil && r.Owner.UID != "" && r.Owner.UID != uid {
			return &OwnedByOtherError{Pool: img.Pool, Volume: img.Volume, Owner: r.Owner}
		}
	}
	return nil
}

// publishPlan is what Publish does, given what is on the host (see planPublish).
type publishPlan struct {
	// Reuse: the image is published and ours; nothing is downloaded.
	Reuse bool
	// DropClaim: a claim of ours was left next to the published image.
	DropClaim bool
	// CheckUsers: a data volume exists; before it is deleted, no overlay may use it.
	CheckUsers bool
	// Delete lists the debris to remove, in order: marker, data, claim.
	Delete []string
	// WriteClaim: our claim must be written before the upload (there is none we can keep).
	WriteClaim bool
}

// planPublish decides, without I/O, what Publish does with img on behalf of owner. It refuses
// an image another owner's record names, and data that no record names (we write the claim
// before the data and drop it only after the marker, so such data was never ours).
func planPublish(img Image, owner Owner) (publishPlan, error) {
	if err := checkOwner(img, owner.UID); err != nil {
		return publishPlan{}, err
	}
	if img.State == StatePublished {
		return publishPlan{Reuse: true, DropClaim: img.HasClaim}, nil
	}
	if img.HasData && img.Owner.UID == "" {
		return publishPlan{}, &OwnedByOtherError{Pool: img.Pool, Volume: img.Volume}
	}
	// Debris of ours (or torn records of ours) or nothing: start clean, keeping our claim.
	p := publishPlan{CheckUsers: img.HasData}
	if img.HasMarker {
		p.Delete = append(p.Delete, MarkerName(img.Volume))
	}
	if img.HasData {
		p.Delete = append(p.Delete, img.Volume)
	}
	keepClaim := img.HasClaim && img.Claim != nil && img.Claim.Owner.UID == owner.UID && img.Claim.State == RecordClaimed
	if img.HasClaim && !keepClaim {
		p.Delete = append(p.Delete, ClaimName(img.Volume))
	}
	p.WriteClaim = !keepClaim
	return p, nil
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
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil {
			return false
		}
	}
	return true
}

// Publish makes src available in pool as the data volume VolumeName(src),
// owned by owner. If it is already published by owner, nothing is
// downloaded (Result.Reused). Debris of an earlier attempt by owner (or by
// nobody) is removed first. The image is streamed from src.URL straight into
// the volume while its sha256 is computed; a digest other than src.SHA256
// fails with a *DigestMismatchError and leaves nothing behind. progress may
// be nil.
//
// Errors: IsOwnedByOther when the volume belongs to another owner;
// IsDigestMismatch, IsFormatError (terminal, see IsTerminal); anything else
// is worth retrying.
func (c *Cache) Publish(ctx context.Context, pool string, src Source, owner Owner, progress ProgressFunc) (Result, error) { //nolint:gocyclo // planPublish holds the decisions; what is left is the steps of the protocol, each returning its error
	if err := src.Validate(); err != nil {
		return Result{}, err
	}
	if owner.UID == "" {
		return Result{}, errors.New(errNoOwnerUID)
	}
	src.Format = src.Format.orDefault()
	vol := VolumeName(src)
	unlock, err := c.lock(ctx, pool, vol)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	// What Lookup remembers of this volume is stale once Publish changed it.
	c.forget(pool, vol)
	defer c.forget(pool, vol)

	img, err := c.lookup(ctx, pool, vol)
	if err != nil {
		return Result{Image: img}, err
	}
	plan, err := planPublish(img, owner)
	if err != nil {
		return Result{Image: img}, err
	}
	if plan.Reuse {
		if plan.DropClaim && c.lv.DeleteVolume(ctx, pool, ClaimName(vol)) == nil {
			img.HasClaim, img.Claim = false, nil
		}
		return Result{Image: img, Reused: true}, nil
	}
	// Even debris is never deleted under an overlay: whatever made it, a guest's disk depends
	// on the file.
	if plan.CheckUsers {
		users, err := c.Users(ctx, img.Path)
		if err != nil {
			return Result{Image: img}, err
		}
		if len(users) > 0 {
			return Result{Image: img}, &InUseError{Pool: pool, Volume: vol, Users: users}
		}
	}
	for _, n := range plan.Delete {
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil {
			return Result{Image: img}, errors.Wrapf(err, errCleanDebris, vol, pool)
		}
	}
	if plan.WriteClaim {
		claim := Record{State: RecordClaimed, Volume: vol, Owner: owner, SourceURL: redactURL(src.URL), ExpectedSHA256: src.SHA256, Format: src.Format, Time: c.now().UTC()}
		if err := c.writeRecord(ctx, pool, ClaimName(vol), claim); err != nil {
			if libvirt.IsExists(err) {
				if img, lerr := c.lookup(ctx, pool, vol); lerr == nil {
					if oerr := checkOwner(img, owner.UID); oerr != nil {
						return Result{Image: img}, oerr
					}
				}
				return Result{}, errors.Errorf(errClaimRace, vol, pool)
			}
			return Result{}, err
		}
	}

	start := c.now()
	res, err := c.upload(ctx, pool, vol, src, owner, progress)
	res.Duration = c.now().Sub(start)
	if err != nil {
		// Remove the data volume, then the claim: what cannot be removed
		// stays claimed by owner, for its next attempt.
		if c.bestEffortDelete(ctx, pool, vol, MarkerName(vol)) {
			c.bestEffortDelete(ctx, pool, ClaimName(vol))
		}
		return res, err
	}
	_ = c.lv.DeleteVolume(ctx, pool, ClaimName(vol)) // a stale claim of ours is harmless

	img, err = c.lookup(ctx, pool, vol)
	res.Image = img
	if err != nil {
		return res, err
	}
	if img.State != StatePublished {
		return res, errors.Errorf(errNotPublished, vol, pool, img.Reason)
	}
	return res, nil
}

// upload downloads src into a new data volume vol, verifies it, refreshes
// the pool and writes the marker.
func (c *Cache) upload(ctx context.Context, pool, vol string, src Source, owner Owner, progress ProgressFunc) (Result, error) { //nolint:gocyclo // verifyUpload holds the decisions; what is left is the steps of the upload, each returning its error
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

	s := newImageStream(resp.Body, src.Format, total, c.dl.Limits.MaxBytes, c.dl.Limits.StallTimeout, stalled, progress)
	uerr := c.lv.Upload(pctx, pool, vol, s, uint64(total))
	srcErr := s.failed()  // before closing the body makes the reader fail
	_ = resp.Body.Close() // unblocks the reader goroutine
	s.close()
	res := Result{Bytes: s.n}
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
	marker := Record{
		State: RecordPublished, Volume: vol, Owner: owner,
		SourceURL: shownURL, FinalURL: finalURL,
		ExpectedSHA256: src.SHA256, SHA256: sum, Verified: src.SHA256 != "",
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

// Remove deletes the volume volume (a name VolumeName returned), its marker
// and claim. A volume already gone is success. It fails with IsOwnedByOther
// when another owner's record names it, and with IsInUse while a volume in
// any active pool backs onto it or a domain's disk uses it.
func (c *Cache) Remove(ctx context.Context, pool, volume, ownerUID string) error { //nolint:gocyclo // the removal protocol step by step (claim, unpublish, re-check users, delete), each returning its error
	if !IsVolumeName(volume) {
		return errors.Errorf(errNotOurs, volume)
	}
	unlock, err := c.lock(ctx, pool, volume)
	if err != nil {
		return err
	}
	defer unlock()
	c.forget(pool, volume)
	defer c.forget(pool, volume)
	img, err := c.lookup(ctx, pool, volume)
	if err != nil {
		return err
	}
	if img.State == StateAbsent {
		return nil
	}
	if err := checkOwner(img, ownerUID); err != nil {
		return err
	}
	if img.HasData && img.Owner.UID == "" {
		// No record names anyone: not made by us, never ours to delete.
		return &OwnedByOtherError{Pool: pool, Volume: volume}
	}
	inUse := func() error {
		if !img.HasData {
			return nil
		}
		users, err := c.Users(ctx, img.Path)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return &InUseError{Pool: pool, Volume: volume, Users: users}
		}
		return nil
	}
	if err := inUse(); err != nil {
		return err
	}
	if !img.HasClaim {
		owner := img.Owner
		if owner.UID == "" {
			owner = Owner{UID: ownerUID}
		}
		claim := Record{State: RecordRemoving, Volume: volume, Owner: owner, Time: c.now().UTC()}
		if img.Marker != nil {
			claim.SourceURL, claim.Format = img.Marker.SourceURL, img.Marker.Format
		}
		if err := c.writeRecord(ctx, pool, ClaimName(volume), claim); err != nil && !libvirt.IsExists(err) {
			return errors.Wrapf(err, errRemove, volume, pool)
		}
	}
	if img.HasMarker {
		if err := c.lv.DeleteVolume(ctx, pool, MarkerName(volume)); err != nil {
			return errors.Wrapf(err, errRemove, volume, pool)
		}
		// An overlay created between the first check and unpublishing:
		// publish again and leave it be.
		if err := inUse(); err != nil {
			if img.State == StatePublished {
				if werr := c.writeRecord(ctx, pool, MarkerName(volume), *img.Marker); werr != nil {
					return errors.Wrapf(werr, "%s; cannot restore its marker", err.Error())
				}
			}
			return err
		}
	}
	for _, n := range []string{volume, ClaimName(volume)} {
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil {
			return errors.Wrapf(err, errRemove, volume, pool)
		}
	}
	return nil
}

// Users lists what uses the file basePath: volumes in any active pool whose
// backing store it is ("volume POOL/NAME") and domains whose disks use it
// directly or in their backing chain ("domain NAME disk DEV").
func (c *Cache) Users(ctx context.Context, basePath string) ([]string, error) {
	pools, err := c.lv.ActivePools(ctx)
	if err != nil {
		return nil, errors.Wrapf(err, errUsers, basePath)
	}
	var users []string
	for _, p := range pools {
		vols, err := c.lv.Volumes(ctx, p.Name)
		if libvirt.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, errors.Wrapf(err, errUsers, basePath)
		}
		for _, v := range vols {
			if v.BackingStorePath == basePath && v.Path != basePath {
				users = append(users, "volume "+p.Name+"/"+v.Name)
			}
		}
	}
	disks, err := c.lv.DomainDisks(ctx)
	if err != nil {
		return nil, errors.Wrapf(err, errUsers, basePath)
	}
	for _, d := range disks {
		if d.Path == basePath {
			users = append(users, "domain "+d.Domain+" disk "+d.Target)
		}
	}
	sort.Strings(users)
	return slices.Compact(users), nil
}

// Owned lists the BaseImage volumes of pool (published or debris) whose
// records name ownerUID, e.g. to find an old image after a restart with
// empty status.
func (c *Cache) Owned(ctx context.Context, pool, ownerUID string) ([]Image, error) {
	vols, err := c.lv.Volumes(ctx, pool)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Image
	for _, v := range vols {
		name, ok := dataVolumeOf(v.Name)
		if !ok || seen[name] {
			continue
		}
		seen[name] = true
		img, err := c.lookup(ctx, pool, name)
		if err != nil {
			return nil, err
		}
		if img.Owner.UID == ownerUID {
			out = append(out, img)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Volume < out[j].Volume })
	return out, nil
}
