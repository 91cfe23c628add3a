package kvmdomain

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const limitsSource = "ClusterProviderConfig/default"

// limitsDefaults are the CRD's defaults of spec.limits.
var limitsDefaults = v1alpha1.HostLimits{MaxVirtualSizeGiB: 2048, MaxDiskSizeGiB: 2048, MaxMemoryMiB: 262144, MaxVCPU: 64, MinFreePoolMiB: 1024}

// TestCreateLimits: a new domain over a cap of the host config is refused before anything
// is made on the host, with an error naming the cap and the config.
func TestCreateLimits(t *testing.T) {
	const baseVol = "pkvm-base-0123456789abcdef01234567.qcow2"
	// marked defines a domain of namespace ns on the host.
	marked := func(ns, name, uid string) hostSetup {
		return func(t *testing.T, h *fakeHost) {
			x, err := domainxml.Domain(domainxml.Spec{Name: ns + "_" + name, Type: "qemu", VCPU: 1, MemoryMiB: 512, Firmware: "bios",
				RootDisk: domainxml.Volume{Pool: pool, Name: name + ".qcow2"}, Network: "default", MAC: domainxml.MAC(uid),
				Owner: domainxml.Owner{UID: uid, Namespace: ns, Name: name}})
			if err != nil {
				t.Fatal(err)
			}
			h.domains[ns+"_"+name] = libvirt.DomainInfo{Name: ns + "_" + name, State: libvirt.StateRunning, XML: x, InactiveXML: x}
		}
	}
	cases := map[string]struct {
		reason     string
		limits     v1alpha1.HostLimits
		virtual    int64
		kvm        []func(*v1alpha1.KVMDomain)
		host       []hostSetup
		wantErr    error
		wantDomain bool
	}{
		"WithinDefaults": {reason: "a usual domain is made under the default caps", limits: limitsDefaults, virtual: 2 << 30, wantDomain: true},
		"Memory": {reason: "memory over maxMemoryMiB is refused", limits: limitsDefaults, virtual: 2 << 30,
			kvm:     []func(*v1alpha1.KVMDomain){func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.MemoryMiB = 4 << 20 }},
			wantErr: &hostlimits.ExceededError{What: "memoryMiB", Field: "maxMemoryMiB", Asked: 4 << 20, Max: 262144, Source: limitsSource}},
		"VCPU": {reason: "vcpu over maxVCPU is refused", limits: limitsDefaults, virtual: 2 << 30,
			kvm:     []func(*v1alpha1.KVMDomain){func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.VCPU = 128 }},
			wantErr: &hostlimits.ExceededError{What: "vcpu", Field: "maxVCPU", Asked: 128, Max: 64, Source: limitsSource}},
		"DiskSize": {reason: "diskSizeGiB over maxDiskSizeGiB (64 TiB) is refused", limits: limitsDefaults, virtual: 2 << 30,
			kvm:     []func(*v1alpha1.KVMDomain){disk(65536)},
			wantErr: &hostlimits.ExceededError{What: "root disk GiB", Field: "maxDiskSizeGiB", Asked: 65536, Max: 2048, Source: limitsSource}},
		"BaseVirtualSize": {reason: "a base whose virtual size is 2^62 bytes gives the overlay that size: refused", limits: limitsDefaults, virtual: 1 << 62,
			wantErr: &hostlimits.ExceededError{What: "root disk GiB", Field: "maxDiskSizeGiB", Asked: 1 << 32, Max: 2048, Source: limitsSource}},
		"DomainCount": {reason: "a namespace with maxDomainsPerNamespace domains gets no more; others' domains do not count",
			limits: v1alpha1.HostLimits{MaxDomainsPerNamespace: 2}, virtual: 2 << 30,
			host: []hostSetup{marked("team-a", "one", "u1"), marked("team-a", "two", "u2"), marked("team-b", "three", "u3")},
			wantErr: &hostlimits.ExceededError{What: "domains of this namespace on the host, with this one,", Field: "maxDomainsPerNamespace",
				Asked: 3, Max: 2, Source: limitsSource}},
		"DomainCountRoom": {reason: "another namespace's domains leave the slot free",
			limits: v1alpha1.HostLimits{MaxDomainsPerNamespace: 2}, virtual: 2 << 30,
			host: []hostSetup{marked("team-a", "one", "u1"), marked("team-b", "two", "u2"), marked("team-b", "three", "u3")}, wantDomain: true},
		"PoolFull": {reason: "a pool under minFreePoolMiB gets no new overlay", limits: limitsDefaults, virtual: 2 << 30,
			host:    []hostSetup{func(_ *testing.T, h *fakeHost) { h.Free = map[string]uint64{pool: 512 << 20} }},
			wantErr: &hostlimits.PoolFullError{Pool: pool, Available: 512 << 20, Need: 1<<30 + 1, Source: limitsSource}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			h.Put(pool, baseVol, []byte("QFI\xfb"))
			h.Put(pool, imagecache.MarkerName(baseVol), []byte("{}"))
			for _, s := range tc.host {
				s(t, h)
			}
			before := len(h.domains)
			b := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "base", UID: "base-uid"}}
			b.SetConditions(xpv2.Available())
			b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool, b.Status.AtProvider.Path = baseVol, pool, "/pool/default/"+baseVol
			b.Status.AtProvider.VirtualSizeBytes = tc.virtual
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			e := newExt(h, false)
			e.limits = hostlimits.Limits{HostLimits: tc.limits, Source: limitsSource}
			e.kube = fake.NewClientBuilder().WithScheme(s).WithObjects(b).WithStatusSubresource(b).Build()
			_, err := e.Create(context.Background(), kvm(tc.kvm...))
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Fatalf("%s\nCreate(): -want error, +got error:\n%s", tc.reason, diff)
			}
			_, defined := h.domains[ourDomain]
			if defined != tc.wantDomain {
				t.Errorf("%s\ndomain defined: %v, want %v", tc.reason, defined, tc.wantDomain)
			}
			if _, made := h.Created[pool+"/"+overlay]; !tc.wantDomain && (made || len(h.domains) != before) {
				t.Errorf("%s\na refused Create made something on the host: overlay %v, domains %d (were %d)", tc.reason, made, len(h.domains), before)
			}
		})
	}
}

