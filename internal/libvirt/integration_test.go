package libvirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"sync"
	"testing"
	"time"
)

func mustCreate(t *testing.T, ctx context.Context, c *Client, pool string, s VolumeSpec) Volume {
	t.Helper()
	x, err := VolumeXML(s)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.CreateVolume(ctx, pool, x)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	t.Cleanup(func() {
		if err := c.DeleteVolume(context.Background(), pool, s.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return v
}

func TestIntegrationVolumeLifecycle(t *testing.T) {
	tb := requireTestbed(t)
	c := tb.client()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	p, err := c.Pool(ctx, tb.pool)
	if err != nil {
		t.Fatalf("Pool: %v", err)
	}
	if !p.Active || p.Type != "dir" || p.Path == "" {
		t.Fatalf("Pool = %+v, want an active dir pool with a path", p)
	}
	pools, err := c.ActivePools(ctx)
	if err != nil {
		t.Fatalf("ActivePools: %v", err)
	}
	found := false
	for _, ap := range pools {
		found = found || ap.Name == tb.pool
	}
	if !found {
		t.Errorf("ActivePools = %+v, want %s among them", pools, tb.pool)
	}
	if _, err := c.Pool(ctx, "no-such-pool-pkvm"); !IsNotFound(err) {
		t.Errorf("Pool(no-such-pool) error = %v, want IsNotFound", err)
	}

	name := uniqueName("base") + ".img"
	v := mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: name, Format: FormatRaw})
	if v.Path != p.Path+"/"+name || v.Format != FormatRaw {
		t.Errorf("created volume = %+v", v)
	}
	x, _ := VolumeXML(VolumeSpec{Name: name, Format: FormatRaw})
	if _, err := c.CreateVolume(ctx, tb.pool, x); !IsExists(err) {
		t.Errorf("second CreateVolume error = %v, want IsExists", err)
	}

	// Unknown length, several MiB, in odd-sized reads.
	data := make([]byte, 5<<20+123)
	_, _ = rand.Read(data)
	if err := c.Upload(ctx, tb.pool, name, io.LimitReader(bytes.NewReader(data), int64(len(data))), 0); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	var got bytes.Buffer
	if err := c.Download(ctx, tb.pool, name, &got, 0, 0); err != nil {
		t.Fatalf("Download: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("downloaded %d bytes, want the %d uploaded", got.Len(), len(data))
	}
	got.Reset()
	if err := c.Download(ctx, tb.pool, name, &got, 10, 100); err != nil || !bytes.Equal(got.Bytes(), data[10:110]) {
		t.Fatalf("partial Download: %v, %d bytes", err, got.Len())
	}
	n, err := c.VolumePhysicalBytes(ctx, tb.pool, name)
	if err != nil || n != uint64(len(data)) {
		t.Errorf("VolumePhysicalBytes = %d, %v; want %d", n, err, len(data))
	}

	ov := uniqueName("overlay") + ".qcow2"
	o := mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: ov, Format: FormatQCOW2, CapacityBytes: 1 << 30, BackingStorePath: v.Path, BackingStoreFormat: FormatRaw})
	if o.BackingStorePath != v.Path || o.Format != FormatQCOW2 || o.CapacityBytes != 1<<30 {
		t.Errorf("overlay = %+v", o)
	}
	if err := c.RefreshPool(ctx, tb.pool); err != nil {
		t.Fatalf("RefreshPool: %v", err)
	}
	vols, err := c.Volumes(ctx, tb.pool)
	if err != nil {
		t.Fatalf("Volumes: %v", err)
	}
	seen := map[string]Volume{}
	for _, v := range vols {
		seen[v.Name] = v
	}
	if seen[ov].BackingStorePath != v.Path || seen[name].CapacityBytes != uint64(len(data)) {
		t.Errorf("Volumes: overlay %+v, base %+v", seen[ov], seen[name])
	}
	if err := c.DeleteVolume(ctx, tb.pool, ov); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if err := c.DeleteVolume(ctx, tb.pool, ov); err != nil {
		t.Fatalf("DeleteVolume of a deleted volume: %v", err)
	}
	if _, err := c.Volume(ctx, tb.pool, ov); !IsNotFound(err) {
		t.Errorf("Volume(deleted) error = %v, want IsNotFound", err)
	}
}

// TestIntegrationUploadCancel cancels an upload whose reader blocks: the
// stream is aborted and the connection stays usable.
func TestIntegrationUploadCancel(t *testing.T) {
	tb := requireTestbed(t)
	c := tb.client()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	name := uniqueName("cancel") + ".img"
	mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: name, Format: FormatRaw})

	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 1<<20)
		for i := 0; i < 3; i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
	}()
	uctx, cancelUpload := context.WithCancel(ctx)
	time.AfterFunc(500*time.Millisecond, func() {
		cancelUpload()
		_ = pw.CloseWithError(context.Canceled) // the source notices too, as an HTTP body would
	})
	err := c.Upload(uctx, tb.pool, name, pr, 0)
	if err == nil || uctx.Err() == nil {
		t.Fatalf("Upload = %v, want an error after cancel", err)
	}
	t.Logf("cancelled upload: %v", err)
	if _, err := c.Volume(ctx, tb.pool, name); err != nil {
		t.Fatalf("connection unusable after the aborted upload: %v", err)
	}
}

// TestIntegrationBusyPool creates, deletes and refreshes volumes of one
// pool concurrently, and during an upload: the per-pool lock and the
// retries keep libvirt's "asynchronous jobs running" from surfacing.
func TestIntegrationBusyPool(t *testing.T) {
	tb := requireTestbed(t)
	c := tb.client()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	up := uniqueName("busy-up") + ".img"
	mustCreate(t, ctx, c, tb.pool, VolumeSpec{Name: up, Format: FormatRaw})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pr, pw := io.Pipe()
		go func() {
			chunk := make([]byte, 1<<20)
			for i := 0; i < 32; i++ {
				time.Sleep(20 * time.Millisecond)
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
			_ = pw.Close()
		}()
		if err := c.Upload(ctx, tb.pool, up, pr, 0); err != nil {
			t.Errorf("Upload: %v", err)
		}
	}()
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				name := uniqueName("busy") + ".qcow2"
				x, _ := VolumeXML(VolumeSpec{Name: name, Format: FormatQCOW2, CapacityBytes: 1 << 30})
				if _, err := c.CreateVolume(ctx, tb.pool, x); err != nil {
					t.Errorf("CreateVolume: %v", err)
					continue
				}
				if err := c.RefreshPool(ctx, tb.pool); err != nil {
					t.Errorf("RefreshPool: %v", err)
				}
				if err := c.DeleteVolume(ctx, tb.pool, name); err != nil {
					t.Errorf("DeleteVolume: %v", err)
				}
			}
		}()
	}
	wg.Wait()
}
