package libvirt

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// TestIntegrationDownloadRepeatedly downloads a small volume many times:
// libvirt sometimes sends the data before the call's reply (see Download).
func TestIntegrationDownloadRepeatedly(t *testing.T) {
	tb := requireTestbed(t)
	c := tb.client()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	name := uniqueName("repeat") + ".meta"
	mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: name, Format: FormatRaw, CapacityBytes: 500})
	data := bytes.Repeat([]byte("0123456789"), 50)
	if err := c.Upload(ctx, tb.pool, name, bytes.NewReader(data), 500); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		var b bytes.Buffer
		var err error
		// Another test's fault injection (ctl.sh kill-ssh-sessions) may cut
		// the connection: retry that, but never a hang or wrong bytes.
		for try := 0; try < 5; try++ {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			b.Reset()
			err = c.Download(cctx, tb.pool, name, &b, 0, 64<<10)
			cancel()
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			t.Logf("download #%d: %v; retrying", i, err)
			time.Sleep(time.Second)
		}
		if err != nil || !bytes.Equal(b.Bytes(), data) {
			t.Fatalf("download #%d: %d bytes, %v", i, b.Len(), err)
		}
	}
	if _, err := c.Volume(ctx, tb.pool, name); err != nil {
		t.Fatalf("shared connection after the downloads: %v", err)
	}
}
