package imagecache

import (
	crand "crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// TestTwoUploadsIntoSmallPool: two 4 MiB uploads at once into a 6 MiB tmpfs pool. libvirt
// does not always report the ENOSPC (one upload ends without an error, a megabyte missing,
// which the read-back finds), and the other's stream can get stuck after it: the first must
// end as a PoolFullError, the second within UploadIdleTimeout and its grace, and nothing of a
// failed upload may stay in the pool.
func TestTwoUploadsIntoSmallPool(t *testing.T) {
	tb := requireTestbed(t)
	p := tb.env.SmallPool(t, 6<<20)
	lv := libvirt.New(tb.conn, libvirt.NewShared(), libvirt.WithSocket(tb.cfg.Socket))
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		published []string
		full      int
	)
	for i := range 2 {
		data := make([]byte, 4<<20)
		_, _ = crand.Read(data)
		srv := newImageServer(t, data)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t, 90*time.Second)
			c := New(lv, NewShared(), downloadsFor(t, allowServers(t, srv.Server)), WithLimits(hostlimits.Limits{Source: "x"}))
			start := time.Now()
			res, err := c.Publish(ctx, p.Name, Source{URL: srv.URL + "/slow", SHA256: sha(data), Format: FormatRaw}, Owner{UID: uniqueName("u"), Namespace: "n"}, nil)
			took := time.Since(start)
			t.Logf("FIGURE upload %d: after %s: bytes %d state %s err %v", i, took.Round(time.Millisecond), res.Bytes, res.Image.State, err)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				published = append(published, res.Image.Volume)
			case hostlimits.IsPoolFull(err):
				full++
			}
			if took > libvirt.UploadIdleTimeout+libvirt.StreamAbortGrace+15*time.Second {
				t.Errorf("upload %d took %s: a stuck stream is not ended", i, took)
			}
		}()
	}
	wg.Wait()
	if full == 0 {
		t.Error("neither upload ended as PoolFull")
	}
	out, err := lv.VolumeNames(ctxT(t, 10*time.Second), p.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range out {
		if len(published) == 0 || !strings.HasPrefix(n, published[0]) {
			t.Errorf("left in the pool: %s (published: %v)", n, published)
		}
	}
	t.Logf("FIGURE left: %v used %s KiB", out, p.UsedKiB(t))
}
