package libvirt

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestIntegrationDownloadRepeatedly downloads a small volume many times:
// libvirt sometimes sends the data before the call's reply (see Download).
func TestIntegrationDownloadRepeatedly(t *testing.T) {
	tb := requireTestbed(t)
	c := tb.client()
	ctx := ctxT(t, 5*time.Minute)
	name := uniqueName("repeat") + ".meta"
	mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: name, Format: FormatRaw, CapacityBytes: 500})
	data := bytes.Repeat([]byte("0123456789"), 50)
	if err := c.Upload(ctx, tb.pool, name, bytes.NewReader(data), 500); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var b bytes.Buffer
		err := c.Download(cctx, tb.pool, name, &b, 0, 64<<10)
		cancel()
		if err != nil || !bytes.Equal(b.Bytes(), data) {
			t.Fatalf("download #%d: %d bytes, %v", i, b.Len(), err)
		}
	}
	if _, err := c.Volume(ctx, tb.pool, name); err != nil {
		t.Fatalf("shared connection after the downloads: %v", err)
	}
}
