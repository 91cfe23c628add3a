package hoststatus

import (
	"context"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

const (
	ourName  = "team-a_proxy"
	ourSeed  = "team-a_proxy-6c1f0b6e-abababababababab.seed.iso"
	ourRoot  = "team-a_proxy-6c1f0b6e.root.qcow2"
	ourBase  = "pkvm-base-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab.qcow2"
	otherVol = "debian.qcow2"
	foreign  = "legacy-vm"
	// ownerXML is our record as libvirt's DomainGetMetadata returns it: without its namespace.
	ownerXML   = `<owner><managedBy>provider-kvm</managedBy><uid>u1</uid><namespace>team-a</namespace><name>proxy</name></owner>`
	ownerXMLNS = `<owner xmlns="https://kvm.crossplane.io/xmlns/owner/v1"><managedBy>provider-kvm</managedBy><uid>u1</uid></owner>`
	strangerX  = `<owner xmlns="https://kvm.crossplane.io/xmlns/owner/v1"><managedBy>someone-else</managedBy><uid>u2</uid></owner>`
)

func dom(name string, id byte, active bool, vcpus uint32, mem uint64) lv.DomainStat {
	return lv.DomainStat{Handle: golibvirt.Domain{Name: name, UUID: golibvirt.UUID{id}}, Active: active, VCPUs: vcpus, MemoryBytes: mem}
}

// fakeHost is a libvirt host for status reads: node and domains from its fields, pools and
// volumes from fakestorage. Every call is counted by name.
type fakeHost struct {
	*fakestorage.Storage
	node     lv.NodeInfo
	free     uint64
	domains  []lv.DomainStat
	metadata map[string]string // by domain name
	pools    map[string]lv.Pool
	fail     map[string]error // by call
	calls    map[string]int
}

func newFakeHost() *fakeHost {
	s := fakestorage.New()
	s.Put("default", ourSeed, make([]byte, 4096))
	s.Put("default", ourSeed+".owner", make([]byte, 100))
	s.Put("default", ourRoot, make([]byte, 8192))
	s.Put("default", ourBase, make([]byte, 3*4096))
	s.Put("default", otherVol, make([]byte, 1<<20))
	return &fakeHost{
		Storage: s,
		node:    lv.NodeInfo{LibvirtVersion: 9_000_000, HypervisorVersion: 7_002_000, CPUs: 8, MemoryBytes: 16 << 30},
		free:    6 << 30,
		domains: []lv.DomainStat{
			dom(ourName, 1, true, 2, 1<<30),
			dom("team-b_db", 2, false, 1, 512<<20),
			dom(foreign, 3, true, 4, 4<<30),
		},
		metadata: map[string]string{ourName: ownerXML, "team-b_db": ownerXML},
		pools:    map[string]lv.Pool{"default": {Name: "default", Active: true, CapacityBytes: 100 << 30, AllocationBytes: 40 << 30, AvailableBytes: 60 << 30}},
		fail:     map[string]error{},
		calls:    map[string]int{},
	}
}

func (h *fakeHost) count(op string) error {
	h.calls[op]++
	return h.fail[op]
}

func (h *fakeHost) NodeInfo(context.Context) (lv.NodeInfo, error) {
	return h.node, h.count("NodeInfo")
}
func (h *fakeHost) FreeMemory(context.Context) (uint64, error) { return h.free, h.count("FreeMemory") }
func (h *fakeHost) DomainStats(context.Context) ([]lv.DomainStat, error) {
	return h.domains, h.count("DomainStats")
}
func (h *fakeHost) DomainMetadata(_ context.Context, d golibvirt.Domain, uri string) (string, error) {
	if uri != domainxml.Namespace {
		return "", errors.New("wrong namespace")
	}
	return h.metadata[d.Name], h.count("DomainMetadata")
}
func (h *fakeHost) PoolUsage(ctx context.Context, name string, known *golibvirt.StoragePool) (lv.PoolUsage, error) {
	if known == nil {
		h.calls["PoolLookup"]++
	}
	if err := h.count("PoolUsage"); err != nil {
		return lv.PoolUsage{}, err
	}
	p, ok := h.pools[name]
	if !ok {
		return lv.PoolUsage{}, golibvirt.Error{Code: uint32(golibvirt.ErrNoStoragePool), Message: "no pool"}
	}
	vols, err := h.VolumeNames(ctx, name)
	return lv.PoolUsage{Handle: golibvirt.StoragePool{Name: name}, Pool: p, Volumes: vols}, err
}
func (h *fakeHost) Domain(_ context.Context, name string) (lv.DomainInfo, error) {
	if err := h.count("Domain"); err != nil {
		return lv.DomainInfo{}, err
	}
	for _, d := range h.domains {
		if d.Name() != name {
			continue
		}
		state := lv.StateShutOff
		if d.Active {
			state = lv.StateRunning
		}
		md := ""
		if m := h.metadata[name]; m != "" {
			md = "<metadata>" + strings.Replace(m, "<owner>", `<owner xmlns="`+domainxml.Namespace+`">`, 1) + "</metadata>"
		}
		return lv.DomainInfo{Name: name, UUID: d.UUID(), State: state, XML: "<domain type='kvm'><name>" + name + "</name>" + md + "</domain>"}, nil
	}
	return lv.DomainInfo{}, golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "no domain"}
}
func (h *fakeHost) DestroyDomain(_ context.Context, name string) error {
	return h.count("DestroyDomain " + name)
}
func (h *fakeHost) UndefineDomain(_ context.Context, name string) error {
	if err := h.count("UndefineDomain " + name); err != nil {
		return err
	}
	for i, d := range h.domains {
		if d.Name() == name {
			h.domains = append(h.domains[:i:i], h.domains[i+1:]...)
			break
		}
	}
	return nil
}
func (h *fakeHost) VolumeInfo(ctx context.Context, pool, name string) (lv.VolumeInfo, error) {
	if err := h.count("VolumeInfo"); err != nil {
		return lv.VolumeInfo{}, err
	}
	return h.Storage.VolumeInfo(ctx, pool, name)
}

