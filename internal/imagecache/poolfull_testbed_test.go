package imagecache

import (
	crand "crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// TestPoolFullOnTestbed: an upload into a pool that runs out of space fails once, with ENOSPC
// named (a PoolFullError), and leaves nothing in the pool; a publish into a pool without room
// for the announced image is refused before anything is written; once space is freed, the
// same publish succeeds. The pool is an 8 MiB tmpfs in libvirtd's mount namespace.
func TestPoolFullOnTestbed(t *testing.T) {
	tb := requireTestbed(t)
	p := tb.env.SmallPool(t, 8<<20)
	lv := libvirt.New(tb.conn, libvirt.NewShared(), libvirt.WithSocket(tb.cfg.Socket))

	big := make([]byte, 12<<20) // more than the pool holds
	small := make([]byte, 4<<20)
	_, _ = crand.Read(big)
	_, _ = crand.Read(small)
	bigSrv, smallSrv := newImageServer(t, big), newImageServer(t, small)
	owner := Owner{UID: uniqueName("uid"), Namespace: "pkvm-test", Name: "full"}
	limits := hostlimits.Limits{Source: "ClusterProviderConfig/test"} // no margin: the tmpfs is the bound
	cache := func(srv *imageServer) *Cache {
		return New(lv, NewShared(), downloadsFor(t, allowServers(t, srv.Server)), WithLimits(limits))
	}

	// 1. Size not announced (chunked): the upload runs into ENOSPC.
	ctx := ctxT(t, 2*time.Minute)
	start := time.Now()
	res, err := cache(bigSrv).Publish(ctx, p.Name, Source{URL: bigSrv.URL + "/chunked", SHA256: sha(big), Format: FormatRaw}, owner, nil)
	took := time.Since(start)
	if !hostlimits.IsPoolFull(err) || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("Publish into a full pool: %v, want a PoolFullError naming ENOSPC", err)
	}
	names, lerr := lv.VolumeNames(ctx, p.Name)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(names) != 0 {
		t.Errorf("after ENOSPC the pool holds %v, want nothing (the partial upload and its records removed)", names)
	}
	t.Logf("FIGURE enospc: failed after %s, %d of %d bytes streamed; pool left with %v, tmpfs used %s KiB; error: %v",
		took.Round(time.Millisecond), res.Bytes, len(big), names, p.UsedKiB(t), err)

	// 2. The pool is filled by something else (6 MiB): a 4 MiB image announced by its server
	// is refused before anything is written.
	p.InNS(t, "dd if=/dev/zero of="+p.Dir+"/filler bs=1M count=6 status=none")
	if err := lv.RefreshPool(ctx, p.Name); err != nil {
		t.Fatal(err)
	}
	usedBefore := p.UsedKiB(t)
	_, err = cache(smallSrv).Publish(ctx, p.Name, Source{URL: smallSrv.URL + "/img", SHA256: sha(small), Format: FormatRaw}, owner, nil)
	var pf *hostlimits.PoolFullError
	if !errorsAs(err, &pf) || pf.Cause != nil || pf.Need < uint64(len(small)) {
		t.Fatalf("Publish into a pool without room: %v, want a PoolFullError of the check before the upload", err)
	}
	if used := p.UsedKiB(t); used != usedBefore {
		t.Errorf("a refused publish wrote into the pool: %s KiB used, %s before", used, usedBefore)
	}
	t.Logf("FIGURE refused before upload: %v (tmpfs used %s KiB before and after)", err, usedBefore)

	// 3. Space is freed: the same publish succeeds.
	p.InNS(t, "rm -f "+p.Dir+"/filler")
	res, err = cache(smallSrv).Publish(ctx, p.Name, Source{URL: smallSrv.URL + "/img", SHA256: sha(small), Format: FormatRaw}, owner, nil)
	if err != nil || res.Image.State != StatePublished {
		t.Fatalf("Publish once space is back: %+v, %v; want it published", res.Image.State, err)
	}
	t.Logf("FIGURE after freeing space: published %d bytes in %s", res.Bytes, res.Duration.Round(time.Millisecond))
	for _, n := range []string{res.Image.Volume, MarkerName(res.Image.Volume), OwnerName(res.Image.Volume, owner.UID)} {
		_ = lv.DeleteVolume(ctx, p.Name, n)
	}
}
