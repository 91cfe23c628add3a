package kvmdomain

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"libvirt.org/go/libvirtxml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

var errNoDomain = golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "Domain not found"}

func nameOf(x string) string {
	d := &libvirtxml.Domain{}
	_ = d.Unmarshal(x)
	return d.Name
}

const (
	pool      = "default"
	uid       = "6c1f0b6e-3d2a-4c55-9f0e-1a2b3c4d5e6f"
	ourDomain = "team-a_vm"
	overlay   = "team-a_vm-6c1f0b6e.root.qcow2"
	// victim is another namespace's domain on the same host.
	victim    = "team-b_db"
	victimUID = "99999999-0000-0000-0000-000000000000"
)

var us = ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: uid, Namespace: "team-a", Name: "vm"}

func kvm(opts ...func(*v1alpha1.KVMDomain)) *v1alpha1.KVMDomain {
	d := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "vm", UID: types.UID(uid)}}
	d.Spec.ForProvider = v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 512, BaseImageName: ptr.To("base")}
	meta.SetExternalName(d, ourDomain)
	for _, o := range opts {
		o(d)
	}
	return d
}

func observeOnlyPolicy(d *v1alpha1.KVMDomain) {
	d.SetManagementPolicies(xpv2.ManagementPolicies{xpv2.ManagementActionObserve})
}
func deletingNow(d *v1alpha1.KVMDomain) { now := metav1.Now(); d.SetDeletionTimestamp(&now) }
func named(n string) func(*v1alpha1.KVMDomain) {
	return func(d *v1alpha1.KVMDomain) { meta.SetExternalName(d, n) }
}
func disk(g int32) func(*v1alpha1.KVMDomain) {
	return func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.DiskSizeGiB = ptr.To(g) }
}

