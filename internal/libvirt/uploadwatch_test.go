package libvirt

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// TestWatchUpload: an upload whose reader nobody reads ends with errUploadIdle; one whose
// reader is waiting for its source does not, however long that takes.
func TestWatchUpload(t *testing.T) {
	t.Run("NotRead", func(t *testing.T) {
		ctx, _, stop := watchUpload(context.Background(), strings.NewReader("x"), 20*time.Millisecond, 5*time.Millisecond)
		defer stop()
		<-ctx.Done() // the test's own timeout bounds this
		if !errors.Is(context.Cause(ctx), errUploadIdle) {
			t.Errorf("cause %v, want errUploadIdle", context.Cause(ctx))
		}
	})
	t.Run("WaitingForSource", func(t *testing.T) {
		pr, pw := io.Pipe()
		ctx, r, stop := watchUpload(context.Background(), pr, 20*time.Millisecond, 5*time.Millisecond)
		defer stop()
		read := make(chan error, 1)
		go func() { _, err := r.Read(make([]byte, 1)); read <- err }()
		time.Sleep(100 * time.Millisecond) // five idle periods while the read waits
		if err := context.Cause(ctx); err != nil {
			t.Errorf("the watch ended an upload waiting for its source: %v", err)
		}
		_, _ = pw.Write([]byte("x"))
		<-read
	})
	t.Run("Stopped", func(t *testing.T) {
		ctx, _, stop := watchUpload(context.Background(), strings.NewReader("x"), time.Hour, time.Hour)
		stop()
		if cause := context.Cause(ctx); errors.Is(cause, errUploadIdle) {
			t.Errorf("a stopped watch ended with %v", cause)
		}
	})
}
