package libvirt

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// UploadIdleTimeout bounds how long an upload may go without libvirt asking for more bytes
// while none is being waited for from the source: then libvirt is not reading the stream any
// more and the upload is ended. Seen on the test bed: after ENOSPC under two uploads at once,
// go-libvirt's stream call returned its error and then blocked for ever (its deferred
// deregistration waits for a lock its receive loop holds while it hands the server's last
// message to nobody). The source's own stalls are imagefetch's stall timeout, not this.
const UploadIdleTimeout = 60 * time.Second

var errUploadIdle = errors.New("libvirt took no bytes of the upload for " + UploadIdleTimeout.String() + " while they were ready: the stream is stuck")

// watchedReader notes when its reader was last read, and whether a read is in progress (the
// source is being waited for).
type watchedReader struct {
	r      io.Reader
	mu     sync.Mutex
	inRead bool
	last   time.Time
}

func (w *watchedReader) Read(p []byte) (int, error) {
	w.mu.Lock()
	w.inRead = true
	w.mu.Unlock()
	n, err := w.r.Read(p)
	w.mu.Lock()
	w.inRead, w.last = false, time.Now()
	w.mu.Unlock()
	return n, err
}

// idleFor is how long nothing was asked of the reader while no read was in progress.
func (w *watchedReader) idleFor(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inRead {
		return 0
	}
	return now.Sub(w.last)
}

// watchUpload returns a context that ends, with errUploadIdle as its cause, once r was idle
// (idleFor) for longer than idle, and the reader to stream. stop ends the watch.
func watchUpload(ctx context.Context, r io.Reader, idle, tick time.Duration) (context.Context, io.Reader, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &watchedReader{r: r, last: time.Now()}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case now := <-t.C:
				if w.idleFor(now) > idle {
					cancel(errUploadIdle)
					return
				}
			}
		}
	}()
	return wctx, w, sync.OnceFunc(func() { close(done); cancel(nil) })
}