// domainXML is a definition owned by ownerUID ("" for none) with the given MAC.
func domainXML(t *testing.T, name, ownerUID, mac string) string {
	t.Helper()
	if ownerUID == "" {
		return "<domain type='qemu'><name>" + name + "</name><memory unit='KiB'>524288</memory><vcpu>1</vcpu>" +
			"<devices><interface type='network'><mac address='" + mac + "'/><source network='default'/></interface></devices></domain>"
	}
	x, err := domainxml.Domain(domainxml.Spec{Name: name, Type: "qemu", VCPU: 1, MemoryMiB: 512, Firmware: "uefi",
		RootDisk: domainxml.Volume{Pool: pool, Name: overlay}, Network: "default", MAC: mac,
		Owner: domainxml.Owner{UID: ownerUID, Namespace: "ns", Name: "n"}})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func ownerRecord(t *testing.T, vol string, o ownership.Owner) []byte {
	t.Helper()
	b, err := ownership.Encode(vol, o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// setup puts domains and volumes on a fake host.
type hostSetup func(t *testing.T, h *fakeHost)

func withDomain(name, ownerUID, state string) hostSetup {
	return func(t *testing.T, h *fakeHost) {
		m := "52:54:00:12:34:56" // an unmarked domain's own address
		if ownerUID != "" {
			m = domainxml.MAC(ownerUID) // the one its KVMDomain derives
		}
		x := domainXML(t, name, ownerUID, m)
		h.domains[name] = libvirt.DomainInfo{Name: name, UUID: "uuid-" + name, State: state, XML: x, InactiveXML: x}
	}
}
func withOverlay(record bool) hostSetup {
	return func(t *testing.T, h *fakeHost) {
		h.Put(pool, overlay, []byte("qcow2"))
		if record {
			h.Put(pool, ownership.RecordVolume(overlay), ownerRecord(t, overlay, us))
		}
	}
}

func newExt(h *fakeHost, imports bool) *external {
	d := v1alpha1.HostDefaults{Pool: pool, Network: "default", DomainType: "qemu"}
	g, _ := hostgrants.For("ClusterProviderConfig/default", v1alpha1.ProviderConfigSpec{Defaults: d}, hostgrants.Namespace{Name: "ns"}, false)
	return &external{lv: h, recorder: event.NewNopRecorder(), shutdowns: &shutdowns{m: map[types.UID]time.Time{}},
		defaults: d, grant: g, defines: newHostLocks(), source: "ClusterProviderConfig/default",
		records: ownership.NewRecords(), images: imagecache.NewShared(), host: "root@h:22", importsAllowed: imports,
		policies: true, kube: nil}
}

// seen is what the tests compare after a call (the error is compared on its own).
type seen struct {
	Exists   bool
	State    string
	MAC      string
	Domains  []string // names left on the host
	Overlay  bool     // our overlay is on the host
	Record   bool     // its ownership record is
	Victim   string   // the victim's definition: "untouched", "changed", "" (gone)
	HostCall []string // calls that change something
}

func look(t *testing.T, h *fakeHost, victimBefore string) seen {
	t.Helper()
	s := seen{}
	for n := range h.domains {
		if n != victim {
			s.Domains = append(s.Domains, n)
		}
	}
	_, s.Overlay = h.Get(pool, overlay)
	_, s.Record = h.Get(pool, ownership.RecordVolume(overlay))
	if d, ok := h.domains[victim]; ok {
		s.Victim = "changed"
		if d.InactiveXML == victimBefore && d.State == libvirt.StateRunning {
			s.Victim = "untouched"
		}
	}
	for _, c := range h.calls {
		if !strings.HasPrefix(c, "Domain ") {
			s.HostCall = append(s.HostCall, c)
		}
	}
	return s
}

func TestObserve(t *testing.T) {
	cases := map[string]struct {
		reason  string
		cr      *v1alpha1.KVMDomain
		host    []hostSetup
		imports bool
		// policiesOff: the provider runs with --enable-management-policies=false.
		policiesOff bool
		wantErr     error
		want        seen
		// wantGone: the process lets go of the resource (its deletion found nothing of ours).
		wantGone bool
	}{
		"OursShutOff": {
			reason: "our domain is observed",
			cr:     kvm(), host: []hostSetup{withDomain(ourDomain, uid, libvirt.StateShutOff), withOverlay(true)},
			want: seen{Exists: true, State: "ShutOff", MAC: domainxml.MAC(uid), Domains: []string{ourDomain}, Overlay: true, Record: true, Victim: "untouched"},
		},
		"SameNameNotOurs": {
			reason: "a domain of our name marked by another resource is never adopted",
			cr:     kvm(), host: []hostSetup{withDomain(ourDomain, victimUID, libvirt.StateRunning)},
			wantErr: errors.Errorf(errNotOurs, ourDomain, "it belongs to ns/n, UID "+victimUID), want: seen{Domains: []string{ourDomain}, Victim: "untouched"},
		},
		"ExternalNameOfAnother": {
			reason:  "an external name pointing at another namespace's domain is refused, nothing of it is read",
			cr:      kvm(named(victim)),
			wantErr: errors.Errorf(errExternalName, victim, ourDomain, ourDomain), want: seen{Victim: "untouched"},
		},
		"ObserveOnlyImportsOff": {
			reason: "an observe-only import is refused while the config does not allow imports",
			cr:     kvm(named("legacy"), observeOnlyPolicy), host: []hostSetup{withDomain("legacy", "", libvirt.StateRunning)},
			wantErr: errors.Errorf(errImportsOff, "legacy", "ClusterProviderConfig/default"), want: seen{Domains: []string{"legacy"}, Victim: "untouched"},
		},
		"ObserveOnlyImportOfOwned": {
			reason: "a domain that carries another resource's mark is never imported, even where imports are allowed",
			cr:     kvm(named(victim), observeOnlyPolicy), imports: true,
			wantErr: errors.Errorf(errImportForeign, victim, "ns", "n", victimUID), want: seen{Victim: "untouched"},
		},
		"ObserveOnlyImportAllowed": {
			reason: "an allowed import reports the domain's own MAC and state",
			cr:     kvm(named("legacy"), observeOnlyPolicy), imports: true, host: []hostSetup{withDomain("legacy", "", libvirt.StateShutOff)},
			want: seen{Exists: true, State: "ShutOff", MAC: "52:54:00:12:34:56", Domains: []string{"legacy"}, Victim: "untouched"},
		},
		"ObserveOnlyPoliciesOff": {
			reason: "with management policies disabled, [Observe] is not an import (as for the managed reconciler), so the external name is refused",
			cr:     kvm(named("legacy"), observeOnlyPolicy), imports: true, policiesOff: true, host: []hostSetup{withDomain("legacy", "", libvirt.StateShutOff)},
			wantErr: errors.Errorf(errExternalName, "legacy", ourDomain, ourDomain), want: seen{Domains: []string{"legacy"}, Victim: "untouched"},
		},
		"DeletingIgnoresExternalName": {
			reason: "while deleting, the derived domain is what is looked at",
			cr:     kvm(named(victim), deletingNow), host: []hostSetup{withDomain(ourDomain, uid, libvirt.StateShutOff), withOverlay(true)},
			want: seen{Exists: true, State: "ShutOff", MAC: domainxml.MAC(uid), Domains: []string{ourDomain}, Overlay: true, Record: true, Victim: "untouched"},
		},
		"DeletingOverlayOnly": {
			reason: "while deleting, an overlay left by a cut create still exists",
			cr:     kvm(deletingNow), host: []hostSetup{withOverlay(true)},
			want: seen{Exists: true, Overlay: true, Record: true, Victim: "untouched"},
		},
		"DeletingOverlayWithoutRecord": {
			reason: "while deleting, an overlay without our record is not ours",
			cr:     kvm(deletingNow), host: []hostSetup{withOverlay(false)},
			want: seen{Overlay: true, Victim: "untouched"}, wantGone: true,
		},
		"DeletingNothingLeft": {
			reason: "a deletion that finds nothing of ours lets go of the resource: its domain events and probe are forgotten",
			cr:     kvm(deletingNow),
			want:   seen{Victim: "untouched"}, wantGone: true,
		},
		"DiskToGrow": {
			reason: "a diskSizeGiB above the overlay's size is not up to date (Update grows it)",
			cr:     kvm(disk(8)), host: []hostSetup{withDomain(ourDomain, uid, libvirt.StateShutOff), withOverlay(true)},
			want: seen{Exists: true, State: "ShutOff", MAC: domainxml.MAC(uid), Domains: []string{ourDomain}, Overlay: true, Record: true, Victim: "untouched"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			withDomain(victim, victimUID, libvirt.StateRunning)(t, h)
			before := h.domains[victim].InactiveXML
			for _, s := range tc.host {
				s(t, h)
			}
			cr := tc.cr
			cr.Spec.ForProvider.PowerState = v1alpha1.PowerStateStopped
			e := newExt(h, tc.imports)
			e.policies = !tc.policiesOff
			gone := false
			e.gone = func() { gone = true }
			o, err := e.Observe(context.Background(), cr)
			if gone != tc.wantGone {
				t.Errorf("%s\nObserve(): let go of the resource: %v, want %v", tc.reason, gone, tc.wantGone)
			}
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nObserve(): -want error, +got error:\n%s", tc.reason, diff)
			}
			got := look(t, h, before)
			got.Exists, got.State, got.MAC = o.ResourceExists, cr.Status.AtProvider.State, cr.Status.AtProvider.MACAddress
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nObserve(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestObserveOnly(t *testing.T) {
	cases := map[string]struct {
		reason   string
		enabled  bool
		policies xpv2.ManagementPolicies
		want     bool
	}{
		"Observe": {
			reason: "[Observe] alone is an import", enabled: true,
			policies: xpv2.ManagementPolicies{xpv2.ManagementActionObserve}, want: true,
		},
		"All": {
			reason: "[*] manages the domain", enabled: true,
			policies: xpv2.ManagementPolicies{xpv2.ManagementActionAll},
		},
		"ObserveDelete": {
			reason: "[Observe, Delete] may delete, so it is not observe-only", enabled: true,
			policies: xpv2.ManagementPolicies{xpv2.ManagementActionObserve, xpv2.ManagementActionDelete},
		},
		"ObserveTwice": {
			reason: "a repeated Observe is still only Observe (a set, not a slice)", enabled: true,
			policies: xpv2.ManagementPolicies{xpv2.ManagementActionObserve, xpv2.ManagementActionObserve}, want: true,
		},
		"Disabled": {
			reason:   "with --enable-management-policies=false the policies are ignored, [Observe] included",
			policies: xpv2.ManagementPolicies{xpv2.ManagementActionObserve},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := &external{policies: tc.enabled}
			if got := e.observeOnly(kvm(func(d *v1alpha1.KVMDomain) { d.SetManagementPolicies(tc.policies) })); got != tc.want {
				t.Errorf("%s\nobserveOnly(%v, enabled %t): want %t, got %t", tc.reason, tc.policies, tc.enabled, tc.want, got)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	cases := map[string]struct {
		reason  string
		cr      *v1alpha1.KVMDomain
		host    []hostSetup
		wantErr error
		want    seen
	}{
		"OursShutOff": {
			reason: "our stopped domain is undefined, then its overlay and record go",
			cr:     kvm(deletingNow), host: []hostSetup{withDomain(ourDomain, uid, libvirt.StateShutOff), withOverlay(true)},
			want: seen{Victim: "untouched", HostCall: []string{"UndefineDomain " + ourDomain, "DeleteVolume"}},
		},
		"OursRunning": {
			reason: "a running domain is asked to shut down first",
			cr:     kvm(deletingNow), host: []hostSetup{withDomain(ourDomain, uid, libvirt.StateRunning), withOverlay(true)},
			wantErr: errors.Errorf(errWaitShutdown, defaultShutdownGrace), want: seen{Domains: []string{ourDomain}, Overlay: true, Record: true, Victim: "untouched", HostCall: []string{"ShutdownDomain " + ourDomain}},
		},
		"SameNameNotOurs": {
			reason: "a domain of our name that is not ours stays; our overlay goes",
			cr:     kvm(deletingNow), host: []hostSetup{withDomain(ourDomain, victimUID, libvirt.StateRunning), withOverlay(true)},
			want: seen{Domains: []string{ourDomain}, Victim: "untouched", HostCall: []string{"DeleteVolume"}},
		},
		"OverlayWithoutRecord": {
			reason: "an overlay without our record is never deleted",
			cr:     kvm(deletingNow), host: []hostSetup{withOverlay(false)},
			want: seen{Overlay: true, Victim: "untouched"},
		},
		"ExternalNameOfAnother": {
			reason: "the victim named by the external name is never touched",
			cr:     kvm(deletingNow, named(victim)), host: []hostSetup{withOverlay(true)},
			want: seen{Victim: "untouched", HostCall: []string{"DeleteVolume"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			withDomain(victim, victimUID, libvirt.StateRunning)(t, h)
			before := h.domains[victim].InactiveXML
			for _, s := range tc.host {
				s(t, h)
			}
			h.calls = nil
			_, err := newExt(h, false).Delete(context.Background(), tc.cr)
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nDelete(): -want error, +got error:\n%s", tc.reason, diff)
			}
			got := look(t, h, before)
			got.HostCall = deletes(got.HostCall, h)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nDelete(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// deletes adds the volume deletions the storage counted to the domain calls.
func deletes(calls []string, h *fakeHost) []string {
	if h.Calls["DeleteVolume"] > 0 {
		calls = append(calls, "DeleteVolume")
	}
	return calls
}

func TestUpdateGrowsDisk(t *testing.T) {
	for name, tc := range map[string]struct {
		state string
		want  string
	}{
		"Running": {state: libvirt.StateRunning, want: "BlockResize " + ourDomain},
		"ShutOff": {state: libvirt.StateShutOff, want: "ResizeVolume"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			withDomain(ourDomain, uid, tc.state)(t, h)
			withOverlay(true)(t, h)
			cr := kvm(disk(8))
			cr.Spec.ForProvider.PowerState = v1alpha1.PowerStateStopped
			if tc.state == libvirt.StateRunning {
				cr.Spec.ForProvider.PowerState = v1alpha1.PowerStateRunning
			}
			if _, err := newExt(h, false).Update(context.Background(), cr); err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, c := range h.calls {
				if strings.HasPrefix(c, "BlockResize") {
					got = c
				}
			}
			if h.Calls["ResizeVolume"] > 0 {
				got = "ResizeVolume"
			}
			if got != tc.want {
				t.Errorf("Update() resized with %q, want %q (calls %v)", got, tc.want, h.calls)
			}
		})
	}
}

func TestUpdateRefusesForeignExternalName(t *testing.T) {
	h := newFakeHost()
	withDomain(victim, victimUID, libvirt.StateRunning)(t, h)
	before := h.domains[victim].InactiveXML
	_, err := newExt(h, true).Update(context.Background(), kvm(named(victim)))
	if diff := cmp.Diff(errors.Errorf(errExternalName, victim, ourDomain, ourDomain), err, test.EquateErrors()); diff != "" {
		t.Errorf("Update(): want the external name refused: -want, +got:\n%s", diff)
	}
	if got := h.domains[victim]; got.InactiveXML != before || len(h.calls) != 0 {
		t.Errorf("Update() touched the victim: calls %v", h.calls)
	}
}

func TestCreate(t *testing.T) {
	const baseVol = "pkvm-base-0123456789abcdef01234567.qcow2"
	base := func(volume, path string) *v1alpha1.BaseImage {
		b := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "base", UID: "base-uid"}}
		b.SetConditions(xpv2.Available())
		b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool, b.Status.AtProvider.Path = volume, pool, path
		b.Status.AtProvider.VirtualSizeBytes = 1 << 30
		return b
	}
	cases := map[string]struct {
		reason      string
		base        *v1alpha1.BaseImage
		host        []hostSetup
		wantErr     error  // compared with test.EquateErrors
		wantBacking string // the overlay's backing file, "" when no overlay is made
		wantDomain  bool
		// wantGone: an overlay was created, then deleted again.
		wantGone bool
	}{
		"Fresh": {
			reason: "record, overlay on the base volume's own path, definition, start",
			base:   base(baseVol, "/pool/default/"+baseVol), wantBacking: "/pool/default/" + baseVol, wantDomain: true,
		},
		"StatusPathPointsElsewhere": {
			reason: "a base whose status names another team's file: the backing file is looked up by volume name",
			base:   base(baseVol, "/pool/default/team-b_db-99999999.root.qcow2"), wantBacking: "/pool/default/" + baseVol, wantDomain: true,
		},
		"StatusVolumeNotABase": {
			reason:  "a base whose status names a volume that is not a base image is refused",
			base:    base("team-b_db-99999999.root.qcow2", "/pool/default/team-b_db-99999999.root.qcow2"),
			wantErr: errors.Errorf(errNotABase, "base", "team-b_db-99999999.root.qcow2"),
		},
		"BaseUnpublished": {
			reason: "a base whose marker is gone (being removed) gets no overlay",
			base:   base(baseVol, "/pool/default/"+baseVol),
			host: []hostSetup{func(_ *testing.T, h *fakeHost) {
				_ = h.DeleteVolume(context.Background(), pool, imagecache.MarkerName(baseVol))
			}},
			wantErr: errors.Wrap(&imagecache.UnpublishedError{Volume: baseVol, Err: fakestorage.NotFound}, errOverlay),
		},
		"UnpublishedWhileCreating": {
			reason: "a base unpublished by another process's removal while the overlay is created: the overlay is deleted again",
			base:   base(baseVol, "/pool/default/"+baseVol),
			host: []hostSetup{func(_ *testing.T, h *fakeHost) {
				h.BeforeCreate = func(p, name string) {
					if name == overlay {
						_ = h.DeleteVolume(context.Background(), pool, imagecache.MarkerName(baseVol))
					}
				}
			}},
			wantErr: errors.Wrap(&imagecache.UnpublishedError{Volume: baseVol, Err: fakestorage.NotFound}, errOverlay), wantBacking: "/pool/default/" + baseVol, wantGone: true,
		},
		"OverlayOfAnother": {
			reason: "an overlay of our name whose record names someone else is never used",
			base:   base(baseVol, "/pool/default/"+baseVol),
			host: []hostSetup{func(t *testing.T, h *fakeHost) {
				h.Put(pool, overlay, []byte("x"))
				h.Put(pool, ownership.RecordVolume(overlay), ownerRecord(t, overlay, ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: victimUID}))
			}},
			wantErr: errors.Wrap(&ownership.NotOwnedError{Volume: overlay, Why: "it belongs to " + ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: victimUID}.String()}, errOverlay),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			h.Put(pool, baseVol, []byte("QFI\xfb"))
			h.Put(pool, imagecache.MarkerName(baseVol), []byte("{}"))
			for _, s := range tc.host {
				s(t, h)
			}
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			e := newExt(h, false)
			e.kube = fake.NewClientBuilder().WithScheme(s).WithObjects(tc.base).WithStatusSubresource(tc.base).Build()
			_, err := e.Create(context.Background(), kvm())
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Fatalf("%s\nCreate(): -want error, +got error:\n%s", tc.reason, diff)
			}
			backing := ""
			if x, ok := h.Created[pool+"/"+overlay]; ok {
				v := &libvirtxml.StorageVolume{}
				if err := v.Unmarshal(x); err != nil {
					t.Fatal(err)
				}
				if v.BackingStore != nil {
					backing = v.BackingStore.Path
				}
			}
			if backing != tc.wantBacking {
				t.Errorf("%s\noverlay backing file %q, want %q", tc.reason, backing, tc.wantBacking)
			}
			if _, err := h.Volume(context.Background(), pool, overlay); tc.wantGone && !libvirt.IsNotFound(err) {
				t.Errorf("%s\noverlay still exists (%v), want it deleted again", tc.reason, err)
			}
			if _, ok := h.domains[ourDomain]; ok != tc.wantDomain {
				t.Errorf("%s\ndomain defined: %v, want %v", tc.reason, ok, tc.wantDomain)
			}
		})
	}
}

func TestUpToDate(t *testing.T) {
	size := domainxml.Size{VCPU: 2, MemoryMiB: 1024}
	want := v1alpha1.KVMDomainParameters{VCPU: 2, MemoryMiB: 1024, PowerState: v1alpha1.PowerStateRunning}
	running := libvirt.DomainInfo{State: libvirt.StateRunning}
	cases := map[string]struct {
		want v1alpha1.KVMDomainParameters
		d    libvirt.DomainInfo
		size domainxml.Size
		grow uint64
		up   bool
	}{
		"AsAsked":            {want: want, d: running, size: size, up: true},
		"ShouldRun":          {want: want, d: libvirt.DomainInfo{State: libvirt.StateShutOff}, size: size},
		"ShouldStop":         {want: v1alpha1.KVMDomainParameters{VCPU: 2, MemoryMiB: 1024, PowerState: v1alpha1.PowerStateStopped}, d: running, size: size},
		"Stopped":            {want: v1alpha1.KVMDomainParameters{VCPU: 2, MemoryMiB: 1024, PowerState: v1alpha1.PowerStateStopped}, d: libvirt.DomainInfo{State: libvirt.StateShutOff}, size: size, up: true},
		"PausedIsNotRunning": {want: want, d: libvirt.DomainInfo{State: libvirt.StatePaused}, size: size},
		"Autostart":          {want: v1alpha1.KVMDomainParameters{VCPU: 2, MemoryMiB: 1024, Autostart: true}, d: running, size: size},
		"MoreMemory":         {want: v1alpha1.KVMDomainParameters{VCPU: 2, MemoryMiB: 2048}, d: running, size: size},
		"MoreVCPU":           {want: v1alpha1.KVMDomainParameters{VCPU: 4, MemoryMiB: 1024}, d: running, size: size},
		"DiskToGrow":         {want: want, d: running, size: size, grow: 1 << 30},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := upToDate(tc.want, tc.d, tc.size, tc.grow); got != tc.up {
				t.Errorf("upToDate() = %v, want %v", got, tc.up)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	readyInputs := func() []client.Object {
		b := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "base"}}
		b.SetConditions(xpv2.Available())
		b.Status.AtProvider.Path, b.Status.AtProvider.VolumeName = "/pool/default/pkvm-base-x.qcow2", "pkvm-base-0123456789abcdef01234567.qcow2"
		return []client.Object{b}
	}
	stopped := func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.PowerState = v1alpha1.PowerStateStopped }
	running := func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.PowerState = v1alpha1.PowerStateRunning }
	cases := map[string]struct {
		reason    string
		cr        *v1alpha1.KVMDomain
		state     string
		asked     time.Duration // a shutdown was asked this long ago (0: never)
		lastAsked time.Duration // the last request was sent this long ago (0: none)
		objs      []client.Object
		wantCalls []string
		wantErr   error
	}{
		"StartWhenStopped": {
			reason: "powerState Running starts a shut-off domain",
			cr:     kvm(running), state: libvirt.StateShutOff, wantCalls: []string{"StartDomain " + ourDomain},
		},
		"ShutdownWhenRunning": {
			reason: "powerState Stopped asks a running guest to shut down",
			cr:     kvm(stopped), state: libvirt.StateRunning, wantCalls: []string{"ShutdownDomain " + ourDomain},
		},
		"NotAskedAgainRightAway": {
			reason: "a stopping guest is not asked again within shutdownRepeat",
			cr:     kvm(stopped), state: libvirt.StateRunning, asked: 5 * time.Second, lastAsked: 5 * time.Second,
		},
		"AskedAgainAfterRepeat": {
			reason: "a guest still running shutdownRepeat after the last request is asked again",
			cr:     kvm(stopped), state: libvirt.StateRunning, asked: 20 * time.Second, lastAsked: shutdownRepeat + time.Second,
			wantCalls: []string{"ShutdownDomain " + ourDomain},
		},
		"ForceOffAfterGrace": {
			reason: "a guest that ignored the request past the grace period is powered off",
			cr:     kvm(stopped), state: libvirt.StateRunning, asked: defaultShutdownGrace + time.Second, wantCalls: []string{"DestroyDomain " + ourDomain},
		},
		"OwnGraceNotOverYet": {
			reason: "a KVMDomain's own longer grace period is waited out: past the default, the guest is asked again, not powered off",
			cr:     kvm(stopped, func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.ShutdownGracePeriodSeconds = ptr.To(int32(300)) }),
			state:  libvirt.StateRunning, asked: defaultShutdownGrace + time.Second, lastAsked: shutdownRepeat + time.Second,
			wantCalls: []string{"ShutdownDomain " + ourDomain},
		},
		"OwnGraceOver": {
			reason: "a KVMDomain's own shorter grace period powers the guest off once past",
			cr:     kvm(stopped, func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.ShutdownGracePeriodSeconds = ptr.To(int32(10)) }),
			state:  libvirt.StateRunning, asked: 11 * time.Second, lastAsked: 11 * time.Second,
			wantCalls: []string{"DestroyDomain " + ourDomain},
		},
		"ZeroGrace": {
			reason: "a grace period of 0 powers the guest off without asking",
			cr:     kvm(stopped, func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.ShutdownGracePeriodSeconds = ptr.To(int32(0)) }),
			state:  libvirt.StateRunning, wantCalls: []string{"DestroyDomain " + ourDomain},
		},
		"PausedIsDestroyed": {
			reason: "a paused guest cannot shut down: it is powered off",
			cr:     kvm(stopped), state: libvirt.StatePaused, wantCalls: []string{"DestroyDomain " + ourDomain},
		},
		"AutostartChanged": {
			reason: "autostart follows the spec",
			cr:     kvm(stopped, func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.Autostart = true }), state: libvirt.StateShutOff,
			wantCalls: []string{"SetAutostart " + ourDomain},
		},
		"SizeChanged": {
			reason: "new vcpu/memory redefine the domain (the guest sees them at its next boot)",
			cr:     kvm(running, func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.MemoryMiB = 1024 }), state: libvirt.StateRunning,
			objs: readyInputs(), wantCalls: []string{"DefineDomain"},
		},
		"SizeChangedInputGone": {
			reason: "a redefinition needs the inputs",
			cr:     kvm(running, func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.MemoryMiB = 1024 }), state: libvirt.StateRunning,
			wantErr: errors.Wrapf(kerrors.NewNotFound(schema.GroupResource{Group: v1alpha1.Group, Resource: "baseimages"}, "base"), errGetBase, "base"),
		},
		"NotOurs": {
			reason: "a domain of our name that is not ours is never changed",
			cr:     kvm(stopped), state: "foreign", wantErr: errors.Errorf(errNotOurs, ourDomain, "it belongs to ns/n, UID "+victimUID),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			if tc.state == "foreign" {
				withDomain(ourDomain, victimUID, libvirt.StateRunning)(t, h)
			} else {
				withDomain(ourDomain, uid, tc.state)(t, h)
			}
			withOverlay(true)(t, h)
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			e := newExt(h, false)
			e.kube = fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...).Build()
			if tc.asked > 0 {
				e.shutdowns.m[types.UID(uid)] = time.Now().Add(-tc.asked)
			}
			if tc.lastAsked > 0 {
				e.shutdowns.last = map[types.UID]time.Time{types.UID(uid): time.Now().Add(-tc.lastAsked)}
			}
			h.calls = nil
			_, err := e.Update(context.Background(), tc.cr)
			var calls []string
			for _, c := range h.calls {
				if !strings.HasPrefix(c, "Domain ") {
					calls = append(calls, c)
				}
			}
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nUpdate(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantCalls, calls); diff != "" {
				t.Errorf("%s\nUpdate() calls: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// only is a DomainIPv4 that knows the address ip from source src alone; other sources return
// otherErr.
func only(src, ip string, otherErr error) func(name, mac, source string) (string, error) {
	return func(_, _, source string) (string, error) {
		if source == src {
			return ip, nil
		}
		return "", otherErr
	}
}

func TestObserveGuest(t *testing.T) {
	nat := map[string][]netip.Prefix{"default": {netip.MustParsePrefix("192.168.122.0/24")}}
	cases := map[string]struct {
		reason  string
		ip      func(name, mac, source string) (string, error)
		ranges  map[string][]netip.Prefix
		want    string // Ready condition message ("" for Available)
		wantIP  string
		wantSrc string
	}{
		"Lease": {
			reason: "a DHCP lease gives the address: Available without a probe",
			ip:     only(libvirt.SourceLease, "192.168.122.9", errNoDomain),
			wantIP: "192.168.122.9", wantSrc: libvirt.SourceLease,
		},
		"AgentAfterLease": {
			reason: "without a lease the guest agent is asked; its address lies in the network's subnet",
			ip:     only(libvirt.SourceAgent, "192.168.122.10", nil),
			ranges: nat,
			wantIP: "192.168.122.10", wantSrc: libvirt.SourceAgent,
		},
		"AgentOutsideTheNetwork": {
			reason: "an address the guest agent reports outside the network's subnet is never used",
			ip:     only(libvirt.SourceAgent, "10.0.0.9", nil),
			ranges: nat,
			want:   `running; waiting for the guest's IPv4 address; ignored: agent reported an address outside the ranges of network "default" (192.168.122.0/24)`,
		},
		"ARPOutsideTheNetwork": {
			reason: "so is one ARP reports",
			ip:     only(libvirt.SourceARP, "169.254.169.254", nil),
			ranges: nat,
			want:   "running; waiting for the guest's IPv4 address; ignored: arp reported a loopback, link-local, unspecified, multicast or broadcast address",
		},
		"AgentOnANetworkWithoutSubnet": {
			reason: "a network without an <ip> element gives no range: a guest-reported address is not used",
			ip:     only(libvirt.SourceAgent, "192.168.122.10", nil),
			ranges: map[string][]netip.Prefix{"default": nil},
			want:   `running; waiting for the guest's IPv4 address; ignored: agent reported an address, but no address range is known for network "default", so an address the guest reports is not used (the network's definition has no IPv4 <ip> element)`,
		},
		"LeaseIsTrusted": {
			reason: "the lease comes from libvirt's own DHCP server: no range is read",
			ip:     only(libvirt.SourceLease, "10.9.9.9", errNoDomain),
			wantIP: "10.9.9.9", wantSrc: libvirt.SourceLease,
		},
		"NoAddressYet": {
			reason: "no address: running, waiting",
			ip:     func(string, string, string) (string, error) { return "", nil },
			want:   "running; waiting for the guest's IPv4 address",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			withDomain(ourDomain, uid, libvirt.StateRunning)(t, h)
			h.ip, h.ranges = tc.ip, tc.ranges
			cr := kvm(func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.PowerState = v1alpha1.PowerStateRunning })
			o, err := newExt(h, false).Observe(context.Background(), cr)
			if err != nil {
				t.Fatal(err)
			}
			c := cr.GetCondition(xpv2.TypeReady)
			msg := c.Message
			if c.Reason == xpv2.ReasonAvailable {
				msg = ""
			}
			got := []string{msg, cr.Status.AtProvider.IPv4, cr.Status.AtProvider.IPSource, string(o.ConnectionDetails[ConnectionIPv4])}
			if diff := cmp.Diff([]string{tc.want, tc.wantIP, tc.wantSrc, tc.wantIP}, got); diff != "" {
				t.Errorf("%s\nObserve(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestObserveReadyWhenStoppedAsAsked(t *testing.T) {
	cases := map[string]struct {
		power   v1alpha1.PowerState
		state   string
		ready   corev1.ConditionStatus
		message string
	}{
		"StoppedAsAsked":    {power: v1alpha1.PowerStateStopped, state: libvirt.StateShutOff, ready: corev1.ConditionTrue, message: "shut off, as powerState Stopped asks"},
		"ShouldRunButIsOff": {power: v1alpha1.PowerStateRunning, state: libvirt.StateShutOff, ready: corev1.ConditionFalse, message: "domain is ShutOff"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			withDomain(ourDomain, uid, tc.state)(t, h)
			withOverlay(true)(t, h)
			cr := kvm()
			cr.Spec.ForProvider.PowerState = tc.power
			if _, err := newExt(h, false).Observe(context.Background(), cr); err != nil {
				t.Fatal(err)
			}
			c := cr.GetCondition(xpv2.TypeReady)
			if c.Status != tc.ready || c.Message != tc.message {
				t.Errorf("Ready=%s %q, want %s %q", c.Status, c.Message, tc.ready, tc.message)
			}
		})
	}
}
