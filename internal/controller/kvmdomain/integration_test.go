package kvmdomain

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/seedvolume"
	"github.com/provider-kvm/provider-kvm/internal/domainevents"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// squidUserData turns the test image's (disabled) squid into a proxy for the NAT network.
const squidUserData = `#cloud-config
write_files:
  - path: /etc/squid/conf.d/provider-kvm.conf
    content: |
      http_access allow localnet
      visible_hostname proxy-1
runcmd:
  - [systemctl, enable, --now, squid]
`

// guestImage returns the test bed's guest image and its sha256 (cluster/testbed/image.sh).
func guestImage(t *testing.T) (string, string) {
	t.Helper()
	p := os.Getenv("TESTBED_IMAGE")
	if p == "" {
		p = os.Getenv("HOME") + "/.cache/provider-kvm/images/debian-12-testbed.qcow2"
	}
	sum, err := os.ReadFile(p + ".sha256")
	if err != nil {
		msg := "INTEGRATION TEST NOT RUN: no guest image at " + p + " (build it with cluster/testbed/image.sh; make test does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p, strings.Fields(string(sum))[0]
}

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func exists(t *testing.T, args ...string) bool {
	t.Helper()
	return exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).Run() == nil
}

// TestKVMDomainBootsOnRealHost: BaseImage + SeedVolume + KVMDomain on the real test bed, the
// guest boots under TCG, gets an IP, and squid on it answers 204 through the provider's probe.
func TestKVMDomainBootsOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	image, sum := guestImage(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	// As the provider runs: the host connections feed domain events to the controller.
	events := domainevents.New(logging.NewNopLogger())
	conns := host.NewConnections(host.WithOnLibvirt(events.Attach))
	t.Cleanup(func() { _ = conns.Close() })
	// A poll of an hour: whatever happens within the test is seen through libvirt's events,
	// the watches on inputs and the short polls of resources that are not Ready or were just
	// updated, never through the poll (the provider's default is a minute).
	shared := env.Shared()
	env.Run(t, time.Hour, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return seedvolume.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return Setup(m, o, conns, events, shared) },
	)
	ctx := context.Background()
	kube := env.Client

	// The image, served from loopback inside the test bed's namespace.
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, image) }))
	t.Cleanup(img.Close)
	env.AllowImageServer(t, "default", img.URL) // the built-in denial refuses loopback otherwise
	// The URL the guest's squid must fetch: a 204 on the NAT bridge, inside the namespace.
	bridge := os.Getenv("TESTBED_BRIDGE_IP")
	if bridge == "" {
		bridge = "192.168.122.1"
	}
	l, err := net.Listen("tcp", bridge+":0")
	if err != nil {
		t.Fatalf("listen on the test bed bridge: %v", err)
	}
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = origin.Serve(l) }()
	t.Cleanup(func() { _ = origin.Close() })
	probeURL := "http://" + l.Addr().String() + "/"

	const ns = "vms"
	env.Namespace(t, ns)
	t0 := time.Now()
	for _, o := range []client.Object{
		&v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "debian"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/debian-12-testbed.qcow2", SHA256: sum}}}},
		&v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-1"}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{Hostname: "proxy-1", UserData: ptr.To(squidUserData)}}},
		&v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-1"}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{
				VCPU: 2, MemoryMiB: 1024, PowerState: v1alpha1.PowerStateRunning,
				BaseImageRef:  &xpv2.NamespacedReference{Name: "debian"},
				SeedVolumeRef: &xpv2.NamespacedReference{Name: "proxy-1"},
				DiskSizeGiB:   ptr.To(int32(2)),
				ReadinessProbe: &v1alpha1.ReadinessProbe{TimeoutSeconds: 5,
					HTTPProxy: &v1alpha1.HTTPProxyProbe{Port: 3128, URL: probeURL, ExpectedStatus: 204}},
			}}},
	} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	vm := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-1"}}
	ready := func(mg resource.Managed) func() error {
		return func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(mg), mg); err != nil {
				return err
			}
			r, s := mg.GetCondition(xpv2.TypeReady), mg.GetCondition(xpv2.TypeSynced)
			if r.Status != corev1.ConditionTrue {
				return fmt.Errorf("Ready=%s %s %q; Synced=%s %q", r.Status, r.Reason, r.Message, s.Status, s.Message)
			}
			return nil
		}
	}
	controlplane.Eventually(t, 8*time.Minute, "KVMDomain Ready (probe 204 through squid)", ready(vm))
	t.Logf("TIMING KVMDomain created -> Ready (incl. %d MiB image publish and seed): %.1fs", 138, time.Since(t0).Seconds())
	at := vm.Status.AtProvider
	if at.State != "Running" || at.IPv4 == "" || at.Probe != "passing" || at.UUID == "" {
		t.Errorf("status: %+v", at)
	}
	name := "vms_proxy-1"
	xml := virsh(t, "dumpxml", name)
	for _, want := range []string{"<kvm:owner", "virtio-scsi", `machine='pc-q35`, `type='qemu'`} {
		if !strings.Contains(xml, want) && !strings.Contains(xml, strings.ReplaceAll(want, "kvm:", "")) {
			t.Errorf("live domain XML lacks %s", want)
		}
	}

	t.Run("CordonedHostRefusesNewKeepsExisting", func(t *testing.T) {
		// Cordoned (spec.unschedulable): a new KVMDomain is refused with Synced=False naming the
		// cordon, and nothing is defined; the running one stays Ready.
		cordon := func(on bool) {
			t.Helper()
			c := &v1alpha1.ClusterProviderConfig{}
			if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, c); err != nil {
				t.Fatal(err)
			}
			c.Spec.Unschedulable = on
			if err := kube.Update(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		cordon(true)
		t.Cleanup(func() { cordon(false) })
		vm2 := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-2"}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{
				VCPU: 1, MemoryMiB: 512, PowerState: v1alpha1.PowerStateStopped,
				BaseImageRef:  &xpv2.NamespacedReference{Name: "debian"},
				SeedVolumeRef: &xpv2.NamespacedReference{Name: "proxy-1"},
			}}}
		if err := kube.Create(ctx, vm2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.Delete(ctx, vm2)
			controlplane.Eventually(t, time.Minute, "KVMDomain proxy-2 gone", func() error {
				if err := kube.Get(ctx, client.ObjectKeyFromObject(vm2), &v1alpha1.KVMDomain{}); !kerrors.IsNotFound(err) {
					return fmt.Errorf("still there (%v)", err)
				}
				return nil
			})
		})
		controlplane.Eventually(t, time.Minute, "KVMDomain proxy-2 refused on the cordoned host", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(vm2), vm2); err != nil {
				return err
			}
			s := vm2.GetCondition(xpv2.TypeSynced)
			if s.Status != corev1.ConditionFalse || !strings.Contains(s.Message, "is cordoned") {
				return fmt.Errorf("Synced=%s %q", s.Status, s.Message)
			}
			return nil
		})
		if exists(t, "dominfo", ns+"_proxy-2") {
			t.Error("a domain was defined for the KVMDomain refused on the cordoned host")
		}
		if err := ready(vm)(); err != nil {
			t.Errorf("the existing KVMDomain on the cordoned host: %v", err)
		}
		if !strings.Contains(virsh(t, "domstate", name), "running") {
			t.Error("the existing domain stopped running when its host was cordoned")
		}
	})

	t.Run("ChangedSeedIsSwitchedTo", func(t *testing.T) {
		seed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-1"}}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(seed), seed); err != nil {
			t.Fatal(err)
		}
		oldVol := seed.Status.AtProvider.VolumeName
		seed.Spec.ForProvider.UserData = ptr.To(squidUserData + "# edited\n")
		if err := kube.Update(ctx, seed); err != nil {
			t.Fatal(err)
		}
		// The new content is a new volume; once it is verified the running domain reads it
		// (its definition and its live medium), and the old volume goes once nothing uses it.
		var newVol string
		controlplane.Eventually(t, 2*time.Minute, "running domain switched to the new seed", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(seed), seed); err != nil {
				return err
			}
			newVol = seed.Status.AtProvider.VolumeName
			if newVol == oldVol || seed.GetCondition(xpv2.TypeReady).Status != corev1.ConditionTrue {
				return fmt.Errorf("seed volume %s, Ready=%s", newVol, seed.GetCondition(xpv2.TypeReady).Status)
			}
			for _, x := range []string{virsh(t, "dumpxml", name), virsh(t, "dumpxml", "--inactive", name)} {
				if !strings.Contains(x, "volume='"+newVol+"'") {
					return fmt.Errorf("the domain's cdrom does not read %s yet", newVol)
				}
			}
			return nil
		})
		controlplane.Eventually(t, 2*time.Minute, "old seed volume removed", func() error {
			if exists(t, "vol-info", "--pool", tb.Pool, oldVol) {
				return fmt.Errorf("%s still there", oldVol)
			}
			return nil
		})
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			t.Fatal(err)
		}
		if vm.Status.AtProvider.State != "Running" {
			t.Errorf("the guest is %s after its seed was switched, want Running", vm.Status.AtProvider.State)
		}
	})

	t.Run("UndefinedOutOfBandIsRecreated", func(t *testing.T) {
		// Undefine first, then destroy: the domain is gone in one step. (The other order
		// leaves a stopped, defined domain for a moment, which the provider, told by the
		// domain events, starts again at once, before the undefine.)
		virsh(t, "undefine", "--nvram", name)
		virsh(t, "destroy", name)
		t0 := time.Now()
		controlplane.Eventually(t, 2*time.Minute, "domain recreated and running", func() error {
			if !exists(t, "domstate", name) {
				return fmt.Errorf("not defined yet; KVMDomain: %s", conditions(ctx, kube, vm))
			}
			if st := strings.TrimSpace(virsh(t, "domstate", name)); st != "running" {
				return fmt.Errorf("state %s", st)
			}
			return nil
		})
		outOfBand(t, "undefined and destroyed -> defined and running again", time.Since(t0))
	})

	// The state a provider killed between define and start leaves: defined, shut off.
	t.Run("DefinedButNotStartedIsStarted", func(t *testing.T) {
		virsh(t, "destroy", name)
		t0 := time.Now()
		controlplane.Eventually(t, 2*time.Minute, "domain started again", func() error {
			if !exists(t, "domstate", name) {
				return fmt.Errorf("not defined; KVMDomain: %s", conditions(ctx, kube, vm))
			}
			if st := strings.TrimSpace(virsh(t, "domstate", name)); st != "running" {
				return fmt.Errorf("state %s", st)
			}
			return nil
		})
		outOfBand(t, "destroyed -> running again", time.Since(t0))
		if n := strings.Count(virsh(t, "list", "--all", "--name"), name); n != 1 {
			t.Errorf("%d domains named %s", n, name)
		}
	})

	t.Cleanup(func() { _ = exec.Command("virsh", "-c", "qemu:///system", "undefine", "vms_foreign").Run() })
	t.Run("ForeignDomainWithOurNameIsNotTouched", func(t *testing.T) {
		foreign := `<domain type='qemu'><name>vms_foreign</name><memory unit='MiB'>128</memory><os><type arch='x86_64' machine='q35'>hvm</type></os></domain>`
		f, err := os.CreateTemp(t.TempDir(), "foreign-*.xml")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(foreign)
		_ = f.Close()
		virsh(t, "define", f.Name())
		fd := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, BaseImageName: ptr.To("debian")}}}
		if err := kube.Create(ctx, fd); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "refusal reported", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(fd), fd); err != nil {
				return err
			}
			if s := fd.GetCondition(xpv2.TypeSynced); !strings.Contains(s.Message, "not owned by this KVMDomain") {
				return fmt.Errorf("Synced=%s %q", s.Status, s.Message)
			}
			return nil
		})
		if err := kube.Delete(ctx, fd); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "KVMDomain deleted, foreign domain left alone", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(fd), fd); !kerrors.IsNotFound(err) {
				return fmt.Errorf("still present (%v)", err)
			}
			return nil
		})
		if got := virsh(t, "dumpxml", "vms_foreign"); !strings.Contains(got, "<memory unit='KiB'>131072</memory>") {
			t.Errorf("foreign domain changed:\n%s", got)
		}
	})

	t.Run("ObserveOnlyImport", func(t *testing.T) {
		imp := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "imported",
			Annotations: map[string]string{"crossplane.io/external-name": "vms_foreign"}},
			Spec: v1alpha1.KVMDomainSpec{ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256}}}
		imp.SetManagementPolicies(xpv2.ManagementPolicies{xpv2.ManagementActionObserve})
		if err := kube.Create(ctx, imp); err != nil {
			t.Fatal(err)
		}
		// Imports are off by default: the import is refused and says how to allow it.
		controlplane.Eventually(t, time.Minute, "import refused while imports are off", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(imp), imp); err != nil {
				return err
			}
			if c := imp.GetCondition(xpv2.TypeSynced); c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "imports are off on ClusterProviderConfig/default") {
				return fmt.Errorf("Synced %q: %q", c.Status, c.Message)
			}
			if imp.Status.AtProvider.State != "" {
				return fmt.Errorf("a refused import reports state %q", imp.Status.AtProvider.State)
			}
			return nil
		})
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, cpc); err != nil {
			t.Fatal(err)
		}
		cpc.Spec.Imports = &v1alpha1.ImportPolicy{Allowed: true, Namespaces: []string{ns}}
		if err := kube.Update(ctx, cpc); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "foreign domain observed read-only", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(imp), imp); err != nil {
				return err
			}
			if imp.Status.AtProvider.State != "ShutOff" || imp.GetCondition(xpv2.TypeSynced).Status != corev1.ConditionTrue {
				return fmt.Errorf("state %q, Synced %q", imp.Status.AtProvider.State, imp.GetCondition(xpv2.TypeSynced).Message)
			}
			return nil
		})
		if err := kube.Delete(ctx, imp); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "import deleted", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(imp), imp); !kerrors.IsNotFound(err) {
				return fmt.Errorf("still present (%v)", err)
			}
			return nil
		})
		if !exists(t, "domstate", "vms_foreign") {
			t.Error("deleting an Observe-only import deleted the domain")
		}
	})

	t.Run("DiskGrowsWhileRunning", func(t *testing.T) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			t.Fatal(err)
		}
		vm.Spec.ForProvider.DiskSizeGiB = ptr.To(int32(3))
		if err := kube.Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
		overlay := vm.Status.AtProvider.OverlayVolume
		controlplane.Eventually(t, time.Minute, "overlay grown to 3 GiB", func() error {
			info := virsh(t, "vol-info", "--bytes", "--pool", tb.Pool, overlay)
			if !strings.Contains(info, fmt.Sprintf("%d bytes", 3<<30)) {
				return fmt.Errorf("vol-info: %s", info)
			}
			return nil
		})
		// QEMU, which holds the image open, resized it and the guest sees it: the running
		// domain's disk reports the new capacity too.
		if out := virsh(t, "domblkinfo", name, "vda"); !strings.Contains(out, fmt.Sprint(3<<30)) {
			t.Errorf("the running domain's root disk does not show 3 GiB: %s", out)
		}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			t.Fatal(err)
		}
		if vm.Status.AtProvider.State != "Running" {
			t.Errorf("growing the disk stopped the guest: %s", vm.Status.AtProvider.State)
		}
	})

	t.Run("ResizeIsPendingUntilRestart", func(t *testing.T) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			t.Fatal(err)
		}
		vm.Spec.ForProvider.MemoryMiB = 768
		if err := kube.Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "restart pending", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
				return err
			}
			if !vm.Status.AtProvider.RestartPending {
				return fmt.Errorf("restartPending false")
			}
			return nil
		})
		if x := virsh(t, "dumpxml", "--inactive", name); !strings.Contains(x, "<memory unit='KiB'>786432</memory>") {
			t.Errorf("persistent definition does not have 768 MiB")
		}
		if x := virsh(t, "dumpxml", name); !strings.Contains(x, "<memory unit='KiB'>1048576</memory>") {
			t.Errorf("the running guest's memory changed without a restart")
		}
	})

	t.Run("StoppedShutsDownGracefully", func(t *testing.T) {
		// The guest was re-created out of band above and may still be booting; a guest in the
		// middle of its boot may take longer than the grace to act on the ACPI request. What is
		// tested is that a booted guest is shut down, not powered off.
		controlplane.Eventually(t, 8*time.Minute, "KVMDomain Ready again before the stop", ready(vm))
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			t.Fatal(err)
		}
		// The default grace (90 s) was passed once in CI, with three TCG guests sharing two
		// cores: the guest was shutting down, slowly. A platform sets a longer grace for such
		// hosts; so does this test, so that what it measures is the provider's request, not
		// the machine's load.
		vm.Spec.ForProvider.PowerState = v1alpha1.PowerStateStopped
		vm.Spec.ForProvider.ShutdownGracePeriodSeconds = ptr.To(int32(360))
		if err := kube.Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
		asked := time.Now()
		controlplane.Eventually(t, 7*time.Minute, "shut off", func() error {
			if st := strings.TrimSpace(virsh(t, "domstate", name)); st != "shut off" {
				return fmt.Errorf("state %s", st)
			}
			return nil
		})
		t.Logf("TIMING powerState Stopped -> shut off: %s", time.Since(asked).Round(time.Second))
		if r := strings.TrimSpace(virsh(t, "domstate", "--reason", name)); !strings.Contains(r, "shutdown") {
			t.Errorf("domain state reason %q: want a guest shutdown, not a forced power-off", r)
		}
	})

	// Delete: no domain, overlay or NVRAM left.
	overlay := vm.Status.AtProvider.OverlayVolume
	if err := kube.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, 4*time.Minute, "KVMDomain deleted", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); !kerrors.IsNotFound(err) {
			return fmt.Errorf("still present: %v %q", err, vm.GetCondition(xpv2.TypeSynced).Message)
		}
		return nil
	})
	if exists(t, "domstate", name) {
		t.Errorf("domain %s left behind", name)
	}
	if exists(t, "vol-info", "--pool", tb.Pool, overlay) {
		t.Errorf("overlay %s left behind", overlay)
	}
	if _, err := os.Stat("/var/lib/libvirt/qemu/nvram/" + name + "_VARS.fd"); !os.IsNotExist(err) {
		t.Errorf("NVRAM of %s left behind (%v)", name, err)
	}
	for _, o := range []client.Object{
		&v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-1"}},
		&v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "debian"}},
	} {
		_ = kube.Delete(ctx, o)
	}
	controlplane.Eventually(t, 2*time.Minute, "base and seed deleted", func() error {
		for _, o := range []client.Object{
			&v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-1"}},
			&v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "debian"}},
		} {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); !kerrors.IsNotFound(err) {
				return fmt.Errorf("%T still present", o)
			}
		}
		return nil
	})
}

// conditions reads vm again and describes its conditions, for failure messages.
func conditions(ctx context.Context, kube client.Client, vm *v1alpha1.KVMDomain) string {
	if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		return err.Error()
	}
	r, s := vm.GetCondition(xpv2.TypeReady), vm.GetCondition(xpv2.TypeSynced)
	return fmt.Sprintf("Ready=%s %s %q; Synced=%s %q", r.Status, r.Reason, r.Message, s.Status, s.Message)
}

// outOfBandBound is how soon a domain changed behind the provider's back must be put right.
// The poll is an hour, so only the domain events can make it; the bound leaves room for the
// define and start themselves (about a second each under load) and a loaded machine.
const outOfBandBound = 15 * time.Second

func outOfBand(t *testing.T, what string, took time.Duration) {
	t.Helper()
	t.Logf("TIMING out of band: %s in %.1fs (poll: 1h)", what, took.Seconds())
	if took > outOfBandBound {
		t.Errorf("out of band: %s took %s, want under %s with an hour's poll: the domain events did not reach the controller", what, took.Round(100*time.Millisecond), outOfBandBound)
	}
}
