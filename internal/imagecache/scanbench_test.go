package imagecache

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// BenchmarkUsersScan measures the in-use scan (Users) on the test bed with N shut-off domains
// of two volume disks each (a qcow2 and a raw volume of the bed's pool, as a KVMDomain's
// overlay and seed): libvirt RPCs and milliseconds per scan, and what resolving each volume
// disk by its own lookups (DomainDisks, the scan before it resolved them from its listings)
// would add. No assertions.
//
//	cluster/testbed/run-in-netns.sh go test -run '^$' -bench UsersScan -benchtime 5x ./internal/imagecache/
func BenchmarkUsersScan(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run("domains="+strconv.Itoa(n), func(b *testing.B) { benchScan(b, n) })
	}
}

func benchScan(b *testing.B, n int) {
	tb := requireTestbed(b)
	lv := libvirt.New(tb.conn, libvirt.NewShared(), libvirt.WithSocket(tb.cfg.Socket))
	ctx := ctxT(b, 20*time.Minute)
	prefix := uniqueName("scan")
	var doms, vols []string
	b.Cleanup(func() {
		ctx := context.Background()
		for _, d := range doms {
			_ = tb.conn.Do(ctx, func(l *golibvirt.Libvirt) error {
				dom, err := l.DomainLookupByName(d)
				if err != nil {
					return err
				}
				return l.DomainUndefine(dom)
			})
		}
		for _, v := range vols {
			_ = lv.DeleteVolume(ctx, tb.pool, v)
		}
	})
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		root, seed := name+".root.qcow2", name+".seed.img"
		for _, spec := range []libvirt.VolumeSpec{{Name: root, Format: libvirt.FormatQCOW2, CapacityBytes: 1 << 20}, {Name: seed, Format: libvirt.FormatRaw, CapacityBytes: 4096}} {
			x, err := libvirt.VolumeXML(spec)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := lv.CreateVolume(ctx, tb.pool, x); err != nil {
				b.Fatal(err)
			}
			vols = append(vols, spec.Name)
		}
		x := `<domain type='qemu'><name>` + name + `</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os><devices>` +
			`<disk type='volume' device='disk'><driver name='qemu' type='qcow2'/><source pool='` + tb.pool + `' volume='` + root + `'/><target dev='vda' bus='virtio'/></disk>` +
			`<disk type='volume' device='disk'><driver name='qemu' type='raw'/><source pool='` + tb.pool + `' volume='` + seed + `'/><target dev='vdb' bus='virtio'/><readonly/></disk>` +
			`</devices></domain>`
		if err := tb.conn.Do(ctx, func(l *golibvirt.Libvirt) error { _, err := l.DomainDefineXML(x); return err }); err != nil {
			b.Fatal(err)
		}
		doms = append(doms, name)
	}

	cache := New(lv, NewShared(), Downloads{})
	kind := "scan-bench-" + prefix
	kctx := metrics.WithKind(ctx, kind)
	base := "/nonexistent/" + prefix + ".qcow2"
	var scanT, sourcesT, disksT time.Duration
	var scanC, sourcesC, disksC float64
	var pools, volumes, domains, disks int
	measure := func(d *time.Duration, c *float64, fn func() error) {
		before := calls(b, kind)
		start := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		*d += time.Since(start)
		*c += calls(b, kind) - before
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		measure(&scanT, &scanC, func() error {
			s, err := cache.scanHost(kctx)
			pools, domains, disks, volumes = len(s.pools), 0, len(s.disks), 0
			for _, vs := range s.vols {
				volumes += len(vs)
			}
			seen := map[string]bool{}
			for _, d := range s.disks {
				seen[d.Domain] = true
			}
			domains = len(seen)
			if err == nil {
				_, err = cache.usage(kctx, s, base)
			}
			return err
		})
		measure(&sourcesT, &sourcesC, func() error { _, err := lv.DomainDiskSources(kctx); return err })
		measure(&disksT, &disksC, func() error { _, err := lv.DomainDisks(kctx); return err })
	}
	b.StopTimer()
	N := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / N }
	b.ReportMetric(scanC/N, "rpcs/scan")
	b.ReportMetric(ms(scanT), "ms/scan")
	b.ReportMetric((scanC-sourcesC+disksC)/N, "rpcs/scan-resolving-each")
	b.ReportMetric(ms(scanT-sourcesT+disksT), "ms/scan-resolving-each")
	b.Logf("host: %d pools, %d volumes in active pools, %d domains with disks, %d disks: scan %.0f RPCs in %.0f ms; resolving each volume disk by lookups it would be %.0f RPCs in %.0f ms (DomainDiskSources %.0f RPCs %.0f ms, DomainDisks %.0f RPCs %.0f ms)",
		pools, volumes, domains, disks, scanC/N, ms(scanT), (scanC-sourcesC+disksC)/N, ms(scanT-sourcesT+disksT), sourcesC/N, ms(sourcesT), disksC/N, ms(disksT))
}

// calls is the number of libvirt RPCs counted for kind so far.
func calls(b *testing.B, kind string) float64 {
	b.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != metrics.CallsName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
