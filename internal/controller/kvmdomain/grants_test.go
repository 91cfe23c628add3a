package kvmdomain

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// TestCreateGrants: a pool, network or bridge the namespace was not granted, or a MAC address
// another domain on the host has, is refused before anything is made on the host; granted ones
// go on.
func TestCreateGrants(t *testing.T) {
	const baseVol = "pkvm-base-0123456789abcdef01234567.qcow2"
	spec := v1alpha1.ProviderConfigSpec{
		Defaults: v1alpha1.HostDefaults{Pool: pool, Network: "default", DomainType: "qemu"},
		Attachments: []v1alpha1.AttachmentGrant{{Namespaces: &v1alpha1.NamespaceSelection{Names: []string{"team-a"}},
			Pools: []string{"fast"}, Bridges: []v1alpha1.HostBridge{{Name: "br-lan"}}}},
	}
	const granted = "bridge br-lan, pool fast"
	refused := func(kind, name string) error {
		return errors.Errorf("%s %q is not granted to namespace team-a on ClusterProviderConfig/default: a namespace may use the config's defaults and what its spec.attachments grant it (%s)", kind, name, granted)
	}
	unmarked := func(_ *testing.T, h *fakeHost) {
		x := `<domain type='kvm'><name>platform-dns</name><devices><interface type='bridge'><mac address='52:54:00:0a:0b:0c'/><source bridge='br-lan'/></interface></devices></domain>`
		h.domains["platform-dns"] = libvirt.DomainInfo{Name: "platform-dns", State: libvirt.StateRunning, XML: x, InactiveXML: x}
	}
	cases := map[string]struct {
		reason  string
		params  func(p *v1alpha1.KVMDomainParameters)
		host    []hostSetup
		wantErr error
		defined bool
	}{
		"Defaults": {
			reason:  "the config's defaults need no grant",
			params:  func(*v1alpha1.KVMDomainParameters) {},
			defined: true,
		},
		"GrantedPoolAndBridge": {
			reason:  "a pool and a bridge granted to the namespace are used",
			params:  func(p *v1alpha1.KVMDomainParameters) { p.Pool, p.Bridge = "fast", "br-lan" },
			defined: true,
		},
		"Pool": {
			reason:  "an overlay in a pool not granted is refused",
			params:  func(p *v1alpha1.KVMDomainParameters) { p.Pool = "images" },
			wantErr: refused("pool", "images"),
		},
		"Network": {
			reason:  "another network (another team's, a passthrough one) is refused",
			params:  func(p *v1alpha1.KVMDomainParameters) { p.Network = "team-b-isolated" },
			wantErr: refused("network", "team-b-isolated"),
		},
		"Bridge": {
			reason:  "the host's management bridge is refused",
			params:  func(p *v1alpha1.KVMDomainParameters) { p.Bridge = "br-mgmt" },
			wantErr: refused("bridge", "br-mgmt"),
		},
		"MACOfAnotherTeam": {
			reason:  "the MAC of another team's guest is refused, naming no other namespace or domain",
			params:  func(p *v1alpha1.KVMDomainParameters) { p.MACAddress = domainxml.MAC(victimUID) },
			host:    []hostSetup{withDomain(victim, victimUID, libvirt.StateRunning)},
			wantErr: errors.Errorf(errMACTaken, domainxml.MAC(victimUID)),
		},
		"MACOfAnUnmanagedGuest": {
			reason:  "so is the MAC of a guest the provider does not manage",
			params:  func(p *v1alpha1.KVMDomainParameters) { p.MACAddress = "52:54:00:0a:0b:0c" },
			host:    []hostSetup{unmarked},
			wantErr: errors.Errorf(errMACTaken, "52:54:00:0a:0b:0c"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			for _, p := range []string{pool, "fast"} {
				h.Put(p, baseVol, []byte("QFI\xfb"))
				h.Put(p, imagecache.MarkerName(baseVol), []byte("{}"))
			}
			for _, s := range tc.host {
				s(t, h)
			}
			volumes := len(h.Created)
			b := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "base", UID: "base-uid"}}
			b.SetConditions(xpv2.Available())
			b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool, b.Status.AtProvider.Path = baseVol, pool, "/pool/default/"+baseVol
			b.Status.AtProvider.VirtualSizeBytes = 1 << 30
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			e := newExt(h, false)
			e.kube = fake.NewClientBuilder().WithScheme(s).WithObjects(b).WithStatusSubresource(b).Build()
			g, err := hostgrants.For(e.source, spec, hostgrants.Namespace{Name: "team-a"}, false)
			if err != nil {
				t.Fatal(err)
			}
			e.grant = g
			cr := kvm(func(d *v1alpha1.KVMDomain) { tc.params(&d.Spec.ForProvider) })
			_, err = e.Create(context.Background(), cr)
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Fatalf("%s\nCreate(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if got := slices.Contains(h.calls, "DefineDomain"); got != tc.defined {
				t.Errorf("%s\ndomain defined: %v, want %v (calls %v)", tc.reason, got, tc.defined, h.calls)
			}
			if !tc.defined && len(h.Created) != volumes {
				t.Errorf("%s\na refused Create made volumes: %v", tc.reason, h.Created)
			}
		})
	}
}

// events keeps the events it is given.
type events struct{ got []event.Event }

func (r *events) Event(_ runtime.Object, e event.Event)    { r.got = append(r.got, e) }
func (r *events) WithAnnotations(...string) event.Recorder { return r }

// TestAddressIgnoredEvent: an ignored address is named in one warning event (not in status),
// raised again only when what is ignored changes.
func TestAddressIgnoredEvent(t *testing.T) {
	h := newFakeHost()
	withDomain(ourDomain, uid, libvirt.StateRunning)(t, h)
	h.ip = only(libvirt.SourceAgent, "10.0.0.9", nil)
	h.ranges = map[string][]netip.Prefix{"default": {netip.MustParsePrefix("192.168.122.0/24")}}
	rec := &events{}
	e := newExt(h, false)
	e.recorder = rec
	cr := kvm(func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.PowerState = v1alpha1.PowerStateRunning })
	for range 3 {
		if _, err := e.Observe(context.Background(), cr); err != nil {
			t.Fatal(err)
		}
	}
	want := []event.Event{event.Warning(reasonAddressIgnored, errors.New(`ignored 10.0.0.9: agent reported an address outside the ranges of network "default" (192.168.122.0/24)`))}
	if diff := cmp.Diff(want, rec.got, test.EquateErrors()); diff != "" {
		t.Errorf("events: -want, +got:\n%s", diff)
	}
	if m := cr.GetCondition(xpv2.TypeReady).Message; strings.Contains(m, "10.0.0.9") || cr.Status.AtProvider.IPv4 != "" {
		t.Errorf("the ignored address is in status: %q, ipv4 %q", m, cr.Status.AtProvider.IPv4)
	}
}
