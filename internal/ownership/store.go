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
	CreateVolume(ctx context.Context, pool, xml string) (libvirt.Volume, error)
	Upload(ctx context.Context, pool, name string, r io.Reader, length uint64) error
	Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error
	DeleteVolume(ctx context.Context, pool, name string) error
}

// Records reads and writes ownership records. Its cache remembers records it verified or
// wrote (a record is never rewritten in place, so a verified one stays valid while it exists),
// so a steady-state Observe costs one volume lookup, not a download.
type Records struct {
	now func() time.Time
	mu  sync.Mutex
	ok  map[string]bool
}

// NewRecords returns an empty Records.
func NewRecords() *Records { return &Records{now: time.Now, ok: map[string]bool{}} }

func cacheKey(host, pool, volume string, o Owner) string {
	return host + "\x00" + pool + "\x00" + volume + "\x00" + o.Kind + "\x00" + o.UID
}

func (r *Records) cached(k string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok[k]
}

func (r *Records) remember(k string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.ok[k] = true
	} else {
		delete(r.ok, k)
	}
}

// read returns the record of volume; found is false when there is none.
func read(ctx context.Context, s Storage, pool, volume string) (rec Record, found bool, err error) {
	name := RecordVolume(volume)
	v, err := s.Volume(ctx, pool, name)
	if libvirt.IsNotFound(err) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, hostError{errors.Wrapf(err, errLookupRecord, name)}
	}
	n := v.CapacityBytes
	if n == 0 || n > maxRecordBytes {
		return Record{}, true, errors.Errorf("the ownership record %s has an impossible size of %d bytes", name, n)
	}
	var b bytes.Buffer
	if err := s.Download(ctx, pool, name, &b, 0, n); err != nil {
		return Record{}, true, hostError{errors.Wrapf(err, errReadRecord, name)}
	}
	rec, err = Decode(b.Bytes())
	return rec, true, err
}

// Verify returns nil when volume's record names o. It returns a NotOwnedError when there is
// no record, a torn one, or one naming someone else, and another error when the host could
// not be asked. host names the host for the cache (e.g. its address).
func (r *Records) Verify(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	k := cacheKey(host, pool, volume, o)
	if r.cached(k) {
		// One lookup proves the record is still there.
		_, err := s.Volume(ctx, pool, RecordVolume(volume))
		if err == nil {
			return nil
		}
		if !libvirt.IsNotFound(err) {
			return errors.Wrapf(err, errLookupRecord, RecordVolume(volume))
		}
		r.remember(k, false)
		return &NotOwnedError{Volume: volume, Why: whyNoRecord}
	}
	rec, found, err := read(ctx, s, pool, volume)
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
	r.remember(k, true)
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
	rec, found, err := read(ctx, s, pool, volume)
	if isHostError(err) {
		return err
	}
	if found && err == nil {
		if err := rec.Check(volume, o); err != nil {
			return err
		}
		r.remember(cacheKey(host, pool, volume, o), true)
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
			return r.Verify(ctx, s, host, pool, volume, o)
		}
		return errors.Wrapf(err, errWriteRecord, name)
	}
	if err := s.Upload(ctx, pool, name, bytes.NewReader(b), uint64(len(b))); err != nil {
		return errors.Wrapf(err, errWriteRecord, name)
	}
	r.remember(cacheKey(host, pool, volume, o), true)
	return nil
}

// Release deletes volume's record once volume itself is gone. A record that names someone
// else is left alone.
func (r *Records) Release(ctx context.Context, s Storage, host, pool, volume string, o Owner) error {
	r.remember(cacheKey(host, pool, volume, o), false)
	rec, found, err := read(ctx, s, pool, volume)
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