// TestRead: what a read finds, and what it costs on the first read, on the next (nothing
// new), and after the recheck period.
func TestRead(t *testing.T) {
	errBoom := errors.New("boom")
	type step struct {
		// at is the time after the first read.
		at time.Duration
		// change is applied to the host before the read.
		change func(h *fakeHost)
		pools  []string
		want   Reading
		calls  map[string]int
		err    error
	}
	ours := map[string]bool{dom("", 1, false, 0, 0).UUID(): true,
		dom("", 2, false, 0, 0).UUID(): true, dom("", 3, false, 0, 0).UUID(): false}
	h0 := newFakeHost()
	vols := map[string]uint64{ourSeed: 4096, ourSeed + ".owner": 4096, ourRoot: 8192, ourBase: 3 * 4096}
	u1 := RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: "u1", Namespace: "team-a", Name: "proxy"}
	owners := map[string]RecordOwner{dom("", 1, false, 0, 0).UUID(): u1, dom("", 2, false, 0, 0).UUID(): u1}
	full := Reading{Node: h0.node, FreeMemory: h0.free, Domains: h0.domains, Ours: ours, Owners: owners,
		Pools: []PoolReading{{Name: "default", Pool: h0.pools["default"], Volumes: vols}}}

	cases := map[string]struct {
		reason string
		steps  []step
	}{
		"FirstThenSteady": {
			reason: "the first read asks everything once; the next only free memory, domain stats and the pool",
			steps: []step{
				{pools: []string{"default"}, want: full,
					calls: map[string]int{"NodeInfo": 1, "FreeMemory": 1, "DomainStats": 1, "DomainMetadata": 2, "PoolLookup": 1, "PoolUsage": 1, "VolumeInfo": 4}},
				{at: time.Minute, pools: []string{"default"}, want: full,
					calls: map[string]int{"FreeMemory": 1, "DomainStats": 1, "PoolUsage": 1}},
				{at: DefaultRecheck, pools: []string{"default"}, want: full,
					calls: map[string]int{"NodeInfo": 1, "FreeMemory": 1, "DomainStats": 1, "PoolUsage": 1, "VolumeInfo": 4}},
			},
		},
		"NewDomainAndVolume": {
			reason: "a new domain with a derived name has its record read once; a new volume of ours its size",
			steps: []step{
				{pools: []string{"default"}, want: full,
					calls: map[string]int{"NodeInfo": 1, "FreeMemory": 1, "DomainStats": 1, "DomainMetadata": 2, "PoolLookup": 1, "PoolUsage": 1, "VolumeInfo": 4}},
				{at: time.Minute, pools: []string{"default"},
					change: func(h *fakeHost) {
						h.domains = append(h.domains, dom("team-c_web", 4, true, 1, 256<<20))
						h.metadata["team-c_web"] = strangerX
						h.Put("default", "team-c_web-12345678.root.qcow2", make([]byte, 4096))
					},
					want: func() Reading {
						r := full
						r.Domains = append(append([]lv.DomainStat{}, full.Domains...), dom("team-c_web", 4, true, 1, 256<<20))
						r.Ours = map[string]bool{}
						for k, v := range ours {
							r.Ours[k] = v
						}
						r.Ours[dom("", 4, false, 0, 0).UUID()] = false
						v := map[string]uint64{"team-c_web-12345678.root.qcow2": 4096}
						for k, b := range vols {
							v[k] = b
						}
						r.Pools = []PoolReading{{Name: "default", Pool: full.Pools[0].Pool, Volumes: v}}
						return r
					}(),
					calls: map[string]int{"FreeMemory": 1, "DomainStats": 1, "DomainMetadata": 1, "PoolUsage": 1, "VolumeInfo": 1}},
			},
		},
		"MissingPool": {
			reason: "a pool the host lacks is reported missing, not an error",
			steps: []step{{pools: []string{"default", "fast"},
				want: func() Reading {
					r := full
					r.Pools = append(append([]PoolReading{}, full.Pools...), PoolReading{Name: "fast", Missing: true})
					return r
				}(),
				calls: map[string]int{"NodeInfo": 1, "FreeMemory": 1, "DomainStats": 1, "DomainMetadata": 2, "PoolLookup": 2, "PoolUsage": 2, "VolumeInfo": 4}}},
		},
		"LibvirtFails": {
			reason: "a failed call fails the read with its error",
			steps: []step{{pools: []string{"default"}, change: func(h *fakeHost) { h.fail["DomainStats"] = errBoom },
				err: errBoom, calls: map[string]int{"NodeInfo": 1, "FreeMemory": 1, "DomainStats": 1}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			now := start
			m := NewMemo(func() time.Time { return now }, DefaultRecheck)
			h := newFakeHost()
			for i, s := range tc.steps {
				now = start.Add(s.at)
				if s.change != nil {
					s.change(h)
				}
				h.calls = map[string]int{}
				got, err := m.Read(context.Background(), h, "root@h:22", s.pools)
				if diff := cmp.Diff(s.err, err, test.EquateErrors()); diff != "" {
					t.Fatalf("%s\nstep %d: Read(): -want error, +got error:\n%s", tc.reason, i, diff)
				}
				if diff := cmp.Diff(s.want, got, cmp.AllowUnexported(), cmp.Comparer(func(a, b golibvirt.UUID) bool { return a == b })); diff != "" {
					t.Errorf("%s\nstep %d: Read(): -want, +got:\n%s", tc.reason, i, diff)
				}
				if diff := cmp.Diff(s.calls, h.calls); diff != "" {
					t.Errorf("%s\nstep %d: calls: -want, +got:\n%s", tc.reason, i, diff)
				}
			}
		})
	}
}

