package imagecache

import (
	"bytes"
	"context"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// cleanupTimeout bounds removing debris after a failed publish, which runs
// even when the caller's context has ended.
const cleanupTimeout = 30 * time.Second

const errWriteRecord = "cannot write record volume %s in pool %s"

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

// bestEffortDelete deletes volumes even after ctx ended; what it cannot
// delete is debris for the next attempt. It tells whether all are gone.
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
