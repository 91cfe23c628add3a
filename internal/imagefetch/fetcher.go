package imagefetch

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

const (
	errDownload = "cannot download the image from %s"
	errSize     = "the image from %s ended after %d bytes, but the server announced %d"
)

// Fetcher downloads images within the Downloads of a host's config.
type Fetcher struct {
	dl   Downloads
	http *http.Client
}

// New returns a Fetcher that downloads what dl allows, within its limits: every URL, redirect
// and dialed address is checked against dl.Policy, no proxy is used, and the response
// headers, stalls and the image size are bounded.
func New(dl Downloads) *Fetcher {
	dl = dl.withDefaults()
	return &Fetcher{dl: dl, http: newHTTPClient(dl)}
}

// Download is one image being downloaded (Open): Stream yields its bytes, checked (format,
// size, stalls) and hashed as they pass; Close ends it and tells why its source failed.
type Download struct {
	// Total is the size the server announced (0: unknown); FinalURL is where the bytes come
	// from after redirects (without password).
	Total    int64
	FinalURL string

	f         *Fetcher
	shownURL  string
	ctx, pctx context.Context
	stalled   func()
	cancel    context.CancelFunc
	body      io.ReadCloser
	s         *imageStream
	srcErr    error
}

// Open sends the GET of rawURL under ctx. The returned Download must be closed.
func (f *Fetcher) Open(ctx context.Context, rawURL string) (*Download, error) {
	pctx, stalled, cancel := withStall(ctx)
	body, finalURL, total, err := f.get(pctx, rawURL)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Download{Total: total, FinalURL: finalURL, f: f, shownURL: RedactURL(rawURL), ctx: ctx, pctx: pctx,
		stalled: stalled, cancel: cancel, body: body}, nil
}

// Copy streams the body into to: a reader goroutine fills buffers and hashes them while the
// previous one is consumed by to, which runs under the download's context (it ends when the
// stream stalls). The image must be of format f; progress may be nil. It returns to's error.
func (d *Download) Copy(f Format, progress ProgressFunc, to func(ctx context.Context, r io.Reader) error) error {
	d.s = newImageStream(d.body, f, d.Total, d.f.dl.Limits.MaxBytes, d.f.dl.Limits.MaxVirtualBytes, d.f.dl.Limits.StallTimeout, d.stalled, progress)
	return to(d.pctx, d.s)
}

// Close ends the download and returns the failure of its source, nil when the source is not
// to blame: bytes that cannot be a base image (*FormatError), more bytes than the size limit
// or a stall (*LimitError). SourceErr is what the stream saw, as is.
func (d *Download) Close() error {
	defer d.cancel()
	if d.s == nil {
		return d.body.Close()
	}
	d.srcErr = d.s.failed() // before closing the body makes the reader fail
	_ = d.body.Close()      // unblocks the reader goroutine
	d.s.close()
	return d.f.sourceFailure(d.ctx, d.pctx, d.srcErr, d.shownURL, d.FinalURL)
}

// SourceErr is the error the stream's source failed with (nil: none), once closed.
func (d *Download) SourceErr() error { return d.srcErr }

// Err is the stream's own error (nil: none).
func (d *Download) Err() error { return d.s.err }

// N is the number of bytes streamed.
func (d *Download) N() int64 { return d.s.n }

// Sum is the sha256 of the bytes streamed, in hex.
func (d *Download) Sum() string { return d.s.sum() }

// VirtualSize is the disk size a qcow2's header gives (0 for raw).
func (d *Download) VirtualSize() int64 { return d.s.virtualSize }

// Samples are the digests of sampled blocks of the stream, to compare with what was stored.
func (d *Download) Samples() []BlockSample { return d.s.samples }

// Digest downloads rawURL once, checking format f and the limits as a publish does, and
// returns the sha256 of its bytes and the URL they came from. Nothing is stored.
func (f *Fetcher) Digest(ctx context.Context, rawURL string, format Format) (string, string, error) {
	d, err := f.Open(ctx, rawURL)
	if err != nil {
		return "", "", err
	}
	cerr := d.Copy(format, nil, func(_ context.Context, r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	})
	if err := d.Close(); err != nil {
		return "", "", err
	}
	if cerr != nil {
		return "", "", errors.Wrapf(cerr, errDownload, d.shownURL)
	}
	if d.Total > 0 && d.N() != d.Total {
		return "", "", errors.Errorf(errSize, d.shownURL, d.N(), d.Total)
	}
	return d.Sum(), d.FinalURL, nil
}

// SizeError is the error of an image that ended before the size its server announced.
func SizeError(shownURL string, n, total int64) error {
	return errors.Errorf(errSize, shownURL, n, total)
}

// get sends the GET of rawURL under ctx, through the guarded client: the
// policy is checked on the URL, on every redirect and on every address
// dialed. It returns the body of a 200 response, the URL it finally came from (without
// password) and its announced size (0 when unknown); an announced size over
// the limit is refused before anything is read.
func (f *Fetcher) get(ctx context.Context, rawURL string) (io.ReadCloser, string, int64, error) {
	shownURL := RedactURL(rawURL)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, "", 0, errors.Wrapf(err, errDownload, shownURL)
	}
	resp, err := f.http.Do(req)
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
		// net/http's *url.Error names the URL with its query: a pre-signed URL's token.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = RedactURL(ue.URL)
		}
		return nil, "", 0, errors.Wrapf(err, errDownload, shownURL)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, "", 0, &HTTPStatusError{URL: shownURL, StatusCode: resp.StatusCode, Status: resp.Status}
	}
	finalURL := RedactURL(resp.Request.URL.String())
	total := max(resp.ContentLength, 0)
	if total > f.dl.Limits.MaxBytes {
		_ = resp.Body.Close()
		return nil, "", 0, &LimitError{URL: finalURL, Config: f.dl.Config, Limit: LimitSize, MaxBytes: f.dl.Limits.MaxBytes, Announced: total}
	}
	return resp.Body, finalURL, total, nil
}

// sourceFailure is the error of a stream that failed because of its source:
// bytes that cannot be a base image (*FormatError), more bytes than the size
// limit or a stall (*LimitError). It is nil when the source is not to blame.
// pctx is the download's context from withStall, ctx the caller's.
func (f *Fetcher) sourceFailure(ctx, pctx context.Context, srcErr error, shownURL, finalURL string) error {
	var fe *FormatError
	if errors.As(srcErr, &fe) {
		fe.URL = shownURL
		return fe
	}
	var le *LimitError
	if errors.As(srcErr, &le) {
		le.URL, le.Config = finalURL, f.dl.Config
		return le
	}
	if errors.Is(context.Cause(pctx), errStalled) && ctx.Err() == nil {
		return &LimitError{URL: finalURL, Config: f.dl.Config, Limit: LimitStall, Timeout: f.dl.Limits.StallTimeout}
	}
	return nil
}