func TestNames(t *testing.T) {
	cases := map[string]struct {
		name            string
		domain, volumes bool
	}{
		"Domain":      {name: "team-a_proxy", domain: true},
		"Plain":       {name: "legacy-vm"},
		"TwoUnders":   {name: "a_b_c"},
		"Leading":     {name: "_x"},
		"Seed":        {name: ourSeed, domain: true, volumes: true},
		"SeedRecord":  {name: ourSeed + ".owner", domain: true, volumes: true},
		"Overlay":     {name: ourRoot, domain: true, volumes: true},
		"Base":        {name: ourBase, volumes: true},
		"BaseRecord":  {name: ourBase + ".owner-0123", volumes: true},
		"OtherQcow2":  {name: "debian.qcow2"},
		"UnderQcow2":  {name: "my_disk.qcow2", domain: true},
		"OtherRecord": {name: "debian.qcow2.owner"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := DerivedDomainName(tc.name); got != tc.domain {
				t.Errorf("DerivedDomainName(%q) = %v, want %v", tc.name, got, tc.domain)
			}
			if got := OurVolume(tc.name); got != tc.volumes {
				t.Errorf("OurVolume(%q) = %v, want %v", tc.name, got, tc.volumes)
			}
		})
	}
}

func TestOwnedBy(t *testing.T) {
	cases := map[string]struct {
		md      string
		want    bool
		wantErr bool
	}{
		"None":     {},
		"Ours":     {md: ownerXML, want: true},
		"OursNS":   {md: ownerXMLNS, want: true},
		"NoUID":    {md: "<owner><managedBy>provider-kvm</managedBy></owner>"},
		"Other":    {md: "<label>x</label>", wantErr: true},
		"Stranger": {md: strangerX},
		"Garbage":  {md: "<owner", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, got, err := ownedBy(tc.md)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ownedBy(%q) = %v, %v; want %v, error %v", tc.md, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
