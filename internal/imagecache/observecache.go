package imagecache

import (
	"context"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// memo is what Lookup remembers of a host's records and data volumes, by address, pool and
// volume name (Cache.memoKey). One per process, on Shared.
type memo struct {
	mu  sync.Mutex
	m   map[string]memoEntry
	now func() time.Time
	// recheck is how long a record is trusted on its fingerprint alone (DefaultRecheck).
	recheck time.Duration
}

// memoEntry is a record read with its fingerprint, or a data volume's path.
type memoEntry struct {
	fp      libvirt.VolumeInfo
	rec     *Record
	invalid error
	path    string
	at      time.Time
}

func (m *memo) get(k string, fp libvirt.VolumeInfo) (memoEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[k]
	if !ok || e.fp != fp || m.now().Sub(e.at) >= m.recheck {
		return memoEntry{}, false
	}
	return e, true
}

func (m *memo) path(k string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[k].path
}

func (m *memo) put(k string, e memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.at = m.now()
	m.m[k] = e
}

// forget drops what is remembered of volume, its marker and claim, and the owner record of
// ownerUID: Publish and Remove call it before and after they change them.
func (c *Cache) forget(pool, volume, ownerUID string) {
	m := c.sh.memo
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range []string{volume, MarkerName(volume), ClaimName(volume), OwnerName(volume, ownerUID)} {
		delete(m.m, c.memoKey(pool, n))
	}
}

// forgetRecord drops what is remembered of the record volume name.
func (c *Cache) forgetRecord(pool, name string) {
	m := c.sh.memo
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, c.memoKey(pool, name))
}

// statRecord is readRecord for Lookup: one call for the record volume's fingerprint, and a
// download only when it is not remembered with that fingerprint.
func (c *Cache) statRecord(ctx context.Context, pool, name string) (exists bool, rec *Record, invalid error, err error) {
	fp, err := c.lv.VolumeInfo(ctx, pool, name)
	if libvirt.IsNotFound(err) {
		return false, nil, nil, nil
	}
	if err != nil {
		return false, nil, nil, errors.Wrapf(err, errReadRecord, name, pool)
	}
	k := c.memoKey(pool, name)
	if e, ok := c.sh.memo.get(k, fp); ok {
		return true, e.rec, e.invalid, nil
	}
	exists, rec, invalid, err = c.readRecord(ctx, pool, name)
	if !exists || err != nil {
		return exists, nil, nil, err
	}
	// Keyed by the fingerprint taken before the read: a change since shows as another.
	c.sh.memo.put(k, memoEntry{fp: fp, rec: rec, invalid: invalid})
	return true, rec, invalid, nil
}
