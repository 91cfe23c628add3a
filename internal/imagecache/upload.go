package imagecache

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errDownload = "cannot download the image from %s"
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
	pctx, stalled, cancel := withStall(ctx)
	defer cancel()
	resp, finalURL, total, err := c.get(pctx, src.URL)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only body
	if err := c.createData(ctx, pool, vol, total); err != nil {
		return Result{}, err
	}
	faultpoint.Reach(faultpoint.BaseDataCreated)

	s := newImageStream(resp.Body, src.Format, total, c.dl.Limits.MaxBytes, c.dl.Limits.StallTimeout, stalled, progress)
	uerr := c.lv.Upload(pctx, pool, vol, s, uint64(total))
	srcErr := s.failed()  // before closing the body makes the reader fail
	_ = resp.Body.Close() // unblocks the reader goroutine
	s.close()
	res := Result{Bytes: s.n, FinalURL: finalURL}
	if err := c.streamFailure(ctx, pctx, s, srcErr, uerr, shownURL, finalURL, vol, pool); err != nil {
		return res, err
	}
	faultpoint.Reach(faultpoint.BaseUploaded)
	marker, err := c.checkUploaded(ctx, pool, vol, owner.UID, src, s, total, shownURL)
	if err != nil {
		return res, err
	}
	marker.Owner, marker.FinalURL, marker.ExpectedSHA256, marker.Verified = owner, finalURL, expected, expected != ""
	return res, c.writeRecord(ctx, pool, MarkerName(vol), marker)
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

// streamFailure is the error of a stream s into vol that ended with uerr from libvirt and
// srcErr from its source, nil when it succeeded. pctx is the download's context, ctx the
// caller's.
func (c *Cache) streamFailure(ctx, pctx context.Context, s *imageStream, srcErr, uerr error, shownURL, finalURL, vol, pool string) error {
	if err := c.sourceFailure(ctx, pctx, srcErr, shownURL, finalURL); err != nil {
		return err
	}
	if uerr != nil {
		if srcErr != nil && ctx.Err() == nil {
			// The download failed; libvirt only saw the stream aborted.
			return errors.Wrapf(srcErr, errUpload, shownURL, vol, pool)
		}
		return errors.Wrapf(uerr, errUpload, shownURL, vol, pool)
	}
	if s.err != nil {
		return errors.Wrapf(s.err, errUpload, shownURL, vol, pool)
	}
	return nil
}

// checkUploaded checks what the host stored after the stream s of total announced bytes, and
// returns the marker to write (without owner, final URL and expected digest). libvirt's own
// refresh after an upload is skipped while another volume of the pool is being built: the
// pool is refreshed so that it reports the probed format and virtual size. Then sampled blocks
// are read back (see imageStream.samples), and the claim must still be ours, right before the
// marker makes the volume usable.
func (c *Cache) checkUploaded(ctx context.Context, pool, vol, ownerUID string, src Source, s *imageStream, total int64, shownURL string) (Record, error) {
	if err := c.lv.RefreshPool(ctx, pool); err != nil {
		return Record{}, err
	}
	n, err := c.lv.VolumePhysicalBytes(ctx, pool, vol)
	if err != nil {
		return Record{}, err
	}
	sum := s.sum()
	virtual, err := verifyUpload(src, shownURL, vol, uploaded{N: s.n, Total: total, Physical: int64(n), SHA256: sum, VirtualSize: s.virtualSize})
	if err != nil {
		return Record{}, err
	}
	if err := c.verifyStored(ctx, pool, vol, s.samples); err != nil {
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
		Format: src.Format, SizeBytes: s.n, VirtualSizeBytes: virtual, Time: c.now().UTC(),
	}, nil
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
