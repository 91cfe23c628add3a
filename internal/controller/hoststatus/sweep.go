package hoststatus

import (
	"context"
	"fmt"
	"strings"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

// The orphan sweep: after a successful status read, the host's objects that carry our
// ownership record are compared, by UID, with the managed resources of every namespace. The
// decision is DecideOrphans (orphans.go); this file reads and removes.

// Event reasons of the sweep.
const (
	ReasonOrphans        event.Reason = "Orphans"
	ReasonOrphanRemoved  event.Reason = "OrphanRemoved"
	ReasonOrphanSweepErr event.Reason = "OrphanSweepFailed"
)

// SweepHost is what the orphan sweep asks of a host beyond a status read; *libvirt.Client is
// one.
type SweepHost interface {
	ownership.RecordReader
	DomainDisks(ctx context.Context) ([]lv.DomainDisk, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	Domain(ctx context.Context, name string) (lv.DomainInfo, error)
	DestroyDomain(ctx context.Context, name string) error
	UndefineDomain(ctx context.Context, name string) error
}

// configLabel names a config in metrics and the sweep's memory.
func configLabel(kind, namespace, name string) string {
	if namespace == "" {
		return kind + "/" + name
	}
	return kind + "/" + namespace + "/" + name
}

// seen returns when each orphan of config was first seen one.
func (m *Memo) seen(config string) map[string]time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.orphans[config]
}

// setSeen remembers the first sightings of config's orphans.
func (m *Memo) setSeen(config string, s map[string]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.orphans[config] = s
}

// Objects are the objects of the host at address that carry our ownership record: the
// domains of r whose record Read found, and the volumes of the pools r read that have a
// record volume ("<volume>.owner") naming them. Each record volume is read once (one
// lookup and one download) while it exists; a torn record, or one about another volume, makes
// no object (it is never touched).
func (m *Memo) Objects(ctx context.Context, h SweepHost, address string, r Reading) ([]Object, error) {
	hm := m.host(address)
	defer hm.mu.Unlock()
	var out []Object
	for _, d := range r.Domains {
		if o, ok := r.Owners[d.UUID()]; ok && r.Ours[d.UUID()] {
			out = append(out, Object{Kind: KindDomain, Name: d.Name(), ID: d.UUID(), Owner: o})
		}
	}
	seen := map[string]bool{}
	for _, p := range r.Pools {
		for name := range p.Volumes {
			vol, ok := recordVolumeOf(name)
			if !ok {
				continue
			}
			k := p.Name + "\x00" + name
			o, ok := hm.records[k]
			if !ok {
				rec, found, err := ownership.ReadRecord(ctx, h, p.Name, vol)
				switch {
				case ownership.IsHostError(err) && !lv.IsNotFound(err):
					return nil, errors.Wrapf(err, "cannot read the ownership record of volume %s/%s", p.Name, vol)
				case !found, err != nil, rec.Volume != vol:
					continue
				}
				o = RecordOwner{Kind: rec.Owner.Kind, UID: rec.Owner.UID, Namespace: rec.Owner.Namespace, Name: rec.Owner.Name, ClusterID: rec.Owner.ClusterID}
				hm.records[k] = o
			}
			seen[k] = true
			_, exists := p.Volumes[vol]
			out = append(out, Object{Kind: KindVolume, Pool: p.Name, Name: vol, Owner: o, RecordOnly: !exists})
		}
	}
	for k := range hm.records {
		if !seen[k] {
			delete(hm.records, k)
		}
	}
	return out, nil
}

// recordVolumeOf returns the volume a seed's or overlay's ownership record volume is about.
func recordVolumeOf(name string) (string, bool) {
	vol, ok := strings.CutSuffix(name, ownership.Suffix)
	if !ok || strings.HasPrefix(name, imagecache.NamePrefix) || !OurVolume(name) {
		return "", false
	}
	return vol, true
}

// listCluster reads the UIDs, kinds, namespaces and names of every managed resource in every
// namespace. Any list that fails fails it: a list that could not be read is never taken for
// an empty one.
func listCluster(ctx context.Context, kube client.Reader) (Cluster, error) {
	c := Cluster{UIDs: map[string]bool{}, Names: map[string]bool{}}
	add := func(kind string, o client.Object) {
		c.UIDs[string(o.GetUID())] = true
		c.Names[ClusterName(kind, o.GetNamespace(), o.GetName())] = true
	}
	kds, svs, bis := &v1alpha1.KVMDomainList{}, &v1alpha1.SeedVolumeList{}, &v1alpha1.BaseImageList{}
	for _, l := range []client.ObjectList{kds, svs, bis} {
		if err := kube.List(ctx, l); err != nil {
			return Cluster{}, errors.Wrapf(err, "cannot list %T", l)
		}
	}
	for i := range kds.Items {
		add(v1alpha1.KVMDomainKind, &kds.Items[i])
	}
	for i := range svs.Items {
		add(v1alpha1.SeedVolumeKind, &svs.Items[i])
	}
	for i := range bis.Items {
		add(v1alpha1.BaseImageKind, &bis.Items[i])
	}
	return c, nil
}

// UsedVolumes are the volumes ("POOL/NAME") that disks use, by their pool and volume or, for
// the volumes of paths ("POOL/NAME" to its path on the host), by their file.
func UsedVolumes(disks []lv.DomainDisk, paths map[string]string) map[string]bool {
	byPath := make(map[string]string, len(paths))
	for v, p := range paths {
		if p != "" {
			byPath[p] = v
		}
	}
	used := map[string]bool{}
	for _, d := range disks {
		if d.Pool != "" && d.Volume != "" {
			used[d.Pool+"/"+d.Volume] = true
		}
		if v, ok := byPath[d.Path]; ok && d.Path != "" {
			used[v] = true
		}
	}
	return used
}

// inUse reads which of the volumes of d.Delete a defined domain uses: one DomainDisks (every
// domain's XML) and one lookup per volume. A volume that cannot be looked up is taken for
// used.
func inUse(ctx context.Context, h SweepHost, del []Object) (map[string]bool, error) {
	paths := map[string]string{}
	var unknown []string
	for _, o := range del {
		if o.Kind != KindVolume || o.RecordOnly {
			continue
		}
		v, err := h.Volume(ctx, o.Pool, o.Name)
		if err != nil {
			unknown = append(unknown, o.Pool+"/"+o.Name)
			continue
		}
		paths[o.Pool+"/"+o.Name] = v.Path
	}
	disks, err := h.DomainDisks(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "cannot read the disks of the host's domains")
	}
	used := UsedVolumes(disks, paths)
	for _, v := range unknown {
		used[v] = true
	}
	return used, nil
}