// TestDefineRecountsUnderLock: a domain of the namespace defined between Create's first count
// and its definition takes the last slot: the definition is refused.
func TestDefineRecountsUnderLock(t *testing.T) {
	h := newFakeHost()
	e := newExt(h, false)
	e.limits = hostlimits.Limits{HostLimits: v1alpha1.HostLimits{MaxDomainsPerNamespace: 1}, Source: limitsSource}
	x, err := domainxml.Domain(domainxml.Spec{Name: "team-a_other", Type: "qemu", VCPU: 1, MemoryMiB: 512, Firmware: "bios",
		RootDisk: domainxml.Volume{Pool: pool, Name: "o.qcow2"}, Network: "default", MAC: domainxml.MAC("u9"),
		Owner: domainxml.Owner{UID: "u9", Namespace: "team-a", Name: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	h.domains["team-a_other"] = libvirt.DomainInfo{Name: "team-a_other", XML: x, InactiveXML: x}
	err = e.define(context.Background(), kvm(), "<domain><name>"+ourDomain+"</name></domain>")
	want := &hostlimits.ExceededError{What: "domains of this namespace on the host, with this one,", Field: "maxDomainsPerNamespace", Asked: 2, Max: 1, Source: limitsSource}
	if diff := cmp.Diff(error(want), err, test.EquateErrors()); diff != "" {
		t.Fatalf("define(): -want error, +got error:\n%s", diff)
	}
	if _, ok := h.domains[ourDomain]; ok {
		t.Error("define() defined the domain over the limit")
	}
}

// recorded keeps the events' reasons.
type recorded struct{ reasons []string }

func (r *recorded) Event(_ runtime.Object, e event.Event) {
	r.reasons = append(r.reasons, string(e.Reason))
}
func (r *recorded) WithAnnotations(...string) event.Recorder {
	return r
}

// TestResumeAfterIOError: Observe resumes a domain QEMU paused on an I/O error once its pool
// has the margin free again, with an event; never one paused for another reason, nor one the
// resource wants stopped.
func TestResumeAfterIOError(t *testing.T) {
	cases := map[string]struct {
		reason  string
		ioError bool
		stopped bool
		free    uint64
		// fresh, when set, is the pool's free space once it is refreshed; free is then the
		// stale figure libvirt had before (the guest's writes are not in it).
		fresh       uint64
		wantState   string
		wantEvents  []string
		wantMessage string
	}{
		"SpaceBack": {reason: "pool has room again: resumed, and an event says so", ioError: true, free: 2 << 30,
			wantState: libvirt.StateRunning, wantEvents: []string{"ResumedAfterIOError"}},
		"StillFull": {reason: "pool still full: stays paused, Ready says why", ioError: true, free: 100 << 20,
			wantState: libvirt.StatePaused, wantMessage: "domain is Paused: QEMU paused it when a write to its disk failed (its storage pool default is full, or was); it is resumed once the pool has 1024 MiB free (limits.minFreePoolMiB of ClusterProviderConfig/default)"},
		"StaleFiguresRefreshed": {reason: "libvirt's figures predate the guest's writes: the pool is read afresh, still full, so the guest stays paused",
			ioError: true, free: 2 << 30, fresh: 100 << 20,
			wantState: libvirt.StatePaused, wantMessage: "domain is Paused: QEMU paused it when a write to its disk failed (its storage pool default is full, or was); it is resumed once the pool has 1024 MiB free (limits.minFreePoolMiB of ClusterProviderConfig/default)"},
		"UserPaused": {reason: "paused for another reason: left alone whatever the pool", free: 1 << 40,
			wantState: libvirt.StatePaused, wantMessage: "domain is Paused"},
		"WantStopped": {reason: "powerState Stopped: not resumed", ioError: true, stopped: true, free: 1 << 40,
			wantState: libvirt.StatePaused, wantMessage: "domain is Paused"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			withDomain(ourDomain, uid, libvirt.StatePaused)(t, h)
			withOverlay(true)(t, h)
			_ = h.set(ourDomain, func(d *libvirt.DomainInfo) { d.PausedIOError = tc.ioError })
			h.Free = map[string]uint64{pool: tc.free}
			if tc.fresh != 0 {
				h.Fail = func(op, p, _ string) error {
					if op == "RefreshPool" && p == pool {
						h.Free[pool] = tc.fresh
					}
					return nil
				}
			}
			e := newExt(h, false)
			rec := &recorded{}
			e.recorder = rec
			e.limits = hostlimits.Limits{HostLimits: limitsDefaults, Source: limitsSource}
			cr := kvm()
			if tc.stopped {
				cr.Spec.ForProvider.PowerState = v1alpha1.PowerStateStopped
			}
			cr.Spec.ForProvider.VCPU, cr.Spec.ForProvider.MemoryMiB = 1, 512
			cr.Spec.ForProvider.BaseImageName = ptr.To("base")
			if _, err := e.Observe(context.Background(), cr); err != nil {
				t.Fatalf("Observe(): %v", err)
			}
			if got := h.domains[ourDomain].State; got != tc.wantState {
				t.Errorf("%s\nstate %q, want %q", tc.reason, got, tc.wantState)
			}
			if diff := cmp.Diff(tc.wantEvents, rec.reasons); diff != "" {
				t.Errorf("%s\nevents: -want, +got:\n%s", tc.reason, diff)
			}
			if tc.wantMessage != "" {
				if got := cr.GetCondition(xpv2.TypeReady).Message; got != tc.wantMessage {
					t.Errorf("%s\nReady message %q, want %q", tc.reason, got, tc.wantMessage)
				}
			}
		})
	}
}
