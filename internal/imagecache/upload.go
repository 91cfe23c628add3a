package imagecache

import (
	"context"
	"crypto/sha256"
	"io"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/imagefetch"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errUpload   = "cannot stream the image from %s into volume %s in pool %s"
	errSize     = "the image from %s ended after %d bytes, but the server announced %d"
	errPhysical = "volume %s holds %d bytes after the upload, but %d were sent"
	errReadBack = "cannot read back volume %s in pool %s to verify it"
	errStored   = "volume %s in pool %s does not hold what was uploaded: the %d bytes at offset %d differ (another writer or a storage fault); it is not published"
)

// upload downloads src into a new data volume vol, verifies it against src.SHA256, refreshes
// the pool and writes the marker. expected is the digest the BaseImage gave ("" when src.SHA256
// was computed by a first download): the marker records it, and is Verified only with one.
func (c *Cache) upload(ctx context.Context, pool, vol string, src Source, expected string, owner Owner, progress ProgressFunc) (Result, error) {
	shownURL := redactURL(src.URL)
	d, err := c.fetch.Open(ctx, src.URL)
	if err != nil {
		return Result{}, err
	}
	if err := c.room(ctx, pool, d.Total); err != nil {
		_ = d.Close()
		return Result{}, err
	}
	if err := c.createData(ctx, pool, vol, d.Total); err != nil {
		_ = d.Close()
		if hostlimits.IsNoSpace(err) {
			return Result{}, &hostlimits.PoolFullError{Pool: pool, Source: c.limits.Source, Cause: err}
		}
		return Result{}, err
	}
	faultpoint.Reach(faultpoint.BaseDataCreated)

	uerr := d.Copy(src.Format, progress, func(ctx context.Context, r io.Reader) error {
		return c.lv.Upload(ctx, pool, vol, r, uint64(d.Total))
	})
	failure := d.Close()
	res := Result{Bytes: d.N(), FinalURL: d.FinalURL}
	if err := streamFailure(ctx, d, failure, uerr, shownURL, vol, pool); err != nil {
		if failure == nil {
			err = c.asPoolFull(ctx, pool, err)
		}
		return res, err
	}
	faultpoint.Reach(faultpoint.BaseUploaded)
	marker, err := c.checkUploaded(ctx, pool, vol, owner.UID, src, d, shownURL)
	if err != nil {
		return res, c.asPoolFull(ctx, pool, err)
	}
	marker.Owner, marker.FinalURL, marker.ExpectedSHA256, marker.Verified = owner, d.FinalURL, expected, expected != ""
	return res, c.writeRecord(ctx, pool, MarkerName(vol), marker)
}

// noRoomBytes: a pool with less free than this after a failed upload is full. It is the size
// of one chunk of the stream.
const noRoomBytes = 1 << 20

// asPoolFull returns err, the failure of an upload into pool, as a *hostlimits.PoolFullError
// when it was for want of space: libvirt said ENOSPC, or the pool is full now (before abandon
// removes what was written). The second catches what libvirt does not report: on the test bed,
// two uploads at once into a tmpfs pool that holds one ended without an error, one of them
// missing a megabyte that the read-back then found differing. The controller waits long, and
// for room, before the next attempt. Terminal errors and ended contexts are left as they are.
func (c *Cache) asPoolFull(ctx context.Context, pool string, err error) error {
	if err == nil || hostlimits.IsPoolFull(err) || IsTerminal(err) || ctx.Err() != nil {
		return err
	}
	if !hostlimits.IsNoSpace(err) {
		_ = c.lv.RefreshPool(ctx, pool) // best effort, as in room
		if p, perr := c.lv.Pool(ctx, pool); perr != nil || p.AvailableBytes >= noRoomBytes {
			return err
		}
	}
	return &hostlimits.PoolFullError{Pool: pool, Source: c.limits.Source, Cause: err}
}