// Sweep decides which of the host's objects are orphans for the config (its namespace scopes
// what it sees), removes those the decision allows, and returns the status of the orphans and
// the number removed. prev is the status of the last read: it is kept, as it is, when the
// cluster or the host's records cannot be read (no decision is made on what was not read).
//
// images makes the image cache of the host (nil: no image sweep); a ClusterProviderConfig
// with orphans: Delete sweeps cached base images with it (sweepImages).
func (r *Reconciler) sweep(ctx context.Context, obj client.Object, spec *v1alpha1.ProviderConfigSpec, h Host, images func(imagecache.Liveness) ImageSweeper, addr string, rd Reading, prev *v1alpha1.HostOrphans) *v1alpha1.HostOrphans {
	cfg := configLabel(r.ops.kind, obj.GetNamespace(), obj.GetName())
	cl, err := listCluster(ctx, r.kube)
	if err != nil {
		r.log.Debug("Cannot list managed resources: no orphan decision", "config", cfg, "error", err)
		return prev.DeepCopy()
	}
	objs, err := r.memo.Objects(ctx, h, addr, rd)
	if err != nil {
		r.record.Event(obj, event.Warning(ReasonOrphanSweepErr, errors.Wrap(err, "cannot look for orphans")))
		return prev.DeepCopy()
	}
	policy := spec.Orphans
	if policy == "" {
		policy = v1alpha1.OrphansReport
	}
	f := OrphanFacts{Objects: objs, Cluster: cl, ClusterID: r.clusterID, Namespace: obj.GetNamespace(), Seen: r.memo.seen(cfg),
		Now: r.memo.now(), Policy: policy, Grace: spec.OrphanGrace(), InUse: map[string]bool{}}
	d := DecideOrphans(f)
	if needsScan(d.Delete) {
		// Only now is the in-use scan worth its cost: some volume would go.
		used, err := inUse(ctx, h, d.Delete)
		if err != nil {
			r.record.Event(obj, event.Warning(ReasonOrphanSweepErr, errors.Wrap(err, "no orphan volume is removed")))
		}
		f.InUse = used // nil on error: no volume is removed
		d = DecideOrphans(f)
	}
	r.memo.setSeen(cfg, d.Seen)

	removed := r.removeAll(ctx, obj, h, d.Delete)
	imagesRemoved := 0
	if policy == v1alpha1.OrphansDelete && obj.GetNamespace() == "" {
		imagesRemoved = r.sweepImages(ctx, obj, cfg, f.Grace, images, rd)
	}
	left := OrphanDecision{}
	for _, o := range d.Orphans {
		if !removed[o] {
			left.Orphans = append(left.Orphans, o)
		}
	}
	var deleted int32
	if prev != nil {
		deleted = prev.Deleted
	}
	st := left.Status(deleted + int32(len(removed)+imagesRemoved))
	metrics.Orphans(cfg, int(st.Count))
	metrics.OrphansDeleted(cfg, len(removed)+imagesRemoved)
	if st.Count > 0 && (prev == nil || st.Count > prev.Count) {
		r.record.Event(obj, event.Warning(ReasonOrphans, errors.Errorf("%d orphan(s) on the host, objects with the provider's ownership record whose managed resource no longer exists (spec.orphans: %s): %s",
			st.Count, policy, strings.Join(st.Names, ", "))))
	}
	return st
}

