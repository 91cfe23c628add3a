package ownership

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errLookupRecord = "cannot look up the ownership record %s"
	errReadRecord   = "cannot read the ownership record %s"
	errWriteRecord  = "cannot write the ownership record %s"
	errDropRecord   = "cannot delete the ownership record %s"
	whyNoRecord     = "it carries no ownership record"
	whyTorn         = "its ownership record is unreadable: %v"
)

// Storage is what records need of a host's storage; *libvirt.Client is one.
type Storage interface {
	Volume(ctx context.Context, pool, name string) (libvirt.Volume, error)
	VolumeInfo(ctx context.Context, pool, name string) (libvirt.VolumeInfo, error)
	CreateVolume(ctx context.Context, pool, xml string) (libvirt.Volume, error)
	Upload(ctx context.Context, pool, name string, r io.Reader, length uint64) error
	Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error
	DeleteVolume(ctx context.Context, pool, name string) error
}

// DefaultRecheck is how long a verified record is trusted on its fingerprint alone before it
// is read again: at most the provider's sync period (1 h by default).
const DefaultRecheck = time.Hour

// Records reads and writes ownership records. Its cache remembers the records it verified or
// wrote with their volume's fingerprint (capacity and allocation): a steady-state Verify costs
// one call that compares the fingerprint, not a download. A record whose fingerprint changed,
// or that was last read longer than the recheck period ago, is read again. VerifyFresh, for
// deletes, always reads.
type Records struct {
	now     func() time.Time
	recheck time.Duration
	mu      sync.Mutex
	ok      map[string]verified
}

// verified is a record the cache vouches for.
type verified struct {
	fp libvirt.VolumeInfo
	at time.Time
}

// NewRecords returns an empty Records.
func NewRecords() *Records {
	return &Records{now: time.Now, recheck: DefaultRecheck, ok: map[string]verified{}}
}

func cacheKey(host, pool, volume string, o Owner) string {
	return host + "\x00" + pool + "\x00" + volume + "\x00" + o.Kind + "\x00" + o.UID
}

// cached reports whether the record k was verified with fingerprint fp within the recheck
// period.
func (r *Records) cached(k string, fp libvirt.VolumeInfo) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.ok[k]
	return ok && v.fp == fp && r.now().Sub(v.at) < r.recheck
}

func (r *Records) has(k string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.ok[k]
	return ok
}

func (r *Records) remember(k string, fp libvirt.VolumeInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok[k] = verified{fp: fp, at: r.now()}
}

func (r *Records) forget(k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ok, k)
}

// RecordReader is what reading a record needs of a host's storage.
type RecordReader interface {
	Volume(ctx context.Context, pool, name string) (libvirt.Volume, error)
	Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error
}

// ReadRecord reads volume's record, whoever it names: found is false when there is none; an
// error is a call that failed (IsHostError) or a record that is unusable (torn, not ours).
func ReadRecord(ctx context.Context, s RecordReader, pool, volume string) (rec Record, found bool, err error) {
	rec, _, found, err = read(ctx, s, pool, volume)
	return rec, found, err
}

// IsHostError is true when err is a call to the host that failed, not a bad record.
func IsHostError(err error) bool { return isHostError(err) }

// read returns the record of volume and the fingerprint of its volume; found is false when
// there is none.
func read(ctx context.Context, s RecordReader, pool, volume string) (rec Record, fp libvirt.VolumeInfo, found bool, err error) {
	name := RecordVolume(volume)
	v, err := s.Volume(ctx, pool, name)
	if libvirt.IsNotFound(err) {
		return Record{}, fp, false, nil
	}
	if err != nil {
		return Record{}, fp, false, hostError{errors.Wrapf(err, errLookupRecord, name)}
	}
	fp = libvirt.VolumeInfo{CapacityBytes: v.CapacityBytes, AllocationBytes: v.AllocationBytes}
	n := v.CapacityBytes
	if n == 0 || n > maxRecordBytes {
		return Record{}, fp, true, errors.Errorf("the ownership record %s has an impossible size of %d bytes", name, n)
	}
	var b bytes.Buffer
	if err := s.Download(ctx, pool, name, &b, 0, n); err != nil {
		return Record{}, fp, true, hostError{errors.Wrapf(err, errReadRecord, name)}
	}
	rec, err = Decode(b.Bytes())
	return rec, fp, true, err
}

