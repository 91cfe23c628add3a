package tenancy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
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
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/kvmdomain"
	"github.com/provider-kvm/provider-kvm/internal/controller/seedvolume"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// poolFiles lists the pool directory's files whose names start with prefix.
func poolFiles(t *testing.T, dir, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// messages are the Synced message of mg and the messages of every event in its namespace.
func messages(t *testing.T, kube client.Client, mg client.Object) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	if m, ok := mg.(interface {
		GetCondition(xpv2.ConditionType) xpv2.Condition
	}); ok && kube.Get(ctx, client.ObjectKeyFromObject(mg), mg) == nil {
		b.WriteString(m.GetCondition(xpv2.TypeSynced).Message + "\n" + m.GetCondition(xpv2.TypeReady).Message + "\n")
	}
	evs := &corev1.EventList{}
	if err := kube.List(ctx, evs, client.InNamespace(mg.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// TestSecondRound (issue 24, items 3, 4, 5, 6 and 8): team-a has a BaseImage, a SeedVolume and
// a stopped KVMDomain on the shared host; team-b attacks with its own ProviderConfig, another
// team's digest, pre-signed URLs and long names, then both teams share an image and leave it
// in either order. Every refusal is checked by its message and by the host being unchanged.
func TestSecondRound(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	// The platform requires a sha256 on every BaseImage (--require-image-sha256); namespaced
	// configs get the default platform policy (no --namespaced-image-sources).
	shared := env.Shared(sourcepolicy.Platform{RequireSHA256: true})
	env.Run(t, 2*time.Second, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return seedvolume.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return kvmdomain.Setup(m, o, conns, nil, shared) },
	)
	ctx := context.Background()
	kube := env.Client

	image, sum := qcow2(t)
	var imageHits atomic.Int32
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		imageHits.Add(1)
		if r.URL.Path != "/tiny.qcow2" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, image)
	}))
	t.Cleanup(img.Close)
	// team-b's own server: some other qcow2, not team-a's image.
	otherImage, _ := qcow2(t)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := os.ReadFile(otherImage)
		_, _ = w.Write(append(b, make([]byte, 512)...)) // other bytes than team-a's
	}))
	t.Cleanup(evil.Close)
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		internalHits.Add(1)
		_, _ = w.Write([]byte("QFI\xfbsecret"))
	}))
	t.Cleanup(internal.Close)
	env.AllowImageServer(t, "default", img.URL)
	env.AllowImageServer(t, "default", evil.URL)

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
	defined := func(vm *v1alpha1.KVMDomain) {
		controlplane.Eventually(t, 3*time.Minute, vm.Namespace+"'s domain defined", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
				return err
			}
			if vm.Status.AtProvider.State != "ShutOff" {
				return fmt.Errorf("state %q, Synced %q", vm.Status.AtProvider.State, vm.GetCondition(xpv2.TypeSynced).Message)
			}
			return nil
		})
	}
	defined(aVM)
	if err := kube.Get(ctx, client.ObjectKeyFromObject(aBase), aBase); err != nil {
		t.Fatal(err)
	}
	aBaseVol := aBase.Status.AtProvider.VolumeName
	aOverlay := names.Overlay(teamA, "vm", string(aVM.GetUID()))
	snapshot := func() map[string]string {
		return map[string]string{
			"base image":   fileSum(t, filepath.Join(tb.PoolDir, aBaseVol)),
			"base marker":  fileSum(t, filepath.Join(tb.PoolDir, aBaseVol+".meta")),
			"base records": strings.Join(poolFiles(t, tb.PoolDir, aBaseVol+".owner-"), ","),
			"overlay":      fileSum(t, filepath.Join(tb.PoolDir, aOverlay)),
			"domain xml":   virsh(t, "dumpxml", "--inactive", names.Domain(teamA, "vm")),
		}
	}
	before := snapshot()
	unchanged := func(t *testing.T) {
		t.Helper()
		if diff := diffSnapshots(before, snapshot()); diff != "" {
			t.Errorf("team-a's objects on the host changed:\n%s", diff)
		}
	}

	// Item 3: team-b's own ProviderConfig for the same host allows the provider's loopback
	// and the metadata address; neither is lifted for a namespaced config.
	t.Run("NamespacedConfigCannotLiftBuiltIns", func(t *testing.T) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "ssh"},
			Data: map[string][]byte{"key": tb.Read(t, tb.KeyFile), "known_hosts": tb.Read(t, tb.KnownHostsFile)}}
		if err := kube.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "own"}, Spec: v1alpha1.ProviderConfigSpec{
			Transport: v1alpha1.TransportSSH, Host: tb.SSHHost, Port: int32(tb.SSHPort), User: tb.SSHUser,
			Credentials:   &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Name: "ssh", Key: "key"}},
			KnownHosts:    &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Name: "ssh", Key: "known_hosts"}},
			LibvirtSocket: tb.LibvirtSocket, URI: "qemu:///system",
			Defaults: v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeQEMU, Pool: tb.Pool, Network: tb.Net},
			ImageSources: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{
				{CIDR: "127.0.0.1/32"}, {CIDR: "169.254.169.254/32"}, {CIDR: "10.0.0.0/8"}}},
		}}
		if err := kube.Create(ctx, pc); err != nil {
			t.Fatal(err)
		}
		ssrf := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "ssrf"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider:         v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: internal.URL + "/metadata", SHA256: sum}},
			ManagedResourceSpec: xpv2.ManagedResourceSpec{ProviderConfigReference: &xpv2.ProviderConfigReference{Kind: v1alpha1.ProviderConfigKind, Name: "own"}}}}
		if err := kube.Create(ctx, ssrf); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, ssrf, "built-in: loopback 127.0.0.0/8, which no rule lifts for a namespaced ProviderConfig")
		if n := internalHits.Load(); n != 0 {
			t.Errorf("the provider's loopback service was fetched %d times", n)
		}
		// The config itself stays: envtest runs no garbage collector to remove the
		// ProviderConfigUsage that holds it.
		gone(t, kube, ssrf)
		unchanged(t)
	})

	// Item 3: the platform requires a sha256.
	t.Run("UnpinnedImageRefused", func(t *testing.T) {
		loose := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "loose"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/tiny.qcow2"}}}}
		hits := imageHits.Load()
		if err := kube.Create(ctx, loose); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, loose, "spec.forProvider.source.sha256 is required by the provider's flag --require-image-sha256")
		if n := imageHits.Load() - hits; n != 0 {
			t.Errorf("the refused image was downloaded %d times", n)
		}
		gone(t, kube, loose)
		unchanged(t)
	})

	// Item 4: team-b knows team-a's digest, not its bytes.
	t.Run("DigestIsNotPossession", func(t *testing.T) {
		thief := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "thief"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: evil.URL + "/whatever.qcow2", SHA256: sum}}}}
		if err := kube.Create(ctx, thief); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, thief, "but spec.forProvider.source.sha256 is "+sum)
		time.Sleep(3 * time.Second)
		if err := kube.Get(ctx, client.ObjectKeyFromObject(thief), thief); err != nil {
			t.Fatal(err)
		}
		if c := thief.GetCondition(xpv2.TypeReady); c.Status == corev1.ConditionTrue || thief.Status.AtProvider.VolumeName != "" {
			t.Errorf("team-b attached to team-a's image by its digest: Ready %s, volume %q", c.Status, thief.Status.AtProvider.VolumeName)
		}
		gone(t, kube, thief)
		unchanged(t)
	})

	// Item 8: a pre-signed URL's token appears in no condition or event.
	t.Run("PresignedTokenRedacted", func(t *testing.T) {
		signed := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "signed"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/missing.qcow2?X-Amz-Signature=SECRETTOKEN", SHA256: sum}}}}
		if err := kube.Create(ctx, signed); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, signed, "404")
		if m := messages(t, kube, signed); strings.Contains(m, "SECRETTOKEN") {
			t.Errorf("the URL's token is shown:\n%s", m)
		}
		gone(t, kube, signed)
	})

	// Item 8: long names are refused at admission, not by libvirt.
	t.Run("LongNameRefusedAtAdmission", func(t *testing.T) {
		long := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: strings.Repeat("x", 151)}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, BaseImageName: ptr.To("shared")}}}
		err := kube.Create(ctx, long)
		if err == nil || !strings.Contains(err.Error(), "metadata.name must be at most 150 characters") {
			t.Errorf("Create(151-character name): %v", err)
		}
	})

	// Items 4, 5 and 6: team-b proves it has the image (it downloads it) and uses it.
	bShared := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "shared"}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/tiny.qcow2", SHA256: sum}}}}
	bSeed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "seed"}, Spec: v1alpha1.SeedVolumeSpec{
		ForProvider: v1alpha1.SeedVolumeParameters{UserData: &ud}}}
	bVM := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "vm"}, Spec: v1alpha1.KVMDomainSpec{
		ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, PowerState: v1alpha1.PowerStateStopped,
			BaseImageName: ptr.To("shared"), SeedVolumeName: ptr.To("seed")}}}
	hits := imageHits.Load()
	for _, o := range []client.Object{bShared, bSeed, bVM} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	defined(bVM)
	if n := imageHits.Load() - hits; n < 1 {
		t.Errorf("team-b attached to the cached image without downloading it (%d downloads)", n)
	}
	bOverlay := names.Overlay(teamB, "vm", string(bVM.GetUID()))

	t.Run("CoOwnerKeepsRecordWhileItsDisksUseIt", func(t *testing.T) {
		if err := kube.Delete(ctx, bShared); err != nil {
			t.Fatal(err)
		}
		refused(t, kube, bShared, "deletion is held: volume "+aBaseVol)
		m := messages(t, kube, bShared)
		if !strings.Contains(m, bOverlay) || !strings.Contains(m, "1 disk of other namespaces") {
			t.Errorf("team-b's held deletion does not name its own overlay and count team-a's:\n%s", m)
		}
		for _, leak := range []string{teamA + "_", aOverlay} {
			if strings.Contains(m, leak) {
				t.Errorf("team-b's messages name team-a's %q:\n%s", leak, m)
			}
		}
		if f := poolFiles(t, tb.PoolDir, aBaseVol+".owner-"); len(f) != 2 {
			t.Errorf("owner records of the shared volume: %v, want team-a's and team-b's", f)
		}
	})

	// team-b's BaseImage goes away without its finalizer (a force-deleted namespace would do the
	// same): its owner record is stale, and team-a is the last owner of a volume team-b's disk
	// still uses.
	controlplane.Eventually(t, 30*time.Second, "team-b's BaseImage without finalizer", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(bShared), bShared); kerrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		bShared.SetFinalizers(nil)
		return kube.Update(ctx, bShared)
	})

	t.Run("LastOwnerLeavesAVolumeOnlyOthersUse", func(t *testing.T) {
		if err := kube.Delete(ctx, aBase); err != nil {
			t.Fatal(err)
		}
		// Held while team-a's own VM uses it; the message counts team-b's disk, never names it.
		refused(t, kube, aBase, "deletion is held")
		m := messages(t, kube, aBase)
		if !strings.Contains(m, aOverlay) || !strings.Contains(m, "1 disk of other namespaces") {
			t.Errorf("team-a's held deletion does not name its own overlay and count team-b's:\n%s", m)
		}
		for _, leak := range []string{teamB + "_", bOverlay} {
			if strings.Contains(m, leak) {
				t.Errorf("team-a's messages name team-b's %q:\n%s", leak, m)
			}
		}
		// team-a's VM goes: team-a's BaseImage leaves the volume to team-b's disk.
		gone(t, kube, aVM, aSeed, aBase)
		if fileSum(t, filepath.Join(tb.PoolDir, aBaseVol)) != before["base image"] || fileSum(t, filepath.Join(tb.PoolDir, aBaseVol+".meta")) == "" {
			t.Error("the volume team-b's overlay backs onto was removed or changed")
		}
		if fileSum(t, filepath.Join(tb.PoolDir, bOverlay)) == "" {
			t.Error("team-b's overlay is gone")
		}
	})

	// team-b goes too; the volume is removed with the next BaseImage that leaves it unused.
	gone(t, kube, bVM, bSeed)
	last := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "last"}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/tiny.qcow2", SHA256: sum}}}}
	if err := kube.Create(ctx, last); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, 2*time.Minute, "team-b's last BaseImage Ready", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(last), last); err != nil {
			return err
		}
		if c := last.GetCondition(xpv2.TypeReady); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready %s: %s", c.Status, last.GetCondition(xpv2.TypeSynced).Message)
		}
		return nil
	})
	gone(t, kube, last)
	if f := poolFiles(t, tb.PoolDir, aBaseVol); len(f) != 0 {
		t.Errorf("left on the host: %v", f)
	}
	for _, p := range []string{aOverlay, bOverlay} {
		if fileSum(t, filepath.Join(tb.PoolDir, p)) != "" {
			t.Errorf("%s left on the host", p)
		}
	}
}
