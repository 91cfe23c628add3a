package hoststatus

import (
	"context"
	"encoding/xml"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

// DefaultRecheck is how long what rarely changes is trusted before it is read again: the
// versions, CPUs and memory of a host, and the size of each of our volumes.
const DefaultRecheck = 10 * time.Minute

const errParseOwner = "cannot parse the ownership metadata of domain %q"

// Host is what a status read asks of a libvirt host; *libvirt.Client is one.
type Host interface {
	NodeInfo(ctx context.Context) (lv.NodeInfo, error)
	FreeMemory(ctx context.Context) (uint64, error)
	DomainStats(ctx context.Context) ([]lv.DomainStat, error)
	DomainMetadata(ctx context.Context, d golibvirt.Domain, uri string) (string, error)
	PoolUsage(ctx context.Context, name string, known *golibvirt.StoragePool) (lv.PoolUsage, error)
	VolumeInfo(ctx context.Context, pool, name string) (lv.VolumeInfo, error)
	SweepHost
}

// Reading is what one status read found on a host.
type Reading struct {
	Node       lv.NodeInfo
	FreeMemory uint64
	// Domains are every domain of the host; Ours tells, by UUID, those that carry our
	// ownership record.
	Domains []lv.DomainStat
	Ours    map[string]bool
	// Owners are, by UUID, the owners the records of our domains name.
	Owners map[string]RecordOwner
	Pools  []PoolReading
}

// PoolReading is one pool: its figures, or Missing, and the allocation of each of our volumes
// in it, by name.
type PoolReading struct {
	Name    string
	Missing bool
	Pool    lv.Pool
	Volumes map[string]uint64
}

// Memo is what status reads remember between polls, per host: what rarely changes, which
// domains are ours (a domain's ownership record is read once per UUID), pool handles and the
// sizes of our volumes. Nothing in it is used for anything but status. Make one per process.
type Memo struct {
	now     func() time.Time
	recheck time.Duration

	mu    sync.Mutex
	hosts map[string]*hostMemo
	// orphans are, by config (configLabel), when each of its orphans was first seen one.
	orphans map[string]map[string]time.Time
	images  imageSweeps
}

// NewMemo returns an empty Memo that trusts what rarely changes for recheck.
func NewMemo(now func() time.Time, recheck time.Duration) *Memo {
	return &Memo{now: now, recheck: recheck, hosts: map[string]*hostMemo{}, orphans: map[string]map[string]time.Time{},
		images: imageSweeps{last: map[string]time.Time{}, gone: map[string]map[string]time.Time{}}}
}

type hostMemo struct {
	mu     sync.Mutex
	node   lv.NodeInfo
	nodeAt time.Time
	// ours is by domain UUID: whether the domain carries our ownership record; owners the
	// owner it names.
	ours   map[string]bool
	owners map[string]RecordOwner
	// records are the volume ownership records read by the orphan sweep, by pool and
	// record volume name: written once, they are read once while they exist.
	records map[string]RecordOwner
	pools   map[string]golibvirt.StoragePool
	// vols is by pool and volume name.
	vols map[string]volMemo
}

type volMemo struct {
	bytes uint64
	at    time.Time
}

// host returns the memo of the host at address, locked; the caller unlocks it.
func (m *Memo) host(address string) *hostMemo {
	m.mu.Lock()
	h, ok := m.hosts[address]
	if !ok {
		h = &hostMemo{ours: map[string]bool{}, owners: map[string]RecordOwner{}, records: map[string]RecordOwner{}, pools: map[string]golibvirt.StoragePool{}, vols: map[string]volMemo{}}
		m.hosts[address] = h
	}
	m.mu.Unlock()
	h.mu.Lock()
	return h
}

// Forget drops what is remembered of the host at address, e.g. after a failed read: the
// next read asks everything again.
func (m *Memo) Forget(address string) {
	m.mu.Lock()
	delete(m.hosts, address)
	m.mu.Unlock()
}

// Read reads the host at address for its status: the node, every domain and the pools.
//
// Calls per read (libvirt RPCs): FreeMemory 1, DomainStats 1, PoolUsage 2 per active pool on
// a remembered handle; and, only when not remembered: NodeInfo 3 (every recheck), one
// StoragePoolLookupByName per pool (first read), one DomainGetMetadata per domain whose name
// is one we derive (first time its UUID is seen), one StorageVolGetInfo per volume of ours
// (first seen, then every recheck). A host with one pool and nothing new: 4.
func (m *Memo) Read(ctx context.Context, h Host, address string, pools []string) (Reading, error) {
	hm := m.host(address)
	defer hm.mu.Unlock()
	now := m.now()
	var r Reading
	var err error

	if hm.nodeAt.IsZero() || now.Sub(hm.nodeAt) >= m.recheck {
		if hm.node, err = h.NodeInfo(ctx); err != nil {
			return Reading{}, err
		}
		hm.nodeAt = now
	}
	r.Node = hm.node
	if r.FreeMemory, err = h.FreeMemory(ctx); err != nil {
		return Reading{}, err
	}
	if r.Domains, err = h.DomainStats(ctx); err != nil {
		return Reading{}, err
	}
	if r.Ours, r.Owners, err = hm.ownership(ctx, h, r.Domains); err != nil {
		return Reading{}, err
	}
	seen := map[string]bool{}
	for _, p := range pools {
		pr, err := hm.pool(ctx, h, p, now, m.recheck, seen)
		if err != nil {
			return Reading{}, err
		}
		r.Pools = append(r.Pools, pr)
	}
	for k := range hm.vols {
		if !seen[k] {
			delete(hm.vols, k)
		}
	}
	return r, nil
}

// ownership tells which domains carry our ownership record, reading the record of each domain
// not seen before whose name is one we derive (internal/names: "<namespace>_<name>"), and
// forgets domains that went.
func (hm *hostMemo) ownership(ctx context.Context, h Host, doms []lv.DomainStat) (map[string]bool, map[string]RecordOwner, error) {
	ours := make(map[string]bool, len(doms))
	owners := map[string]RecordOwner{}
	for _, d := range doms {
		id := d.UUID()
		if o, ok := hm.ours[id]; ok {
			ours[id] = o
			if o {
				owners[id] = hm.owners[id]
			}
			continue
		}
		o, ow := false, RecordOwner{}
		if DerivedDomainName(d.Name()) {
			md, err := h.DomainMetadata(ctx, d.Handle, domainxml.Namespace)
			if lv.IsNotFound(err) {
				continue // undefined since listed
			}
			if err != nil {
				return nil, nil, err
			}
			if ow, o, err = ownedBy(md); err != nil {
				return nil, nil, errors.Wrapf(err, errParseOwner, d.Name())
			}
		}
		ours[id] = o
		if o {
			owners[id] = ow
		}
	}
	hm.ours, hm.owners = ours, owners
	return ours, owners, nil
}

// ownedBy is true when metadata (the element of our namespace, "" for none) is our
// ownership record. libvirt returns the element without its namespace (asked by namespace,
// it is ours), so the element is matched by name only.
func ownedBy(metadata string) (RecordOwner, bool, error) {
	if metadata == "" {
		return RecordOwner{}, false, nil
	}
	var o struct {
		XMLName   xml.Name `xml:"owner"`
		ManagedBy string   `xml:"managedBy"`
		UID       string   `xml:"uid"`
		Namespace string   `xml:"namespace"`
		Name      string   `xml:"name"`
		ClusterID string   `xml:"clusterID"`
	}
	if err := xml.Unmarshal([]byte(metadata), &o); err != nil {
		return RecordOwner{}, false, err
	}
	if o.ManagedBy != domainxml.ManagedBy || o.UID == "" {
		return RecordOwner{}, false, nil
	}
	return RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: o.UID, Namespace: o.Namespace, Name: o.Name, ClusterID: o.ClusterID}, true, nil
}

