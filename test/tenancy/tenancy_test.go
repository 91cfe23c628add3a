package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/kvmdomain"
	"github.com/provider-kvm/provider-kvm/internal/controller/seedvolume"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

const (
	teamA = "tenant-a"
	teamB = "tenant-b"
)

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// fileSum is the sha256 of a file in the pool directory, "" when it is absent.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// qcow2 writes a small real qcow2 image and returns its path and sha256.
func qcow2(t *testing.T) (string, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v\n%s", err, out)
	}
	return p, fileSum(t, p)
}

// synced waits until mg is Synced=False with a message containing want.
func refused(t *testing.T, kube client.Client, mg resource.Managed, want string) {
	t.Helper()
	controlplane.Eventually(t, 90*time.Second, fmt.Sprintf("%s/%s refused with %q", mg.GetNamespace(), mg.GetName(), want), func() error {
		if err := kube.Get(context.Background(), client.ObjectKeyFromObject(mg), mg); err != nil {
			return err
		}
		c := mg.GetCondition(xpv2.TypeSynced)
		if c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, want) {
			return fmt.Errorf("Synced %q: %q", c.Status, c.Message)
		}
		return nil
	})
}

func gone(t *testing.T, kube client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := kube.Delete(context.Background(), o); err != nil && !kerrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		controlplane.Eventually(t, 2*time.Minute, "deleted "+o.GetNamespace()+"/"+o.GetName(), func() error {
			if err := kube.Get(context.Background(), client.ObjectKeyFromObject(o), o); !kerrors.IsNotFound(err) {
				return fmt.Errorf("still present (%v)", err)
			}
			return nil
		})
	}
}

