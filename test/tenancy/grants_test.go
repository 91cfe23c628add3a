package tenancy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
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

// bed is a control plane with the provider's controllers on the test bed, a ClusterProviderConfig
// "default" for it, and an image server the config allows.
type bed struct {
	tb       *testbed.Env
	env      *controlplane.Env
	kube     client.Client
	imageURL string
	sum      string
}

func startBed(t *testing.T, poll time.Duration) *bed {
	t.Helper()
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	shared := env.Shared()
	env.Run(t, poll, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return seedvolume.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return kvmdomain.Setup(m, o, conns, nil, shared) },
	)
	return &bed{tb: tb, env: env, kube: env.Client}
}

// serve serves the image at path to BaseImages, allowed by the default config.
func (b *bed) serve(t *testing.T, path, sum string) {
	t.Helper()
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, path) }))
	t.Cleanup(img.Close)
	b.env.AllowImageServer(t, "default", img.URL)
	b.imageURL, b.sum = img.URL+"/"+filepath.Base(path), sum
}

// ready waits until every object is Ready.
func (b *bed) ready(t *testing.T, timeout time.Duration, objs ...resource.Managed) {
	t.Helper()
	for _, o := range objs {
		controlplane.Eventually(t, timeout, o.GetNamespace()+"/"+o.GetName()+" Ready", func() error {
			if err := b.kube.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			if c := o.GetCondition(xpv2.TypeReady); c.Reason != xpv2.ReasonAvailable {
				return fmt.Errorf("Ready %q %q, Synced %q", c.Reason, c.Message, o.GetCondition(xpv2.TypeSynced).Message)
			}
			return nil
		})
	}
}

// inputs creates a BaseImage "base" and a SeedVolume "seed" in ns and waits until both are Ready.
func (b *bed) inputs(t *testing.T, ns, userData string) (*v1alpha1.BaseImage, *v1alpha1.SeedVolume) {
	t.Helper()
	base := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: b.imageURL, SHA256: b.sum}}}}
	seed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seed"}, Spec: v1alpha1.SeedVolumeSpec{
		ForProvider: v1alpha1.SeedVolumeParameters{UserData: &userData}}}
	for _, o := range []client.Object{base, seed} {
		if err := b.kube.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	b.ready(t, 3*time.Minute, base, seed)
	return base, seed
}

// event waits for an event on obj whose message contains want.
func (b *bed) event(t *testing.T, obj client.Object, want string) {
	t.Helper()
	controlplane.Eventually(t, 30*time.Second, fmt.Sprintf("an event on %s/%s with %q", obj.GetNamespace(), obj.GetName(), want), func() error {
		l := &corev1.EventList{}
		if err := b.kube.List(context.Background(), l, client.InNamespace(obj.GetNamespace())); err != nil {
			return err
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Name == obj.GetName() && strings.Contains(e.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(l.Items))
	})
}

// updateConfig changes the ClusterProviderConfig name with fn, again on a conflict (the
// config controller updates it too).
func (b *bed) updateConfig(t *testing.T, name string, fn func(*v1alpha1.ClusterProviderConfig)) {
	t.Helper()
	controlplane.Eventually(t, 30*time.Second, "update ClusterProviderConfig "+name, func() error {
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := b.kube.Get(context.Background(), client.ObjectKey{Name: name}, cpc); err != nil {
			return err
		}
		fn(cpc)
		return b.kube.Update(context.Background(), cpc)
	})
}

// nothingOf fails when the host has a domain or a pool file whose name starts with prefix.
func (b *bed) nothingOf(t *testing.T, prefix string) {
	t.Helper()
	out, _ := exec.Command("virsh", "-q", "-c", "qemu:///system", "list", "--all", "--name").CombinedOutput()
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, prefix) {
			t.Errorf("domain %s is on the host", d)
		}
	}
	files, _ := filepath.Glob(filepath.Join(b.tb.PoolDir, prefix+"*"))
	for _, f := range files {
		t.Errorf("%s is on the host", f)
	}
}