// pool reads a pool and the sizes of our volumes in it that are not remembered; seen collects
// the memo keys of the volumes it found.
func (hm *hostMemo) pool(ctx context.Context, h Host, name string, now time.Time, recheck time.Duration, seen map[string]bool) (PoolReading, error) {
	var known *golibvirt.StoragePool
	if sp, ok := hm.pools[name]; ok {
		known = &sp
	}
	u, err := h.PoolUsage(ctx, name, known)
	if lv.IsNotFound(err) {
		delete(hm.pools, name)
		return PoolReading{Name: name, Missing: true}, nil
	}
	if err != nil {
		return PoolReading{}, err
	}
	hm.pools[name] = u.Handle
	pr := PoolReading{Name: name, Pool: u.Pool, Volumes: map[string]uint64{}}
	for _, v := range u.Volumes {
		if !OurVolume(v) {
			continue
		}
		k := name + "\x00" + v
		vm, ok := hm.vols[k]
		if !ok || now.Sub(vm.at) >= recheck {
			info, err := h.VolumeInfo(ctx, name, v)
			if lv.IsNotFound(err) {
				continue // deleted since listed
			}
			if err != nil {
				return PoolReading{}, err
			}
			vm = volMemo{bytes: info.AllocationBytes, at: now}
			hm.vols[k] = vm
		}
		seen[k] = true
		pr.Volumes[v] = vm.bytes
	}
	return pr, nil
}

// DerivedDomainName is true for a domain name of the form internal/names derives
// ("<namespace>_<name>"; Kubernetes names never hold '_'). Only such domains can be ours, so
// only their ownership records are read.
func DerivedDomainName(name string) bool {
	ns, n, ok := strings.Cut(name, "_")
	return ok && ns != "" && n != "" && !strings.Contains(n, "_")
}

// OurVolume is true for a volume named as the provider names its volumes: base images and
// their marker, claim and owner records (imagecache), seeds and overlays of a resource
// (internal/names) and their ownership records (internal/ownership).
func OurVolume(name string) bool {
	if strings.HasPrefix(name, imagecache.NamePrefix) {
		return true
	}
	v := strings.TrimSuffix(name, ownership.Suffix)
	if !strings.HasSuffix(v, ".seed.iso") && !strings.HasSuffix(v, ".root.qcow2") {
		return false
	}
	return DerivedDomainName(v)
}