// TestSecondTeamCannotTouchTheFirst: team-a has a BaseImage, a SeedVolume and a stopped
// KVMDomain on the shared host; team-b tries each attack of the security review.
func TestSecondTeamCannotTouchTheFirst(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	shared := env.Shared()
	env.Run(t, 2*time.Second, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return seedvolume.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return kvmdomain.Setup(m, o, conns, nil, shared) },
	)
	ctx := context.Background()
	kube := env.Client

	// The image server, and an "internal service" on the provider's loopback that no
	// BaseImage may reach.
	image, sum := qcow2(t)
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, image) }))
	t.Cleanup(img.Close)
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		internalHits.Add(1)
		_, _ = w.Write([]byte("QFI\xfbsecret"))
	}))
	t.Cleanup(internal.Close)
	// The platform team allows exactly the image server.
	env.AllowImageServer(t, "default", img.URL)
	cpc := &v1alpha1.ClusterProviderConfig{}

	env.Namespace(t, teamA)
	env.Namespace(t, teamB)
	ud := "#cloud-config\nhostname: tenant-a-vm\n"
	aBase := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "base"}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/tiny.qcow2", SHA256: sum}}}}
	aSeed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "seed"}, Spec: v1alpha1.SeedVolumeSpec{
		ForProvider: v1alpha1.SeedVolumeParameters{UserData: &ud}}}
	aVM := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "vm"}, Spec: v1alpha1.KVMDomainSpec{
		ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, PowerState: v1alpha1.PowerStateStopped,
			BaseImageName: ptr.To("base"), SeedVolumeName: ptr.To("seed")}}}
	for _, o := range []client.Object{aBase, aSeed, aVM} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	controlplane.Eventually(t, 3*time.Minute, "team-a's domain defined", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(aVM), aVM); err != nil {
			return err
		}
		if aVM.Status.AtProvider.State != "ShutOff" {
			return fmt.Errorf("state %q, Synced %q", aVM.Status.AtProvider.State, aVM.GetCondition(xpv2.TypeSynced).Message)
		}
		return nil
	})
	if err := kube.Get(ctx, client.ObjectKeyFromObject(aSeed), aSeed); err != nil {
		t.Fatal(err)
	}
	aSeedVol := aSeed.Status.AtProvider.VolumeName
	if !names.IsSeedVolumeOf(aSeedVol, teamA, "seed", string(aSeed.GetUID())) {
		t.Fatalf("team-a's seed reports volume %q, not one of its own names", aSeedVol)
	}
	aOverlay := names.Overlay(teamA, "vm", string(aVM.GetUID()))
	aDomain := names.Domain(teamA, "vm")
	if err := kube.Get(ctx, client.ObjectKeyFromObject(aBase), aBase); err != nil {
		t.Fatal(err)
	}
	aBaseVol := aBase.Status.AtProvider.VolumeName
	// What team-a has on the host, byte for byte.
	snapshot := func() map[string]string {
		return map[string]string{
			"seed":           fileSum(t, filepath.Join(tb.PoolDir, aSeedVol)),
			"seed record":    fileSum(t, filepath.Join(tb.PoolDir, ownership.RecordVolume(aSeedVol))),
			"overlay":        fileSum(t, filepath.Join(tb.PoolDir, aOverlay)),
			"overlay record": fileSum(t, filepath.Join(tb.PoolDir, ownership.RecordVolume(aOverlay))),
			"domain xml":     virsh(t, "dumpxml", "--inactive", aDomain),
			"base image":     fileSum(t, filepath.Join(tb.PoolDir, aBaseVol)),
		}
	}
	before := snapshot()
	for k, v := range before {
		if v == "" {
			t.Fatalf("team-a's %s is missing on the host", k)
		}
	}

	t.Run("SeedVolumeWithAnotherTeamsExternalName", func(t *testing.T) {
		evil := "#cloud-config\nhostname: pwned\nruncmd: [[sh, -c, 'echo owned']]\n"
		sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "evil",
			Annotations: map[string]string{meta.AnnotationKeyExternalName: aSeedVol}},
			Spec: v1alpha1.SeedVolumeSpec{ForProvider: v1alpha1.SeedVolumeParameters{UserData: &evil}}}
		if err := kube.Create(ctx, sv); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, sv, "is not the name of this SeedVolume's volume")
		time.Sleep(3 * time.Second) // a few more reconciles
		gone(t, kube, sv)
	})

	t.Run("ObserveOnlyKVMDomainOfAnotherTeam", func(t *testing.T) {
		spy := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "spy",
			Annotations: map[string]string{meta.AnnotationKeyExternalName: aDomain}},
			Spec: v1alpha1.KVMDomainSpec{ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256}}}
		spy.SetManagementPolicies(xpv2.ManagementPolicies{xpv2.ManagementActionObserve})
		if err := kube.Create(ctx, spy); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, spy, "imports are off on ClusterProviderConfig/default")
		if at := spy.Status.AtProvider; at.State != "" || at.UUID != "" || at.MACAddress != "" {
			t.Errorf("a refused import shows team-a's domain: %+v", at)
		}
		// Even where imports are allowed, a domain another resource manages is never imported.
		if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, cpc); err != nil {
			t.Fatal(err)
		}
		cpc.Spec.Imports = &v1alpha1.ImportPolicy{Allowed: true, Namespaces: []string{teamB}}
		if err := kube.Update(ctx, cpc); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, spy, "a domain managed by another resource is never imported")
		if at := spy.Status.AtProvider; at.State != "" || at.UUID != "" || at.MACAddress != "" {
			t.Errorf("a refused import shows team-a's domain: %+v", at)
		}
		gone(t, kube, spy)
	})

	t.Run("KVMDomainWithAnotherTeamsExternalName", func(t *testing.T) {
		hijack := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "hijack",
			Annotations: map[string]string{meta.AnnotationKeyExternalName: aDomain}},
			Spec: v1alpha1.KVMDomainSpec{ForProvider: v1alpha1.KVMDomainParameters{VCPU: 8, MemoryMiB: 8192,
				PowerState: v1alpha1.PowerStateRunning, BaseImageName: ptr.To("none")}}}
		if err := kube.Create(ctx, hijack); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, hijack, "is not this KVMDomain's domain name")
		gone(t, kube, hijack)
	})

	t.Run("BaseImageWithAnotherTeamsExternalName", func(t *testing.T) {
		steal := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "steal",
			Annotations: map[string]string{meta.AnnotationKeyExternalName: aBaseVol}},
			Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: internal.URL + "/other.qcow2"}}}}
		if err := kube.Create(ctx, steal); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, steal, "is not the name of this BaseImage's volume")
		gone(t, kube, steal)
	})

	t.Run("BaseImageFromAnInternalService", func(t *testing.T) {
		ssrf := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "ssrf"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: internal.URL + "/metadata"}}}}
		if err := kube.Create(ctx, ssrf); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, ssrf, "refused")
		if n := internalHits.Load(); n != 0 {
			t.Errorf("the internal service was fetched %d times", n)
		}
		gone(t, kube, ssrf)
	})

	if diff := diffSnapshots(before, snapshot()); diff != "" {
		t.Errorf("team-a's objects on the host changed:\n%s", diff)
	}

	// team-a's own deletion still removes all of it, records included.
	gone(t, kube, aVM, aSeed, aBase)
	for _, p := range []string{aSeedVol, ownership.RecordVolume(aSeedVol), aOverlay, ownership.RecordVolume(aOverlay)} {
		if fileSum(t, filepath.Join(tb.PoolDir, p)) != "" {
			t.Errorf("%s left on the host after team-a deleted its resources", p)
		}
	}
	if out, _ := exec.Command("virsh", "-q", "-c", "qemu:///system", "list", "--all", "--name").CombinedOutput(); strings.Contains(string(out), teamA+"_") || strings.Contains(string(out), teamB+"_") {
		t.Errorf("domains left on the host: %s", out)
	}
}

func diffSnapshots(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s: %.16q -> %.16q", k, v, b[k]))
		}
	}
	return strings.Join(out, "\n")
}