// TestSecondTeamStaysInItsGrants: team-b names a pool, a network and a bridge the host's config
// did not grant it, clones team-a's MAC address, and uses a host whose config does not admit
// its namespace. Each is refused with a condition and an event naming the rule, before anything
// is made on the host, and team-a's objects are byte for byte unchanged.
func TestSecondTeamStaysInItsGrants(t *testing.T) {
	b := startBed(t, 2*time.Second)
	image, sum := qcow2(t)
	b.serve(t, image, sum)
	ctx := context.Background()
	kube := b.kube
	b.env.Namespace(t, teamA)
	b.env.Namespace(t, teamB)

	// team-a: inputs and a stopped domain.
	aBase, aSeed := b.inputs(t, teamA, "#cloud-config\nhostname: tenant-a-vm\n")
	aVM := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "vm"}, Spec: v1alpha1.KVMDomainSpec{
		ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, PowerState: v1alpha1.PowerStateStopped,
			BaseImageName: ptr.To("base"), SeedVolumeName: ptr.To("seed")}}}
	if err := kube.Create(ctx, aVM); err != nil {
		t.Fatal(err)
	}
	b.ready(t, 3*time.Minute, aVM)
	aSeedVol, aBaseVol := aSeed.Status.AtProvider.VolumeName, aBase.Status.AtProvider.VolumeName
	aOverlay, aDomain := names.Overlay(teamA, "vm", string(aVM.GetUID())), names.Domain(teamA, "vm")
	snapshot := func() map[string]string {
		return map[string]string{
			"seed":           fileSum(t, filepath.Join(b.tb.PoolDir, aSeedVol)),
			"seed record":    fileSum(t, filepath.Join(b.tb.PoolDir, ownership.RecordVolume(aSeedVol))),
			"overlay":        fileSum(t, filepath.Join(b.tb.PoolDir, aOverlay)),
			"overlay record": fileSum(t, filepath.Join(b.tb.PoolDir, ownership.RecordVolume(aOverlay))),
			"domain xml":     virsh(t, "dumpxml", "--inactive", aDomain),
			"base image":     fileSum(t, filepath.Join(b.tb.PoolDir, aBaseVol)),
		}
	}
	before := snapshot()
	for k, v := range before {
		if v == "" {
			t.Fatalf("team-a's %s is missing on the host", k)
		}
	}
	aMAC := aVM.Status.AtProvider.MACAddress
	if aMAC == "" {
		t.Fatal("team-a's KVMDomain reports no MAC address")
	}

	// team-b's own inputs, on the defaults: these are allowed.
	bBase, bSeed := b.inputs(t, teamB, "#cloud-config\nhostname: tenant-b-vm\n")
	bPrefix := teamB + "_"
	notGranted := func(kind, name string) string {
		return fmt.Sprintf("%s %q is not granted to namespace %s on ClusterProviderConfig/default", kind, name, teamB)
	}

	t.Run("PoolNotGranted", func(t *testing.T) {
		vm := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "elsewhere"}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, PowerState: v1alpha1.PowerStateStopped,
				BaseImageName: ptr.To("base"), SeedVolumeName: ptr.To("seed"), Pool: "images"}}}
		sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "seed-elsewhere"}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{UserData: ptr.To("#cloud-config\n"), Pool: "images"}}}
		bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "base-elsewhere"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: b.imageURL, SHA256: b.sum}, Pool: "images"}}}
		for _, o := range []resource.Managed{vm, sv, bi} {
			if err := kube.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			refused(t, kube, o, notGranted("pool", "images"))
			b.event(t, o, notGranted("pool", "images"))
		}
		b.nothingOf(t, bPrefix+"elsewhere")
		b.nothingOf(t, bPrefix+"seed-elsewhere")
		gone(t, kube, vm, sv, bi)
	})

	t.Run("NetworkAndBridgeNotGranted", func(t *testing.T) {
		for name, p := range map[string]v1alpha1.KVMDomainParameters{
			"isolated": {Network: "tenant-a-isolated"},
			"mgmt":     {Bridge: "br-mgmt"},
		} {
			p.VCPU, p.MemoryMiB, p.PowerState = 1, 256, v1alpha1.PowerStateStopped
			p.BaseImageName, p.SeedVolumeName = ptr.To("base"), ptr.To("seed")
			vm := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: name}, Spec: v1alpha1.KVMDomainSpec{ForProvider: p}}
			if err := kube.Create(ctx, vm); err != nil {
				t.Fatal(err)
			}
			want := notGranted("network", p.Network)
			if p.Bridge != "" {
				want = notGranted("bridge", p.Bridge)
			}
			refused(t, kube, vm, want)
			b.event(t, vm, want)
			b.nothingOf(t, bPrefix+name)
			gone(t, kube, vm)
		}
	})

	t.Run("GrantedToTheNamespace", func(t *testing.T) {
		// The platform grants team-b a pool by name: its refusal goes away (the pool does not
		// exist on the test bed, so the next failure is libvirt's), while team-a is not granted it.
		b.updateConfig(t, "default", func(cpc *v1alpha1.ClusterProviderConfig) {
			cpc.Spec.Attachments = []v1alpha1.AttachmentGrant{{Namespaces: &v1alpha1.NamespaceSelection{Names: []string{teamB}}, Pools: []string{"images"}}}
		})
		t.Cleanup(func() {
			b.updateConfig(t, "default", func(cpc *v1alpha1.ClusterProviderConfig) { cpc.Spec.Attachments = nil })
		})
		sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "granted"}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{UserData: ptr.To("#cloud-config\n"), Pool: "images"}}}
		asv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "not-granted"}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{UserData: ptr.To("#cloud-config\n"), Pool: "images"}}}
		for _, o := range []client.Object{sv, asv} {
			if err := kube.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		refused(t, kube, asv, fmt.Sprintf("pool %q is not granted to namespace %s", "images", teamA))
		controlplane.Eventually(t, time.Minute, "team-b's granted pool passes the grant", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(sv), sv); err != nil {
				return err
			}
			if m := sv.GetCondition(xpv2.TypeSynced).Message; m == "" || strings.Contains(m, "is not granted") {
				return fmt.Errorf("Synced: %q", m)
			}
			return nil
		})
		gone(t, kube, sv, asv)
	})

	t.Run("MACOfAnotherTeam", func(t *testing.T) {
		clone := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "clone"}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 256, PowerState: v1alpha1.PowerStateStopped,
				BaseImageName: ptr.To("base"), SeedVolumeName: ptr.To("seed"), MACAddress: aMAC}}}
		if err := kube.Create(ctx, clone); err != nil {
			t.Fatal(err)
		}
		want := "macAddress " + aMAC + " is already used by another domain on this host"
		refused(t, kube, clone, want)
		b.event(t, clone, want)
		if m := clone.GetCondition(xpv2.TypeSynced).Message; strings.Contains(m, teamA) || strings.Contains(m, aDomain) {
			t.Errorf("the refusal names team-a or its domain: %q", m)
		}
		b.nothingOf(t, bPrefix+"clone")
		gone(t, kube, clone)
	})

	t.Run("HostNotAdmittingTheNamespace", func(t *testing.T) {
		// A second ClusterProviderConfig for the same host, admitting team-a only.
		b.env.HostConfig(t, b.tb, "team-a-only")
		// Admitted by a label on team-a's namespace: the provider reads the Namespace itself.
		b.updateConfig(t, "team-a-only", func(cpc *v1alpha1.ClusterProviderConfig) {
			cpc.Spec.AllowedNamespaces = &v1alpha1.NamespaceSelection{Names: []string{"ops"},
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"kvm.example.org/team-a-only": "true"}}}
		})
		nsA := &corev1.Namespace{}
		if err := kube.Get(ctx, client.ObjectKey{Name: teamA}, nsA); err != nil {
			t.Fatal(err)
		}
		nsA.Labels = map[string]string{"kvm.example.org/team-a-only": "true"}
		if err := kube.Update(ctx, nsA); err != nil {
			t.Fatal(err)
		}
		ref := &xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: "team-a-only"}
		sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "intruder"}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{UserData: ptr.To("#cloud-config\n")}}}
		sv.SetProviderConfigReference(ref)
		if err := kube.Create(ctx, sv); err != nil {
			t.Fatal(err)
		}
		want := "namespace " + teamB + " may not use ClusterProviderConfig/team-a-only: it is not among the namespaces its spec.allowedNamespaces selects"
		refused(t, kube, sv, want)
		b.event(t, sv, want)
		b.nothingOf(t, bPrefix+"intruder")
		// team-a may use it.
		asv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "admitted"}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{UserData: ptr.To("#cloud-config\n")}}}
		asv.SetProviderConfigReference(ref)
		if err := kube.Create(ctx, asv); err != nil {
			t.Fatal(err)
		}
		b.ready(t, 2*time.Minute, asv)
		gone(t, kube, sv, asv)
	})

	if diff := diffSnapshots(before, snapshot()); diff != "" {
		t.Errorf("team-a's objects on the host changed:\n%s", diff)
	}
	gone(t, kube, aVM, aSeed, aBase, bSeed, bBase)
	b.nothingOf(t, teamA+"_")
	b.nothingOf(t, bPrefix)
}
