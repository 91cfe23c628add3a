package hoststatus

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// TestOrphanSweepOnRealHost: on the test bed, a domain and a volume that carry our ownership
// record naming a managed resource that does not exist are reported by a namespaced
// ProviderConfig of their namespace, and removed once it says orphans: Delete; a volume with
// our record that a domain uses stays (reported), and a domain of a derived name without our
// record stays (not reported). The ProviderConfig's namespace is the test's own, so nothing
// of other namespaces on the bed is touched.
func TestOrphanSweepOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "bed")
	ctx := context.Background()
	ns := fmt.Sprintf("orphan-it-%d", time.Now().UnixNano()%100000)
	env.Namespace(t, ns)

	// The bed's objects, made as the provider makes them, for owners that do not exist.
	conn := tb.Connect(t)
	h := lv.New(conn, lv.NewShared(), lv.WithSocket(tb.LibvirtSocket))
	gone := ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: "orphan-it-gone-uid", Namespace: ns, Name: "web"}
	orphanDom := ns + "_web"
	orphanVol := ns + "_web-0badf00d.root.qcow2"
	usedVol := ns + "_used-0badf00d.root.qcow2"
	plainDom := ns + "_plain"
	t.Cleanup(func() {
		for _, d := range []string{orphanDom, plainDom} {
			_ = exec.Command("virsh", "-c", "qemu:///system", "destroy", d).Run()
			_ = exec.Command("virsh", "-c", "qemu:///system", "undefine", "--nvram", d).Run()
		}
		for _, v := range []string{orphanVol, usedVol} {
			for _, n := range []string{v, ownership.RecordVolume(v)} {
				_ = exec.Command("virsh", "-c", "qemu:///system", "vol-delete", "--pool", tb.Pool, n).Run()
			}
		}
	})
	recs := ownership.NewRecords()
	for _, v := range []string{orphanVol, usedVol} {
		if err := recs.Claim(ctx, h, conn.Address(), tb.Pool, v, gone); err != nil {
			t.Fatalf("record of %s: %v", v, err)
		}
		x, err := lv.VolumeXML(lv.VolumeSpec{Name: v, Format: lv.FormatRaw, CapacityBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.CreateVolume(ctx, tb.Pool, x); err != nil {
			t.Fatalf("volume %s: %v", v, err)
		}
	}
	define := func(name, disk string, owner *domainxml.Owner) {
		o := domainxml.Owner{UID: "placeholder"}
		if owner != nil {
			o = *owner
		}
		x, err := domainxml.Domain(domainxml.Spec{Name: name, Type: "qemu", VCPU: 1, MemoryMiB: 128, Firmware: "bios",
			RootDisk: domainxml.Volume{Pool: tb.Pool, Name: disk}, Network: tb.Net, MAC: domainxml.MAC(name), Owner: o})
		if err != nil {
			t.Fatal(err)
		}
		if owner == nil {
			x = regexp.MustCompile(`(?s)<metadata>.*</metadata>`).ReplaceAllString(x, "")
		}
		f := filepath.Join(t.TempDir(), name+".xml")
		if err := os.WriteFile(f, []byte(x), 0o600); err != nil {
			t.Fatal(err)
		}
		virsh(t, "define", f)
	}
	define(orphanDom, orphanVol+"-missing", &domainxml.Owner{UID: gone.UID, Namespace: ns, Name: "web"})
	define(plainDom, usedVol, nil)

	// The team's own ProviderConfig, reporting at first.
	src := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "crossplane-system", Name: "bed-ssh"}, src); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh"}, Data: src.Data}); err != nil {
		t.Fatal(err)
	}
	bed := &v1alpha1.ClusterProviderConfig{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: "bed"}, bed); err != nil {
		t.Fatal(err)
	}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own"}, Spec: bed.Spec}
	pc.Spec.Credentials.SecretRef = v1alpha1.SecretKeySelector{Name: "ssh", Key: "ssh-privatekey"}
	pc.Spec.KnownHosts.SecretRef = v1alpha1.SecretKeySelector{Name: "ssh", Key: "known_hosts"}
	pc.Spec.OrphanGracePeriod = &metav1.Duration{Duration: 3 * time.Second}
	if err := env.Client.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}

	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	env.Run(t, 2*time.Second, config.Setup, func(m ctrl.Manager, o controller.Options) error {
		return Setup(m, o, conns, nil, lv.NewShared(), imagecache.NewShared(imagecache.InCluster(env.ClusterID)), env.ClusterID)
	})
	get := func() *v1alpha1.ProviderConfig {
		c := &v1alpha1.ProviderConfig{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "own"}, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	orphans := func() *v1alpha1.HostOrphans {
		if s := get().Status.Host; s != nil && s.Orphans != nil {
			return s.Orphans
		}
		return &v1alpha1.HostOrphans{}
	}
	wantNames := []string{"domain " + orphanDom, "volume " + tb.Pool + "/" + usedVol, "volume " + tb.Pool + "/" + orphanVol}
	controlplane.Eventually(t, time.Minute, "the orphans reported", func() error {
		if o := orphans(); !slices.Equal(o.Names, wantNames) || o.Count != 3 {
			return fmt.Errorf("orphans %+v, want %v", o, wantNames)
		}
		return nil
	})
	// Report removes nothing, even well past the grace period.
	time.Sleep(6 * time.Second)
	virsh(t, "dominfo", orphanDom)
	virsh(t, "vol-info", "--pool", tb.Pool, orphanVol)

	p := get()
	p.Spec.Orphans = v1alpha1.OrphansDelete
	if err := env.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "the orphans removed", func() error {
		o := orphans()
		if want := []string{"volume " + tb.Pool + "/" + usedVol}; !slices.Equal(o.Names, want) || o.Deleted != 2 {
			return fmt.Errorf("orphans %+v, want only %v left and 2 deleted", o, want)
		}
		return nil
	})
	for _, c := range [][]string{{"dominfo", orphanDom}, {"vol-info", "--pool", tb.Pool, orphanVol}, {"vol-info", "--pool", tb.Pool, ownership.RecordVolume(orphanVol)}} {
		if err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, c...)...).Run(); err == nil {
			t.Errorf("virsh %v: still there after the sweep", c)
		}
	}
	// Without our record: untouched. Used by a domain: untouched.
	virsh(t, "dominfo", plainDom)
	virsh(t, "vol-info", "--pool", tb.Pool, usedVol)
	virsh(t, "vol-info", "--pool", tb.Pool, ownership.RecordVolume(usedVol))
}
