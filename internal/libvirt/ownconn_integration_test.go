package libvirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
)

// slowReader yields r in chunks, one every interval, like a slow image server.
type slowReader struct {
	r        io.Reader
	chunk    int
	interval time.Duration
}

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.interval)
	return s.r.Read(p[:min(len(p), s.chunk)])
}

// TestIntegrationUploadOnItsOwnConnection checks that an upload runs on a libvirt connection
// of its own, and that a stuck call on the host's shared connection, with other callers
// running, neither cuts it nor fails them.
func TestIntegrationUploadOnItsOwnConnection(t *testing.T) {
	tb := requireTestbed(t)
	var opened atomic.Int32
	c := New(tb.conn, WithSocket(tb.client().socket), withCounters(func(context.Context, string) {}, func(string) { opened.Add(1) }))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	name := uniqueName("ownconn") + ".img"
	const size = 8 << 20
	mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: name, Format: FormatRaw, CapacityBytes: size})
	data := make([]byte, size)
	_, _ = rand.Read(data)

	uploaded := make(chan error, 1)
	go func() {
		// About two seconds: 256 KiB every 60 ms.
		uploaded <- c.Upload(ctx, tb.pool, name, slowReader{r: bytes.NewReader(data), chunk: 256 << 10, interval: 60 * time.Millisecond}, size)
	}()
	time.Sleep(300 * time.Millisecond)
	var wg sync.WaitGroup
	var others, failed atomic.Int32
	stop := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Pool(ctx, tb.pool); err != nil {
					failed.Add(1)
					t.Errorf("another caller's call: %v", err)
				}
				others.Add(1)
			}
		})
	}
	sctx, cancelStuck := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelStuck()
	err := tb.conn.Do(sctx, func(l *golibvirt.Libvirt) error {
		_, err := l.ConnectGetLibVersion()
		time.Sleep(time.Second)
		return err
	})
	if !isDeadline(err) {
		t.Errorf("the stuck call: %v, want its deadline", err)
	}
	if err := <-uploaded; err != nil {
		t.Fatalf("Upload during a stuck call: %v", err)
	}
	close(stop)
	wg.Wait()
	if got := opened.Load(); got != 1 {
		t.Errorf("connections of its own opened = %d, want 1 (the upload's)", got)
	}
	if others.Load() == 0 || failed.Load() != 0 {
		t.Errorf("other callers: %d calls, %d failed; want some, none failed", others.Load(), failed.Load())
	}
	var got bytes.Buffer
	if err := c.Download(ctx, tb.pool, name, &got, 0, size); err != nil {
		t.Fatalf("Download: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Errorf("the volume does not hold the uploaded bytes")
	}
}

func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded)
}