// removeAll removes the orphans del, each once the API server confirms its owner is gone,
// with an event each, and returns those it removed.
func (r *Reconciler) removeAll(ctx context.Context, obj client.Object, h SweepHost, del []Object) map[Object]bool {
	removed := map[Object]bool{}
	for _, o := range del {
		err := confirmGone(ctx, r.api, o)
		if err == nil {
			err = removeOrphan(ctx, h, o)
		}
		if err != nil {
			r.record.Event(obj, event.Warning(ReasonOrphanSweepErr, errors.Wrapf(err, "cannot remove orphan %s", o.Display())))
			continue
		}
		removed[o] = true
		r.record.Event(obj, event.Normal(ReasonOrphanRemoved, fmt.Sprintf("Removed orphan %s: its %s %s/%s (UID %s) no longer exists",
			o.Display(), kindOf(o), o.Owner.Namespace, o.Owner.Name, o.Owner.UID)))
	}
	return removed
}

// confirmGone asks the API server, past the cache the decision's lists came from, whether
// the managed resource o's record names is gone: no error only when no resource of its kind,
// namespace and name exists.
func confirmGone(ctx context.Context, api client.Reader, o Object) error {
	var obj client.Object
	switch kindOf(o) {
	case v1alpha1.KVMDomainKind:
		obj = &v1alpha1.KVMDomain{}
	case v1alpha1.SeedVolumeKind:
		obj = &v1alpha1.SeedVolume{}
	case v1alpha1.BaseImageKind:
		obj = &v1alpha1.BaseImage{}
	default:
		return errors.Errorf("its record names a %s, which the sweep does not know: left alone", kindOf(o))
	}
	err := api.Get(ctx, client.ObjectKey{Namespace: o.Owner.Namespace, Name: o.Owner.Name}, obj)
	switch {
	case kerrors.IsNotFound(err):
		return nil
	case err != nil:
		return errors.Wrapf(err, "cannot tell whether %s %s/%s exists: left alone", kindOf(o), o.Owner.Namespace, o.Owner.Name)
	case string(obj.GetUID()) == o.Owner.UID:
		return errors.Errorf("its %s %s/%s exists: left alone", kindOf(o), o.Owner.Namespace, o.Owner.Name)
	}
	return errors.Errorf("a new %s %s/%s exists: left alone", kindOf(o), o.Owner.Namespace, o.Owner.Name)
}

// needsScan is true when a volume (not only its record) is among del.
func needsScan(del []Object) bool {
	for _, o := range del {
		if o.Kind == KindVolume && !o.RecordOnly {
			return true
		}
	}
	return false
}

// kindOf is the kind of the managed resource o's record names.
func kindOf(o Object) string {
	if o.Owner.Kind != "" {
		return o.Owner.Kind
	}
	return v1alpha1.KVMDomainKind
}

// removeOrphan removes o after reading its record again: a domain is stopped (if running) and
// undefined, when it is still the domain (UUID) whose record named the owner; a volume is
// deleted and then its record, when the record still names the owner. What is already gone
// is no error.
func removeOrphan(ctx context.Context, h SweepHost, o Object) error {
	if o.Kind == KindDomain {
		return removeDomain(ctx, h, o)
	}
	rec, found, err := ownership.ReadRecord(ctx, h, o.Pool, o.Name)
	switch {
	case err != nil:
		return err
	case !found:
		return nil
	case rec.Volume != o.Name || rec.Owner.UID != o.Owner.UID:
		return errors.Errorf("its ownership record now names %s: left alone", rec.Owner)
	}
	if o.RecordOnly {
		if _, err := h.Volume(ctx, o.Pool, o.Name); !lv.IsNotFound(err) {
			return errors.New("its volume exists again or cannot be looked up: left alone")
		}
	} else if err := h.DeleteVolume(ctx, o.Pool, o.Name); err != nil && !lv.IsNotFound(err) {
		return err
	}
	if err := h.DeleteVolume(ctx, o.Pool, ownership.RecordVolume(o.Name)); err != nil && !lv.IsNotFound(err) {
		return err
	}
	return nil
}

func removeDomain(ctx context.Context, h SweepHost, o Object) error {
	d, err := h.Domain(ctx, o.Name)
	if lv.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if d.UUID != o.ID {
		return errors.New("a new domain of that name was defined since: left alone")
	}
	ow, err := domainxml.OwnerOf(d.XML)
	if err != nil {
		return err
	}
	if ow == nil || ow.ManagedBy != domainxml.ManagedBy || ow.UID != o.Owner.UID {
		return errors.New("its ownership record changed since: left alone")
	}
	if d.State != lv.StateShutOff {
		if err := h.DestroyDomain(ctx, o.Name); err != nil && !lv.IsNotFound(err) {
			return err
		}
	}
	if err := h.UndefineDomain(ctx, o.Name); err != nil && !lv.IsNotFound(err) {
		return err
	}
	return nil
}
