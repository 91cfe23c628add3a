package imagecache

import (
	"bytes"
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

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

const (
	errLookup     = "cannot look up BaseImage volume %s in pool %s"
	errReadRecord = "cannot read record volume %s in pool %s"
	errNoName     = "an image without sha256 has no volume name before its bytes are hashed"
)

// Lookup returns what pool holds for src, which must have a SHA256 (VolumeName). With a
// non-empty ownerUID it also reads that BaseImage's owner record (Image.Own).
func (c *Cache) Lookup(ctx context.Context, pool string, src Source, ownerUID string) (Image, error) {
	vol := VolumeName(Source{SHA256: src.SHA256, Format: src.Format.OrDefault()})
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

// observe is lookup for Observe: three calls (the data volume's size, the marker's and the
// owner record's fingerprints) when the records and the data volume's path are remembered with
// those fingerprints; otherwise what differs is read. The claim is read only when the marker
// does not mark the volume published (a claim next to a valid marker changes nothing).
func (c *Cache) observe(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	return c.classify(ctx, pool, volume, ownerUID, true)
}

// lookupSettled is lookup for Publish and Remove, which refuse data that no record names. The
// volumes are read one after the other, so a lookup that overlaps another process's step (an
// upload's claim dropped after its marker was written, a removal deleting the data) can see
// the data but no record that names an owner: no claim, and no marker or one read while it
// was being written (created, not yet filled). Such a view is looked at again before anything
// is decided.
func (c *Cache) lookupSettled(ctx context.Context, pool, volume, ownerUID string) (Image, error) {
	for try := 1; ; try++ {
		img, err := c.lookup(ctx, pool, volume, ownerUID)
		if err != nil || !img.HasData || img.Owner.UID != "" || img.HasClaim || try >= c.sh.timing.settleTries {
			return img, err
		}
		if err := sleep(ctx, c.sh.timing.settlePause); err != nil {
			return img, err
		}
	}
}

// sleep waits for d or until ctx ends (then it returns ctx's error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// recordReader reads a record volume: readRecord, or statRecord for Observe.
type recordReader func(ctx context.Context, pool, name string) (exists bool, rec *Record, invalid error, err error)

// classify reads volume's data volume and records and tells its State. cheap is Observe's
// way: remembered records, and the claim only when the marker does not publish the volume.
func (c *Cache) classify(ctx context.Context, pool, volume, ownerUID string, cheap bool) (Image, error) {
	img := Image{Pool: pool, Volume: volume}
	physical, err := c.findData(ctx, &img, cheap)
	if err != nil {
		return img, err
	}
	read := recordReader(c.readRecord)
	if cheap {
		read = c.statRecord
	}
	markerErr, err := c.readMarkerAndOwn(ctx, &img, ownerUID, read)
	if err != nil {
		return img, err
	}
	claimErr := error(nil)
	if !cheap || !marked(img, markerErr) || !img.HasData {
		if claimErr, err = c.readClaim(ctx, &img, read, cheap); err != nil {
			return img, err
		}
	}
	img.Owner = namedOwner(img)
	if !img.HasData && !img.HasMarker && !img.HasClaim {
		img.State = StateAbsent
		return img, nil
	}
	return c.judge(ctx, img, markerErr, claimErr, physical, cheap)
}

// findData looks the data volume up into img: its size and remembered path for Observe
// (cheap), else its definition. It returns the size when it read it.
func (c *Cache) findData(ctx context.Context, img *Image, cheap bool) (uint64, error) {
	pool, volume := img.Pool, img.Volume
	var physical uint64
	var err error
	if cheap {
		physical, err = c.lv.VolumePhysicalBytes(ctx, pool, volume)
		if err == nil {
			img.HasData, img.Path = true, c.sh.memo.path(c.memoKey(pool, volume))
			if img.Path == "" {
				err = c.rememberPath(ctx, img)
			}
		}
	} else {
		var dv libvirt.Volume
		if dv, err = c.lv.Volume(ctx, pool, volume); err == nil {
			img.HasData, img.Path = true, dv.Path
		}
	}
	if err != nil && !libvirt.IsNotFound(err) {
		return 0, errors.Wrapf(err, errLookup, volume, pool)
	}
	if err != nil {
		img.HasData, img.Path = false, ""
	}
	return physical, nil
}

// rememberPath looks up the data volume's path and remembers it.
func (c *Cache) rememberPath(ctx context.Context, img *Image) error {
	dv, err := c.lv.Volume(ctx, img.Pool, img.Volume)
	if err != nil {
		return err
	}
	img.Path = dv.Path
	c.sh.memo.put(c.memoKey(img.Pool, img.Volume), memoEntry{path: dv.Path})
	return nil
}

// readMarkerAndOwn reads the marker and, with ownerUID, that owner's record into img. It
// returns why the marker is unusable, if it is.
func (c *Cache) readMarkerAndOwn(ctx context.Context, img *Image, ownerUID string, read recordReader) (error, error) {
	var markerErr, err error
	img.HasMarker, img.Marker, markerErr, err = read(ctx, img.Pool, MarkerName(img.Volume))
	if err != nil || ownerUID == "" {
		return markerErr, err
	}
	var ownErr error
	img.HasOwn, img.Own, ownErr, err = read(ctx, img.Pool, OwnerName(img.Volume, ownerUID))
	if err != nil {
		return markerErr, err
	}
	if ownErr != nil || !isOwnerRecord(img.Own, img.Volume, ownerUID) {
		img.Own = nil
	}
	return markerErr, nil
}

// readClaim reads the claim into img and, outside Observe, its mtime (one more call, only
// while a claim exists); a claim found gone is forgotten by the claim clock. It returns why
// the claim is unusable, if it is.
func (c *Cache) readClaim(ctx context.Context, img *Image, read recordReader, cheap bool) (error, error) {
	name := ClaimName(img.Volume)
	var claimErr, err error
	img.HasClaim, img.Claim, claimErr, err = read(ctx, img.Pool, name)
	if err != nil || cheap {
		return claimErr, err
	}
	if !img.HasClaim {
		c.sh.claims.forget(c.memoKey(img.Pool, name)) // nothing to judge any more
		c.sh.progress.forget(c.memoKey(img.Pool, name))
		return claimErr, nil
	}
	cv, err := c.lv.Volume(ctx, img.Pool, name)
	if err != nil && !libvirt.IsNotFound(err) {
		return claimErr, errors.Wrapf(err, errLookup, name, img.Pool)
	}
	img.ClaimModified = cv.ModifiedAt
	return claimErr, nil
}

// marked tells whether img's marker is a valid published record of its volume.
func marked(img Image, markerErr error) bool {
	return img.HasMarker && markerErr == nil && img.Marker.State == RecordPublished && img.Marker.Volume == img.Volume
}

// namedOwner is the BaseImage the marker names, else the one the claim names.
func namedOwner(img Image) Owner {
	switch {
	case img.Marker != nil && img.Marker.Owner.UID != "":
		return img.Marker.Owner
	case img.Claim != nil && img.Claim.Owner.UID != "":
		return img.Claim.Owner
	}
	return Owner{}
}

// judge tells whether img, which is not absent, is published or debris (and why). physical is
// the data volume's size when findData read it (Observe); otherwise it is read here.
func (c *Cache) judge(ctx context.Context, img Image, markerErr, claimErr error, physical uint64, cheap bool) (Image, error) {
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
	case !marked(img, markerErr):
		img.Reason = "the marker does not mark this volume published"
	default:
		return c.checkSize(ctx, img, physical, cheap)
	}
	return img, nil
}

// checkSize publishes img when its data volume holds the size its marker records.
func (c *Cache) checkSize(ctx context.Context, img Image, n uint64, cheap bool) (Image, error) {
	if !cheap {
		var err error
		n, err = c.lv.VolumePhysicalBytes(ctx, img.Pool, img.Volume)
		if libvirt.IsNotFound(err) {
			img.HasData, img.Path, img.Reason = false, "", "the data volume is missing"
			return img, nil
		}
		if err != nil {
			return img, errors.Wrapf(err, errLookup, img.Volume, img.Pool)
		}
	}
	if int64(n) != img.Marker.SizeBytes {
		img.Reason = "the data volume holds " + strconv.FormatUint(n, 10) + " bytes, the marker records " + strconv.FormatInt(img.Marker.SizeBytes, 10)
		return img, nil
	}
	img.State, img.Reason = StatePublished, ""
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

// Owned lists the BaseImage volumes of pool that ownerUID has an owner record on, and those
// (published or debris) whose marker or claim names it without one (debris of its uploads,
// volumes from before shared images), e.g. to find its images after a restart with empty
// status, or all of them on deletion. Image.Own is set from its owner record.
func (c *Cache) Owned(ctx context.Context, pool, ownerUID string) ([]Image, error) {
	names, err := c.lv.VolumeNames(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, name := range candidates(names, ownerUID) {
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

// candidates are the data volumes of names that ownerUID may own: every volume from before
// shared images, and the shared ones next to an owner record of ownerUID or a claim (which
// could be ours), in the order first seen.
func candidates(names []string, ownerUID string) []string {
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	done := map[string]bool{}
	var out []string
	for _, n := range names {
		name, ok := dataVolumeOf(n)
		if !ok || done[name] {
			continue
		}
		done[name] = true
		if isDigestName(name) && !present[OwnerName(name, ownerUID)] && !present[ClaimName(name)] {
			continue // neither an owner record of ours nor a claim that could be ours: no need to read
		}
		out = append(out, name)
	}
	return out
}