// Verify returns nil when volume's record names o. It returns a NotOwnedError when there is
// no record, a torn one, or one naming someone else, and another error when the host could
// not be asked. host names the host for the cache (e.g. its address). A record verified
// before is trusted while its volume's fingerprint is unchanged, for at most the recheck
// period.
func (r *Records) Verify(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	k := cacheKey(host, pool, volume, o)
	if r.has(k) {
		fp, err := s.VolumeInfo(ctx, pool, RecordVolume(volume))
		switch {
		case err == nil && r.cached(k, fp):
			return nil
		case libvirt.IsNotFound(err):
			r.forget(k)
			return &NotOwnedError{Volume: volume, Why: whyNoRecord}
		case err != nil:
			return errors.Wrapf(err, errLookupRecord, RecordVolume(volume))
		}
		// Changed, or trusted for long enough: read it again.
	}
	return r.VerifyFresh(ctx, s, host, pool, volume, o)
}

// VerifyFresh is Verify that always reads the record: what a delete relies on.
func (r *Records) VerifyFresh(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	k := cacheKey(host, pool, volume, o)
	r.forget(k)
	rec, fp, found, err := read(ctx, s, pool, volume)
	switch {
	case isHostError(err):
		return err
	case !found:
		return &NotOwnedError{Volume: volume, Why: whyNoRecord}
	case err != nil:
		return &NotOwnedError{Volume: volume, Why: errors.Errorf(whyTorn, err).Error()}
	}
	if err := rec.Check(volume, o); err != nil {
		return err
	}
	r.remember(k, fp)
	return nil
}

// isHostError tells a failed call from a bad record.
func isHostError(err error) bool {
	var h hostError
	return errors.As(err, &h)
}

type hostError struct{ error }

func (h hostError) Unwrap() error { return h.error }

// Claim makes sure volume has a record naming o, before volume itself is created: it writes
// one when there is none. A record that names someone else is a NotOwnedError. A torn record
// (a write cut short) is replaced only while volume does not exist, so nothing it guarded is
// ever given away.
func (r *Records) Claim(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	rec, fp, found, err := read(ctx, s, pool, volume)
	if isHostError(err) {
		return err
	}
	if found && err == nil {
		if err := rec.Check(volume, o); err != nil {
			return err
		}
		r.remember(cacheKey(host, pool, volume, o), fp)
		return nil
	}
	name := RecordVolume(volume)
	if found {
		// Torn or unreadable: ours to replace only if nothing exists that it could guard.
		if _, verr := s.Volume(ctx, pool, volume); !libvirt.IsNotFound(verr) {
			if verr != nil {
				return errors.Wrapf(verr, errLookupRecord, volume)
			}
			return &NotOwnedError{Volume: volume, Why: errors.Errorf(whyTorn, err).Error()}
		}
		if derr := s.DeleteVolume(ctx, pool, name); derr != nil && !libvirt.IsNotFound(derr) {
			return errors.Wrapf(derr, errDropRecord, name)
		}
	}
	return r.write(ctx, s, host, pool, volume, o)
}

// write writes a fresh record naming o into a new record volume and remembers it with its
// fingerprint.
func (r *Records) write(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	name := RecordVolume(volume)
	b, err := Encode(volume, o, r.now())
	if err != nil {
		return err
	}
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: name, Format: libvirt.FormatRaw, CapacityBytes: uint64(len(b))})
	if err != nil {
		return errors.Wrapf(err, errWriteRecord, name)
	}
	if _, err := s.CreateVolume(ctx, pool, x); err != nil {
		if libvirt.IsExists(err) {
			// Someone else made it in between: check what it says.
			return r.VerifyFresh(ctx, s, host, pool, volume, o)
		}
		return errors.Wrapf(err, errWriteRecord, name)
	}
	if err := s.Upload(ctx, pool, name, bytes.NewReader(b), uint64(len(b))); err != nil {
		return errors.Wrapf(err, errWriteRecord, name)
	}
	// The fingerprint after the upload: a raw volume's allocation grows with what was written.
	fp, err := s.VolumeInfo(ctx, pool, name)
	if err != nil {
		return errors.Wrapf(err, errLookupRecord, name)
	}
	r.remember(cacheKey(host, pool, volume, o), fp)
	return nil
}

// Release deletes volume's record once volume itself is gone. A record that names someone
// else is left alone.
func (r *Records) Release(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	r.forget(cacheKey(host, pool, volume, o))
	rec, _, found, err := read(ctx, s, pool, volume)
	if !found || isHostError(err) {
		return err
	}
	if err == nil {
		if cerr := rec.Check(volume, o); cerr != nil {
			return cerr
		}
	}
	// A torn record of a volume that no longer exists guards nothing.
	if err := s.DeleteVolume(ctx, pool, RecordVolume(volume)); err != nil && !libvirt.IsNotFound(err) {
		return errors.Wrapf(err, errDropRecord, RecordVolume(volume))
	}
	return nil
}
