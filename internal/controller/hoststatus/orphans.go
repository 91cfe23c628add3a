package hoststatus

import (
	"sort"
	"time"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// Orphan decisions: which of the provider's objects on a host are orphans, and which of those
// may be removed now. Pure: the objects, what the cluster holds and what was seen before come
// in; nothing here talks to libvirt or Kubernetes (sweep.go does).

// ObjectKind is the kind of a libvirt object the sweep looks at.
type ObjectKind string

// Kinds of objects.
const (
	KindDomain ObjectKind = "domain"
	KindVolume ObjectKind = "volume"
)

// RecordOwner is the managed resource an object's ownership record names.
type RecordOwner struct {
	// Kind of the managed resource (KVMDomain, SeedVolume); "" when the record does not say
	// (a domain's record is always a KVMDomain's).
	Kind            string
	UID             string
	Namespace, Name string
	// ClusterID is the management cluster the record names; "" for none.
	ClusterID string
}

// Object is one object on a host that carries our ownership record: a domain (its record in
// its metadata) or a volume (its record volume "<name>.owner"; RecordOnly when the volume
// itself is already gone and only its record is left).
type Object struct {
	Kind ObjectKind
	// Pool of a volume.
	Pool string
	// Name of the domain or volume.
	Name string
	// ID tells a domain from a later one of the same name: its UUID.
	ID         string
	Owner      RecordOwner
	RecordOnly bool
}

// key identifies an object and the owner its record names: a new object of the same name, or
// one whose record names another owner, starts its grace period again.
func (o Object) key() string {
	return string(o.Kind) + "\x00" + o.Pool + "\x00" + o.Name + "\x00" + o.ID + "\x00" + o.Owner.UID
}

// Display is how status names the object: "domain NAME" or "volume POOL/NAME".
func (o Object) Display() string {
	if o.Kind == KindDomain {
		return "domain " + o.Name
	}
	return "volume " + o.Pool + "/" + o.Name
}

// Cluster is what the cluster holds, from lists of every managed resource kind in every
// namespace that all succeeded: the UIDs of the managed resources, and their kind, namespace
// and name.
type Cluster struct {
	UIDs  map[string]bool
	Names map[string]bool
}

// ClusterName is the Cluster.Names key of a managed resource.
func ClusterName(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// OrphanFacts is what one orphan decision is made from.
type OrphanFacts struct {
	// Objects on the host that carry our ownership record.
	Objects []Object
	Cluster Cluster
	// ClusterID is the provider's own (--cluster-id): the objects whose record names another
	// cluster are that cluster's to judge, never orphans here.
	ClusterID string
	// Namespace scopes the decision: a ProviderConfig's namespace, whose config sees and
	// removes only orphans whose record names it; "" (a ClusterProviderConfig) for all.
	Namespace string
	// InUse are the volumes ("POOL/NAME") a defined domain's disks use, directly or in their
	// backing chain. Nil when not read: then no volume may be removed.
	InUse map[string]bool
	// Seen is when each orphan (by its key) was first seen an orphan, from the decision before.
	Seen   map[string]time.Time
	Now    time.Time
	Policy v1alpha1.OrphanPolicy
	Grace  time.Duration
}

// OrphanDecision is the outcome: the orphans in scope in name order, those to remove now, and
// when each orphan was first seen (the Seen of the next decision; orphans no longer found are
// forgotten).
type OrphanDecision struct {
	Orphans []Object
	Delete  []Object
	Seen    map[string]time.Time
}

// Status is the decision as status shows it: the count and the first MaxOrphanNames names.
// deleted is the running total of removed orphans.
func (d OrphanDecision) Status(deleted int32) *v1alpha1.HostOrphans {
	s := &v1alpha1.HostOrphans{Count: int32(len(d.Orphans)), Deleted: deleted}
	for i, o := range d.Orphans {
		if i == v1alpha1.MaxOrphanNames {
			break
		}
		s.Names = append(s.Names, o.Display())
	}
	return s
}

// DecideOrphans tells which objects are orphans and which may be removed now. An object is an
// orphan when it is in scope (its record names this provider's cluster, or none) and no
// managed resource has the UID its record names. An orphan
// may be removed only under the Delete policy, after it was seen an orphan for the grace
// period, when no managed resource of the same kind, namespace and name exists (its removal
// would not free the name for a new object nobody asked for: it is left for a person to
// decide), and, for a volume, when the in-use scan was read and names it not.
func DecideOrphans(f OrphanFacts) OrphanDecision {
	d := OrphanDecision{Seen: map[string]time.Time{}}
	for _, o := range f.Objects {
		if o.Owner.UID == "" || f.Cluster.UIDs[o.Owner.UID] || (o.Owner.ClusterID != "" && o.Owner.ClusterID != f.ClusterID) {
			continue
		}
		if f.Namespace != "" && o.Owner.Namespace != f.Namespace {
			continue
		}
		k := o.key()
		first, ok := f.Seen[k]
		if !ok || first.After(f.Now) {
			first = f.Now
		}
		d.Seen[k] = first
		d.Orphans = append(d.Orphans, o)
		if removable(f, o, first) {
			d.Delete = append(d.Delete, o)
		}
	}
	sortObjects(d.Orphans)
	sortObjects(d.Delete)
	return d
}

// removable tells whether orphan o, first seen an orphan at first, may be removed now.
func removable(f OrphanFacts, o Object, first time.Time) bool {
	if f.Policy != v1alpha1.OrphansDelete || f.Now.Sub(first) < f.Grace {
		return false
	}
	kind := o.Owner.Kind
	if kind == "" && o.Kind == KindDomain {
		kind = v1alpha1.KVMDomainKind
	}
	if f.Cluster.Names[ClusterName(kind, o.Owner.Namespace, o.Owner.Name)] {
		return false
	}
	if o.Kind == KindVolume && !o.RecordOnly {
		return f.InUse != nil && !f.InUse[o.Pool+"/"+o.Name]
	}
	return true
}

func sortObjects(os []Object) {
	sort.Slice(os, func(i, j int) bool {
		if a, b := os[i].Display(), os[j].Display(); a != b {
			return a < b
		}
		return os[i].key() < os[j].key()
	})
}
