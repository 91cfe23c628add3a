package hoststatus

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

// elsewhere is o with a record that names management cluster id.
func elsewhere(o Object, id string) Object {
	o.Owner.ClusterID = id
	return o
}

func TestDecideOrphans(t *testing.T) {
	now := time.Unix(10000, 0)
	goneDom := Object{Kind: KindDomain, Name: "team-a_web", ID: "d1", Owner: RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: "gone-1", Namespace: "team-a", Name: "web"}}
	liveDom := Object{Kind: KindDomain, Name: "team-a_db", ID: "d2", Owner: RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: "live-1", Namespace: "team-a", Name: "db"}}
	otherNS := Object{Kind: KindDomain, Name: "team-b_web", ID: "d3", Owner: RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: "gone-2", Namespace: "team-b", Name: "web"}}
	goneVol := Object{Kind: KindVolume, Pool: "default", Name: "team-a_web-11111111.root.qcow2", Owner: RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: "gone-1", Namespace: "team-a", Name: "web"}}
	goneRec := Object{Kind: KindVolume, Pool: "default", Name: "team-a_s-22222222.seed.iso", RecordOnly: true, Owner: RecordOwner{Kind: v1alpha1.SeedVolumeKind, UID: "gone-3", Namespace: "team-a", Name: "s"}}
	renamed := Object{Kind: KindDomain, Name: "team-a_api", ID: "d4", Owner: RecordOwner{Kind: v1alpha1.KVMDomainKind, UID: "gone-4", Namespace: "team-a", Name: "api"}}
	cluster := Cluster{
		UIDs:  map[string]bool{"live-1": true, "live-2": true},
		Names: map[string]bool{ClusterName(v1alpha1.KVMDomainKind, "team-a", "db"): true, ClusterName(v1alpha1.KVMDomainKind, "team-a", "api"): true},
	}
	long := map[string]time.Time{}
	for _, o := range []Object{goneDom, otherNS, goneVol, goneRec, renamed} {
		long[o.key()] = now.Add(-2 * time.Hour)
	}
	type want struct {
		orphans, del []string
	}
	cases := map[string]struct {
		reason string
		f      OrphanFacts
		want   want
	}{
		"Report": {
			reason: "objects whose owner UID no managed resource has are orphans; Report removes nothing",
			f: OrphanFacts{Objects: []Object{liveDom, goneDom, otherNS, goneVol}, Cluster: cluster, Seen: long, Now: now,
				Policy: v1alpha1.OrphansReport, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-a_web", "domain team-b_web", "volume default/team-a_web-11111111.root.qcow2"}},
		},
		"DeleteAfterGrace": {
			reason: "Delete removes orphans seen for the grace period, and a record left without its volume",
			f: OrphanFacts{Objects: []Object{liveDom, goneDom, goneVol, goneRec}, Cluster: cluster, Seen: long, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-a_web", "volume default/team-a_s-22222222.seed.iso", "volume default/team-a_web-11111111.root.qcow2"},
				del: []string{"domain team-a_web", "volume default/team-a_s-22222222.seed.iso", "volume default/team-a_web-11111111.root.qcow2"}},
		},
		"OtherClusters": {
			reason: "objects whose record names another management cluster sharing the host are that cluster's: never orphans here; those of ours, or of none, are",
			f: OrphanFacts{Objects: []Object{elsewhere(goneDom, "cluster-b"), elsewhere(goneVol, "cluster-a"), goneRec}, Cluster: cluster, ClusterID: "cluster-a",
				Seen: long, Now: now, Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"volume default/team-a_s-22222222.seed.iso", "volume default/team-a_web-11111111.root.qcow2"},
				del: []string{"volume default/team-a_s-22222222.seed.iso", "volume default/team-a_web-11111111.root.qcow2"}},
		},
		"NoClusterID": {
			reason: "a provider without a cluster ID leaves every object whose record names a cluster",
			f: OrphanFacts{Objects: []Object{elsewhere(goneDom, "cluster-b"), goneVol}, Cluster: cluster,
				Seen: long, Now: now, Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"volume default/team-a_web-11111111.root.qcow2"}, del: []string{"volume default/team-a_web-11111111.root.qcow2"}},
		},
		"NotBeforeGrace": {
			reason: "an orphan first seen now is not removed before the grace period",
			f: OrphanFacts{Objects: []Object{goneDom}, Cluster: cluster, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-a_web"}},
		},
		"ZeroGrace": {
			reason: "a zero grace period removes an orphan the first time it is seen",
			f: OrphanFacts{Objects: []Object{goneDom}, Cluster: cluster, Now: now,
				Policy: v1alpha1.OrphansDelete, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-a_web"}, del: []string{"domain team-a_web"}},
		},
		"VolumeInUse": {
			reason: "a volume a defined domain uses is never removed",
			f: OrphanFacts{Objects: []Object{goneVol}, Cluster: cluster, Seen: long, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{"default/" + goneVol.Name: true}},
			want: want{orphans: []string{"volume default/team-a_web-11111111.root.qcow2"}},
		},
		"InUseNotRead": {
			reason: "when the in-use scan was not read, no volume is removed (a domain still may be)",
			f: OrphanFacts{Objects: []Object{goneDom, goneVol}, Cluster: cluster, Seen: long, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour},
			want: want{orphans: []string{"domain team-a_web", "volume default/team-a_web-11111111.root.qcow2"}, del: []string{"domain team-a_web"}},
		},
		"NameTaken": {
			reason: "an orphan whose kind, namespace and name a live managed resource has (a new UID) is reported, not removed",
			f: OrphanFacts{Objects: []Object{renamed}, Cluster: cluster, Seen: long, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-a_api"}},
		},
		"Namespaced": {
			reason: "a ProviderConfig sees and removes only orphans of its own namespace",
			f: OrphanFacts{Objects: []Object{goneDom, otherNS}, Cluster: cluster, Namespace: "team-b", Seen: long, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-b_web"}, del: []string{"domain team-b_web"}},
		},
		"NewOwnerRestartsGrace": {
			reason: "an object whose record now names another owner, or a new domain (UUID) of the same name, starts its grace again",
			f: OrphanFacts{Objects: []Object{func() Object { o := goneDom; o.ID = "d9"; return o }()}, Cluster: cluster, Seen: long, Now: now,
				Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}},
			want: want{orphans: []string{"domain team-a_web"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := DecideOrphans(tc.f)
			var g want
			for _, o := range d.Orphans {
				g.orphans = append(g.orphans, o.Display())
			}
			for _, o := range d.Delete {
				g.del = append(g.del, o.Display())
			}
			if diff := cmp.Diff(tc.want, g, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nDecideOrphans(): -want, +got:\n%s", tc.reason, diff)
			}
			// Every orphan is remembered with its first sighting; nothing else is.
			if len(d.Seen) != len(d.Orphans) {
				t.Errorf("%s\nSeen has %d entries for %d orphans", tc.reason, len(d.Seen), len(d.Orphans))
			}
		})
	}
}

// TestOrphanGraceAcrossReads: the first sighting carries from one decision to the next, and an
// orphan that was gone for a read starts again.
func TestOrphanGraceAcrossReads(t *testing.T) {
	o := Object{Kind: KindDomain, Name: "team-a_web", ID: "d1", Owner: RecordOwner{UID: "gone", Namespace: "team-a", Name: "web"}}
	start := time.Unix(0, 0)
	f := OrphanFacts{Cluster: Cluster{UIDs: map[string]bool{}}, Policy: v1alpha1.OrphansDelete, Grace: time.Hour, InUse: map[string]bool{}}
	steps := []struct {
		at      time.Duration
		present bool
		del     int
	}{
		{at: 0, present: true},
		{at: 59 * time.Minute, present: true},
		{at: 61 * time.Minute, present: false},
		{at: 62 * time.Minute, present: true},
		{at: 121 * time.Minute, present: true},
		{at: 122 * time.Minute, present: true, del: 1},
	}
	for i, s := range steps {
		f.Now = start.Add(s.at)
		f.Objects = nil
		if s.present {
			f.Objects = []Object{o}
		}
		d := DecideOrphans(f)
		if len(d.Delete) != s.del {
			t.Errorf("step %d (%v): %d to delete, want %d", i, s.at, len(d.Delete), s.del)
		}
		f.Seen = d.Seen
	}
}

func TestOrphanStatus(t *testing.T) {
	var d OrphanDecision
	for i := range 12 {
		d.Orphans = append(d.Orphans, Object{Kind: KindDomain, Name: fmt.Sprintf("ns_d%02d", i)})
	}
	got := d.Status(3)
	if got.Count != 12 || len(got.Names) != v1alpha1.MaxOrphanNames || got.Names[0] != "domain ns_d00" || got.Deleted != 3 {
		t.Errorf("Status(): %+v", got)
	}
}

func TestUsedVolumes(t *testing.T) {
	disks := []lv.DomainDisk{
		{Domain: "a", Pool: "default", Volume: "x.root.qcow2", Path: "/var/lib/libvirt/images/x.root.qcow2"},
		{Domain: "b", Path: "/var/lib/libvirt/images/y.seed.iso"},
		{Domain: "c", Path: "/var/lib/libvirt/images/base.qcow2", Backing: true},
	}
	paths := map[string]string{
		"default/y.seed.iso":   "/var/lib/libvirt/images/y.seed.iso",
		"default/z.root.qcow2": "/var/lib/libvirt/images/z.root.qcow2",
		"default/base.qcow2":   "/var/lib/libvirt/images/base.qcow2",
	}
	want := map[string]bool{"default/x.root.qcow2": true, "default/y.seed.iso": true, "default/base.qcow2": true}
	if diff := cmp.Diff(want, UsedVolumes(disks, paths)); diff != "" {
		t.Errorf("UsedVolumes(): -want, +got:\n%s", diff)
	}
}

// TestObjectsAndRemove: the sweep's reads find our domains and the volumes whose records are
// valid (a torn record makes no object), and a removal reads the record again first.
func TestObjectsAndRemove(t *testing.T) {
	ctx := context.Background()
	h := newFakeHost()
	const vol = "team-a_web-11111111.root.qcow2"
	rec, err := ownership.Encode(vol, ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: "gone", Namespace: "team-a", Name: "web"}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	h.Put("default", vol, make([]byte, 4096))
	h.Put("default", vol+ownership.Suffix, rec)
	m := NewMemo(time.Now, DefaultRecheck)
	rd, err := m.Read(ctx, h, "h", []string{"default"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := m.Objects(ctx, h, "h", rd)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Display()+" "+o.Owner.UID)
	}
	want := []string{"domain team-a_proxy u1", "domain team-b_db u1", "volume default/" + vol + " gone"}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("Objects(): -want, +got:\n%s", diff)
	}
	// A second look reads only the torn record again (it may be being written), not the
	// valid one.
	before := h.Calls["Download"]
	if _, err := m.Objects(ctx, h, "h", rd); err != nil {
		t.Fatal(err)
	}
	if n := h.Calls["Download"] - before; n != 1 {
		t.Errorf("records downloaded by a second look: %d, want 1 (the torn one)", n)
	}

	// The record now names another owner: the volume stays.
	o := objs[len(objs)-1]
	other := o
	other.Owner.UID = "someone-else"
	if err := removeOrphan(ctx, h, other); err == nil {
		t.Errorf("removeOrphan() with a record naming another owner: no error")
	}
	if _, ok := h.Get("default", vol); !ok {
		t.Errorf("the volume whose record names another owner was deleted")
	}
	if err := removeOrphan(ctx, h, o); err != nil {
		t.Fatalf("removeOrphan(): %v", err)
	}
	for _, n := range []string{vol, vol + ownership.Suffix} {
		if _, ok := h.Get("default", n); ok {
			t.Errorf("%s is left after its removal", n)
		}
	}
	// A domain: stopped when running, then undefined; a domain redefined since (new UUID) stays.
	d := Object{Kind: KindDomain, Name: "team-a_proxy", ID: dom("", 9, false, 0, 0).UUID(), Owner: RecordOwner{UID: "u1"}}
	if err := removeOrphan(ctx, h, d); err == nil {
		t.Errorf("removeOrphan() of a domain redefined since: no error")
	}
	d.ID = dom("", 1, false, 0, 0).UUID()
	h.calls = map[string]int{}
	if err := removeOrphan(ctx, h, d); err != nil {
		t.Fatalf("removeOrphan(domain): %v", err)
	}
	if h.calls["DestroyDomain team-a_proxy"] != 1 || h.calls["UndefineDomain team-a_proxy"] != 1 {
		t.Errorf("calls removing a running orphan domain: %v", h.calls)
	}
}

// TestGraceLiveness: an owner UID of no BaseImage is alive until it was found gone for the
// grace period; a UID missing from the first list is looked for in a fresh one; a list that
// fails is an error, never "gone".
func TestGraceLiveness(t *testing.T) {
	ctx := context.Background()
	start := time.Unix(0, 0)
	lists := 0
	live := map[string]bool{"a": true}
	list := func(context.Context) (map[string]bool, error) {
		lists++
		return maps.Clone(live), nil
	}
	alive, done := GraceLiveness(list, nil, start, time.Hour)
	for _, c := range []struct {
		uid  string
		want bool
	}{{"a", true}, {"gone", true}} {
		if got, err := alive(ctx, c.uid); err != nil || got != c.want {
			t.Errorf("alive(%q) at the first sighting = %v, %v; want %v", c.uid, got, err, c.want)
		}
	}
	first := done()
	if _, ok := first["gone"]; !ok || len(first) != 1 {
		t.Errorf("first sightings: %v, want gone only", first)
	}
	// A BaseImage created after the first list is found in the fresh one.
	live["new"] = true
	alive, _ = GraceLiveness(list, first, start.Add(30*time.Minute), time.Hour)
	if got, _ := alive(ctx, "new"); !got {
		t.Errorf("alive(new) = false for a BaseImage in a fresh list")
	}
	alive, _ = GraceLiveness(list, first, start.Add(time.Hour), time.Hour)
	if got, err := alive(ctx, "gone"); err != nil || got {
		t.Errorf("alive(gone) after the grace period = %v, %v; want false", got, err)
	}
	boom := errors.New("boom")
	alive, _ = GraceLiveness(func(context.Context) (map[string]bool, error) { return nil, boom }, first, start.Add(2*time.Hour), time.Hour)
	if _, err := alive(ctx, "gone"); !errors.Is(err, boom) {
		t.Errorf("alive() with a failing list: error %v, want %v", err, boom)
	}
}

// TestImageSweepsDue: the image sweep of a config runs at most every min(grace, DefaultRecheck).
func TestImageSweepsDue(t *testing.T) {
	s := imageSweeps{last: map[string]time.Time{}, gone: map[string]map[string]time.Time{}}
	start := time.Unix(0, 0)
	var got []bool
	for _, at := range []time.Duration{0, time.Minute, 10 * time.Minute, 11 * time.Minute, 20 * time.Minute} {
		got = append(got, s.due("c", start.Add(at), time.Hour))
	}
	if diff := cmp.Diff([]bool{true, false, true, false, true}, got); diff != "" {
		t.Errorf("due(): -want, +got:\n%s", diff)
	}
}