// room refuses an upload of total bytes (0: not announced) into a pool that has no room for
// them and the config's limits.minFreePoolMiB besides: a *hostlimits.PoolFullError, before
// anything is written. The pool is refreshed first where it can be, so that what guests wrote
// since is counted.
func (c *Cache) room(ctx context.Context, pool string, total int64) error {
	_ = c.lv.RefreshPool(ctx, pool) // best effort: libvirt refuses while a volume is being built
	p, err := c.lv.Pool(ctx, pool)
	if err != nil {
		return err
	}
	return c.limits.Room(pool, p.AvailableBytes, uint64(max(total, 0)))
}

// createData creates the raw data volume vol for total bytes (0: unknown). A file the pool has
// not listed yet (e.g. left by a cut upload before a libvirtd restart) is made visible to
// libvirt and removed first.
func (c *Cache) createData(ctx context.Context, pool, vol string, total int64) error {
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: libvirt.FormatRaw, CapacityBytes: uint64(total)})
	if err != nil {
		return err
	}
	_, err = c.lv.CreateVolume(ctx, pool, x)
	if !libvirt.IsExists(err) {
		return err
	}
	if err := c.lv.RefreshPool(ctx, pool); err != nil {
		return err
	}
	if err := c.lv.DeleteVolume(ctx, pool, vol); err != nil {
		return err
	}
	_, err = c.lv.CreateVolume(ctx, pool, x)
	return err
}

// streamFailure is the error of the download d streamed into vol, which libvirt ended with
// uerr, nil when it succeeded. failure is what Close blamed on the source.
func streamFailure(ctx context.Context, d *imagefetch.Download, failure, uerr error, shownURL, vol, pool string) error {
	if failure != nil {
		return failure
	}
	if uerr != nil {
		if srcErr := d.SourceErr(); srcErr != nil && ctx.Err() == nil {
			// The download failed; libvirt only saw the stream aborted.
			return errors.Wrapf(srcErr, errUpload, shownURL, vol, pool)
		}
		return errors.Wrapf(uerr, errUpload, shownURL, vol, pool)
	}
	if d.Err() != nil {
		return errors.Wrapf(d.Err(), errUpload, shownURL, vol, pool)
	}
	return nil
}

// checkUploaded checks what the host stored after the download d, and
// returns the marker to write (without owner, final URL and expected digest). libvirt's own
// refresh after an upload is skipped while another volume of the pool is being built: the
// pool is refreshed so that it reports the probed format and virtual size. Then sampled blocks
// are read back (imagefetch.Download.Samples), and the claim must still be ours, right before the
// marker makes the volume usable.
func (c *Cache) checkUploaded(ctx context.Context, pool, vol, ownerUID string, src Source, d *imagefetch.Download, shownURL string) (Record, error) {
	if err := c.lv.RefreshPool(ctx, pool); err != nil {
		return Record{}, err
	}
	n, err := c.lv.VolumePhysicalBytes(ctx, pool, vol)
	if err != nil {
		return Record{}, err
	}
	sum := d.Sum()
	virtual, err := verifyUpload(src, shownURL, vol, uploaded{N: d.N(), Total: d.Total, Physical: int64(n), SHA256: sum, VirtualSize: d.VirtualSize()})
	if err != nil {
		return Record{}, err
	}
	if err := c.verifyStored(ctx, pool, vol, d.Samples()); err != nil {
		return Record{}, err
	}
	if mine, err := c.stillOurs(ctx, pool, vol, ownerUID); err != nil || !mine {
		if err == nil {
			err = errClaimLost
		}
		return Record{}, err
	}
	return Record{
		State: RecordPublished, Volume: vol, SourceURL: shownURL, SHA256: sum,
		Format: src.Format, SizeBytes: d.N(), VirtualSizeBytes: virtual, Time: c.now().UTC(),
	}, nil
}

// verifyStored reads back the sampled blocks of vol and compares each with the digest taken
// while it was streamed.
func (c *Cache) verifyStored(ctx context.Context, pool, vol string, samples []imagefetch.BlockSample) error {
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
