package imagecache

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// BenchmarkUploadThroughput compares Publish of a 64 MiB image (HTTP on
// loopback, streamed over the provider's SSH connection into libvirt) with
// virsh vol-upload of the same file over SSH to the same sshd (libvirt's
// libssh and libssh2 transports; the plain ssh transport cannot pin a
// known_hosts file). It reports MB/s of each and the ratio; no assertions.
//
//	cluster/testbed/run-in-netns.sh go test -run '^$' -bench UploadThroughput -benchtime 3x ./internal/imagecache/
func BenchmarkUploadThroughput(b *testing.B) {
	tb := requireTestbed(b)
	lv := libvirt.New(tb.conn, libvirt.NewShared(), libvirt.WithSocket(tb.cfg.Socket))
	const size = 64 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	file := filepath.Join(b.TempDir(), "image.img")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		b.Fatal(err)
	}
	srv := newImageServer(b, data)
	sum := sha(data)
	cache := New(lv, NewShared(), downloadsFor(b, allowServers(b, srv.Server)))
	owner := Owner{UID: uniqueName("bench"), Namespace: "bench", Name: "throughput"}
	ctx := ctxT(b, 30*time.Minute)
	uri := func(transport string) string {
		return "qemu+" + transport + "://" + tb.cfg.User + "@" + tb.cfg.Host + ":" + strconv.Itoa(tb.cfg.Port) + "/system?keyfile=" +
			os.Getenv("TESTBED_SSH_KEY") + "&known_hosts=" + os.Getenv("TESTBED_SSH_KNOWN_HOSTS") + "&known_hosts_verify=normal&sshauth=privkey"
	}
	virsh := func(transport string) float64 {
		name := uniqueName("virsh") + ".img"
		x, _ := libvirt.VolumeXML(libvirt.VolumeSpec{Name: name, Format: libvirt.FormatRaw})
		if _, err := lv.CreateVolume(ctx, tb.pool, x); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = lv.DeleteVolume(context.Background(), tb.pool, name) }()
		start := time.Now()
		out, err := exec.CommandContext(ctx, "virsh", "-q", "-c", uri(transport), "vol-upload", "--pool", tb.pool, name, file).CombinedOutput()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("virsh vol-upload over %s: %v\n%s", transport, err, out)
		}
		return size / d.Seconds() / 1e6
	}
	var pub, ssh, ssh2 float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		src := Source{URL: srv.URL + "/img?bench=" + strconv.Itoa(i) + "-" + owner.UID, SHA256: sum, Format: FormatRaw}
		res, err := cache.Publish(ctx, tb.pool, src, owner, nil)
		if err != nil {
			b.Fatal(err)
		}
		pub += res.BytesPerSecond() / 1e6
		if _, err := cache.Remove(ctx, tb.pool, res.Image.Volume, owner.UID); err != nil {
			b.Fatal(err)
		}
		ssh += virsh("libssh")
		ssh2 += virsh("libssh2")
	}
	n := float64(b.N)
	b.ReportMetric(pub/n, "publish-MB/s")
	b.ReportMetric(ssh/n, "virsh-libssh-MB/s")
	b.ReportMetric(ssh2/n, "virsh-libssh2-MB/s")
	b.ReportMetric(pub/ssh, "publish/virsh-libssh")
	b.Logf("64 MiB: Publish %.1f MB/s, virsh vol-upload libssh %.1f MB/s (ratio %.2f), libssh2 %.1f MB/s (ratio %.2f)",
		pub/n, ssh/n, pub/ssh, ssh2/n, pub/ssh2)
}
