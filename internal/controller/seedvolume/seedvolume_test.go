package seedvolume

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

const (
	pool = "default"
	uid  = "0b5e2c4a-1111-2222-3333-444455556666"
	// legacy is the name of the seed's one volume in releases that rewrote it in place.
	legacy = "ns_vm-0b5e2c4a.seed.iso"
	// victim is another namespace's seed volume on the same host.
	victim = "other_web-9f9f9f9f-0123456789abcdef.seed.iso"
)

var (
	us   = ownership.Owner{Kind: v1alpha1.SeedVolumeKind, UID: uid, Namespace: "ns", Name: "vm"}
	them = ownership.Owner{Kind: v1alpha1.SeedVolumeKind, UID: "9f9f9f9f-0000", Namespace: "other", Name: "web"}
)

// cr is a SeedVolume; opts change it.
func cr(opts ...func(*v1alpha1.SeedVolume)) *v1alpha1.SeedVolume {
	ud := "#cloud-config\n"
	sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: uid}}
	sv.Spec.ForProvider.UserData = &ud
	meta.SetExternalName(sv, legacy)
	for _, o := range opts {
		o(sv)
	}
	return sv
}

func deleting(sv *v1alpha1.SeedVolume) { now := metav1.Now(); sv.SetDeletionTimestamp(&now) }
func externalName(n string) func(*v1alpha1.SeedVolume) {
	return func(sv *v1alpha1.SeedVolume) { meta.SetExternalName(sv, n) }
}
func withUserData(u string) func(*v1alpha1.SeedVolume) {
	return func(sv *v1alpha1.SeedVolume) { sv.Spec.ForProvider.UserData = &u }
}
func current(vol string) func(*v1alpha1.SeedVolume) {
	return func(sv *v1alpha1.SeedVolume) { sv.Status.AtProvider.VolumeName = vol }
}
func retired(vols ...string) func(*v1alpha1.SeedVolume) {
	return func(sv *v1alpha1.SeedVolume) { sv.Status.AtProvider.RetiredVolumes = vols }
}

// edited is cr with other user-data: other content.
func edited(opts ...func(*v1alpha1.SeedVolume)) *v1alpha1.SeedVolume {
	return cr(append([]func(*v1alpha1.SeedVolume){withUserData("#cloud-config\nhostname: x\n")}, opts...)...)
}

// iso is the seed sv asks for.
func iso(t *testing.T, sv *v1alpha1.SeedVolume) []byte {
	t.Helper()
	s, err := (&external{}).build(context.Background(), sv.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return s.ISO
}

// volOf is the volume of the content sv asks for.
func volOf(t *testing.T, sv *v1alpha1.SeedVolume) string {
	t.Helper()
	sum := sha256.Sum256(iso(t, sv))
	return names.SeedContent(sv.GetNamespace(), sv.GetName(), string(sv.GetUID()), hex.EncodeToString(sum[:]))
}

func record(t *testing.T, vol string, o ownership.Owner) []byte {
	t.Helper()
	b, err := ownership.Encode(vol, o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vol is one volume of a fake host and, unless noRecord, its ownership record naming owner
// (us when zero).
type vol struct {
	data     []byte
	owner    ownership.Owner
	noRecord bool
}

// hostState is a fake host: volumes by name, domain disks, failures.
type hostState struct {
	vols  map[string]vol
	disks []libvirt.DomainDisk
	fail  func(op, pool, name string) error
}

func (h hostState) storage(t *testing.T) *fakestorage.Storage {
	s := fakestorage.New()
	for n, v := range h.vols {
		if v.data != nil {
			s.Put(pool, n, v.data)
		}
		if !v.noRecord {
			o := v.owner
			if o.UID == "" {
				o = us
			}
			s.Put(pool, ownership.RecordVolume(n), record(t, n, o))
		}
	}
	s.Disks = h.disks
	s.Fail = h.fail
	return s
}

func disk(vol string) libvirt.DomainDisk {
	return libvirt.DomainDisk{Domain: "ns_vm", Target: "sdb", Device: "cdrom", Path: "/pool/" + pool + "/" + vol}
}

// after is what the tests compare: the result, the status and what is left on the host.
type after struct {
	Exists, UpToDate bool
	Err              string // a substring of the error, "" for none
	// Host maps each volume left to a label of its bytes (the label the case gave them,
	// "other" for anything else) and each record left to the UID it names.
	Host    map[string]string
	Current string
	Retired []string
}

func summarize(t *testing.T, s *fakestorage.Storage, labels map[string][]byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range s.Names(pool) {
		b, _ := s.Get(pool, n)
		if v, ok := strings.CutSuffix(n, ownership.Suffix); ok {
			r, err := ownership.Decode(b)
			out[v+" record"] = r.Owner.UID
			if err != nil {
				out[v+" record"] = "torn"
			}
			continue
		}
		out[n] = "other"
		for l, want := range labels {
			if bytes.Equal(b, want) {
				out[n] = l
			}
		}
	}
	return out
}

func newExternal(s *fakestorage.Storage) *external {
	d := v1alpha1.HostDefaults{Pool: pool}
	g, _ := hostgrants.For("ClusterProviderConfig/default", v1alpha1.ProviderConfigSpec{Defaults: d}, hostgrants.Namespace{Name: "ns"}, false)
	return &external{storage: s, defaults: d, grant: g, recorder: event.NewNopRecorder(),
		records: ownership.NewRecords(), checks: newChecks(), host: "root@h:22"}
}

// fixture holds the contents the cases use and their volumes.
type fixture struct {
	old, new, corrupt, victim []byte
	oldVol, newVol            string
	labels                    map[string][]byte
}

func newFixture(t *testing.T) fixture {
	f := fixture{old: iso(t, cr()), new: iso(t, edited()), victim: []byte("victim's seed")}
	f.corrupt = append([]byte{}, f.new...)
	f.corrupt[len(f.corrupt)-1] ^= 0xff
	f.oldVol, f.newVol = volOf(t, cr()), volOf(t, edited())
	f.labels = map[string][]byte{"old": f.old, "new": f.new, "victim": f.victim}
	return f
}

func TestObserve(t *testing.T) {
	f := newFixture(t)
	victimVol := vol{data: f.victim, owner: them}
	cases := map[string]opCase{
		"Absent": {
			reason: "no volume: it does not exist",
			cr:     edited(), want: after{Host: map[string]string{}},
		},
		"Current": {
			reason: "the volume of the wanted content, read back: up to date, and the seed",
			cr:     edited(), host: hostState{vols: map[string]vol{f.newVol: {data: f.new}}},
			want: after{Exists: true, UpToDate: true, Host: map[string]string{f.newVol: "new", f.newVol + " record": uid}, Current: f.newVol},
		},
		"TornNewContent": {
			reason: "a cut upload of the new content needs an update; the earlier content stays the seed",
			cr:     edited(current(f.oldVol)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, f.newVol: {data: f.new[:4096]}}},
			want: after{Exists: true, Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid, f.newVol: "other", f.newVol + " record": uid}, Current: f.oldVol},
		},
		"AlteredOnHost": {
			reason: "the seed's own volume altered on the host needs an update",
			cr:     edited(current(f.newVol)), host: hostState{vols: map[string]vol{f.newVol: {data: f.corrupt}}},
			want: after{Exists: true, Host: map[string]string{f.newVol: "other", f.newVol + " record": uid}, Current: f.newVol},
		},
		"EditNotPublishedYet": {
			reason: "an edit whose content has no volume yet: Update publishes it, the old one serves meanwhile",
			cr:     edited(current(f.oldVol)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}}},
			want: after{Exists: true, Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid}, Current: f.oldVol},
		},
		"EditNotPublishedEmptyStatus": {
			reason: "after a restart with empty status, the earlier volume on the host tells that the seed exists",
			cr:     edited(), host: hostState{vols: map[string]vol{legacy: {data: f.old}}},
			want: after{Exists: true, Host: map[string]string{legacy: "old", legacy + " record": uid}},
		},
		"EditVerifiedRetiresUnused": {
			reason: "once the new content is verified it is the seed, and the unused old volume goes with its record",
			cr:     edited(current(f.oldVol)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, f.newVol: {data: f.new}}},
			want: after{Exists: true, UpToDate: true, Host: map[string]string{f.newVol: "new", f.newVol + " record": uid}, Current: f.newVol},
		},
		"EditVerifiedOldInUse": {
			reason: "an old volume a domain still uses is kept, listed as retired",
			cr:     edited(current(f.oldVol)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, f.newVol: {data: f.new}}, disks: []libvirt.DomainDisk{disk(f.oldVol)}},
			want: after{Exists: true, UpToDate: true, Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid, f.newVol: "new", f.newVol + " record": uid}, Current: f.newVol, Retired: []string{f.oldVol}},
		},
		"RestartFindsEarlierVolumes": {
			reason: "with empty status, the earlier volumes on the host (the one of releases before too) are retired",
			cr:     edited(), host: hostState{vols: map[string]vol{legacy: {data: f.old}, f.oldVol: {data: f.old}, f.newVol: {data: f.new}}, disks: []libvirt.DomainDisk{disk(legacy)}},
			want: after{Exists: true, UpToDate: true, Host: map[string]string{legacy: "old", legacy + " record": uid, f.newVol: "new", f.newVol + " record": uid}, Current: f.newVol, Retired: []string{legacy}},
		},
		"RetiredNameNotOurs": {
			reason: "a retired entry naming another resource's volume (an edited status) is dropped, never acted on",
			cr:     edited(current(f.newVol), retired(victim)), host: hostState{vols: map[string]vol{f.newVol: {data: f.new}, victim: victimVol}},
			want: after{Exists: true, UpToDate: true, Host: map[string]string{f.newVol: "new", f.newVol + " record": uid, victim: "victim", victim + " record": them.UID}, Current: f.newVol},
		},
		"RetiredWithoutOurRecord": {
			reason: "a retired volume of our name whose record names another is kept",
			cr:     edited(current(f.newVol), retired(f.oldVol)), host: hostState{vols: map[string]vol{f.newVol: {data: f.new}, f.oldVol: {data: f.old, owner: them}}},
			want: after{Exists: true, UpToDate: true, Host: map[string]string{f.newVol: "new", f.newVol + " record": uid, f.oldVol: "old", f.oldVol + " record": them.UID}, Current: f.newVol, Retired: []string{f.oldVol}},
		},
		"NoRecord": {
			reason: "a volume of our name without an ownership record is never taken over",
			cr:     edited(), host: hostState{vols: map[string]vol{f.newVol: {data: f.new, noRecord: true}}},
			wantErr: noRecord(f.newVol),
			want:    after{Host: map[string]string{f.newVol: "new"}},
		},
		"ForeignRecord": {
			reason: "a volume whose record names another resource is refused",
			cr:     edited(), host: hostState{vols: map[string]vol{f.newVol: {data: f.new, owner: them}}},
			wantErr: theirs(f.newVol),
			want:    after{Host: map[string]string{f.newVol: "new", f.newVol + " record": them.UID}},
		},
		"ExternalNameOfAnother": {
			reason: "an external name pointing at another namespace's seed is refused before any call",
			cr:     cr(externalName(victim)), host: hostState{vols: map[string]vol{victim: victimVol}},
			wantErr: errors.Errorf(errExternalName, victim, legacy, legacy),
			want:    after{Host: map[string]string{victim: "victim", victim + " record": them.UID}},
		},
		"LookupFails": {
			reason: "a failed lookup is an error",
			cr:     cr(), host: hostState{fail: func(string, string, string) error { return context.DeadlineExceeded }},
			wantErr: errors.Wrap(context.DeadlineExceeded, errLookup), want: after{Host: map[string]string{}},
		},
		"DeletingOurs": {
			reason: "while deleting, our volumes exist so that Delete removes them",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}}},
			want: after{Exists: true, Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid}},
		},
		"DeletingRecordOnly": {
			reason: "while deleting, a record left by a cut create still exists",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {}}},
			want: after{Exists: true, Host: map[string]string{f.oldVol + " record": uid}},
		},
		"DeletingForeign": {
			reason: "while deleting, a volume not ours is reported absent and left alone",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old, noRecord: true}}},
			want: after{Host: map[string]string{f.oldVol: "old"}},
		},
		"DeletingWithForeignExternalName": {
			reason: "while deleting, a changed external name is ignored: the derived volumes go",
			cr:     cr(deleting, externalName(victim)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, victim: victimVol}},
			want: after{Exists: true, Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid, victim: "victim", victim + " record": them.UID}},
		},
	}
	runCases(t, "Observe", cases, f.labels, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		return e.Observe(context.Background(), cr)
	})
}

func TestCreate(t *testing.T) {
	f := newFixture(t)
	cases := map[string]opCase{
		"Fresh": {
			reason: "the record, then the volume of the content with the seed",
			cr:     edited(), want: after{Host: map[string]string{f.newVol: "new", f.newVol + " record": uid}},
		},
		"RecordLeftByCutCreate": {
			reason: "a create cut after the record goes on",
			cr:     edited(), host: hostState{vols: map[string]vol{f.newVol: {}}},
			want: after{Host: map[string]string{f.newVol: "new", f.newVol + " record": uid}},
		},
		"ForeignRecord": {
			reason: "another's record at our name stops the create",
			cr:     edited(), host: hostState{vols: map[string]vol{f.newVol: {owner: them}}},
			wantErr: errors.Wrap(theirs(f.newVol), errCreate), want: after{Host: map[string]string{f.newVol + " record": them.UID}},
		},
		"ExternalNameOfAnother": {
			reason: "an external name of another's volume creates nothing and touches nothing",
			cr:     cr(externalName(victim)), host: hostState{vols: map[string]vol{victim: {data: f.victim, owner: them}}},
			wantErr: errors.Errorf(errExternalName, victim, legacy, legacy), want: after{Host: map[string]string{victim: "victim", victim + " record": them.UID}},
		},
		"CreateFails": {
			reason: "a failed volume create is an error (the record stays, ours)",
			cr:     edited(), host: hostState{fail: func(op, _, n string) error {
				if op == "CreateVolume" && n == f.newVol {
					return context.DeadlineExceeded
				}
				return nil
			}},
			wantErr: errors.Wrap(context.DeadlineExceeded, errCreate), want: after{Host: map[string]string{f.newVol + " record": uid}},
		},
		"UploadFails": {
			reason: "a failed upload is an error; the next Observe reads back what it left",
			cr:     edited(), host: hostState{fail: func(op, _, n string) error {
				if op == "Upload" && n == f.newVol {
					return context.DeadlineExceeded
				}
				return nil
			}},
			wantErr: errors.Wrap(context.DeadlineExceeded, errUpload), want: after{Host: map[string]string{f.newVol: "other", f.newVol + " record": uid}},
		},
		"SecretMissing": {
			reason: "bad input creates nothing on the host",
			cr: cr(func(sv *v1alpha1.SeedVolume) {
				sv.Spec.ForProvider.UserData = nil
				sv.Spec.ForProvider.UserDataSecretRef = &v1alpha1.LocalSecretKeySelector{Name: "s", Key: "k"}
			}),
			errSub: "cannot read user-data", want: after{Err: "cannot read user-data", Host: map[string]string{}},
		},
	}
	runCases(t, "Create", cases, f.labels, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		_, err := e.Create(context.Background(), cr)
		return managed.ExternalObservation{}, err
	})
}

func TestUpdate(t *testing.T) {
	f := newFixture(t)
	inUse := []libvirt.DomainDisk{disk(f.oldVol)}
	cases := map[string]opCase{
		"NewContentNewVolume": {
			reason: "an edit is published as a new volume; the one a guest reads is never written",
			cr:     edited(current(f.oldVol)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}}, disks: inUse},
			want: after{Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid, f.newVol: "new", f.newVol + " record": uid}, Current: f.oldVol},
		},
		"ShrinkingSeed": {
			reason: "a seed that shrinks is a new volume of its own size, not a shrink of the old",
			cr:     cr(current(f.newVol)), host: hostState{vols: map[string]vol{f.newVol: {data: f.new}}},
			want: after{Host: map[string]string{f.newVol: "new", f.newVol + " record": uid, f.oldVol: "old", f.oldVol + " record": uid}, Current: f.newVol},
		},
		"TornNewVolume": {
			reason: "a torn volume of the new content that no domain uses is written again",
			cr:     edited(current(f.oldVol)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, f.newVol: {data: f.new[:100]}}, disks: inUse},
			want: after{Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid, f.newVol: "new", f.newVol + " record": uid}, Current: f.oldVol},
		},
		"AlteredInUse": {
			reason: "a volume a domain uses is never rewritten, even when it does not hold its content",
			cr:     edited(current(f.newVol)), host: hostState{vols: map[string]vol{f.newVol: {data: f.corrupt}}, disks: []libvirt.DomainDisk{disk(f.newVol)}},
			errSub: "never rewritten while a domain uses it", want: after{Err: "never rewritten while a domain uses it", Host: map[string]string{f.newVol: "other", f.newVol + " record": uid}, Current: f.newVol},
		},
		"TornWithoutOurRecord": {
			reason: "a volume of the new content's name without our record is never rewritten",
			cr:     edited(), host: hostState{vols: map[string]vol{f.newVol: {data: f.corrupt, noRecord: true}}},
			wantErr: noRecord(f.newVol), want: after{Host: map[string]string{f.newVol: "other"}},
		},
		"ExternalNameOfAnother": {
			reason: "an external name of another's volume writes nothing",
			cr:     edited(externalName(victim)), host: hostState{vols: map[string]vol{victim: {data: f.victim, owner: them}}},
			wantErr: errors.Errorf(errExternalName, victim, legacy, legacy), want: after{Host: map[string]string{victim: "victim", victim + " record": them.UID}},
		},
	}
	runCases(t, "Update", cases, f.labels, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		_, err := e.Update(context.Background(), cr)
		return managed.ExternalObservation{}, err
	})
}

func TestDelete(t *testing.T) {
	f := newFixture(t)
	cases := map[string]opCase{
		"EveryContent": {
			reason: "every volume of the seed (each content's, the one of releases before) goes with its record",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, f.newVol: {data: f.new}, legacy: {data: f.old}}},
			want: after{Host: map[string]string{}},
		},
		"Attached": {
			reason: "a volume a domain uses is never deleted",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}}, disks: []libvirt.DomainDisk{disk(f.oldVol)}},
			errSub: "attached to domain ns_vm", want: after{Err: "attached to domain ns_vm", Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid}},
		},
		"RecordOnly": {
			reason: "a record without its volume goes",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {}}}, want: after{Host: map[string]string{}},
		},
		"NoRecord": {
			reason: "a volume without our record is never deleted: the resource goes, the volume stays",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old, noRecord: true}}},
			want: after{Host: map[string]string{f.oldVol: "old"}},
		},
		"ExternalNameOfAnother": {
			reason: "the derived volumes go, never the one the external name names",
			cr:     cr(deleting, externalName(victim)), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}, victim: {data: f.victim, owner: them}}},
			want: after{Host: map[string]string{victim: "victim", victim + " record": them.UID}},
		},
		"DisksFail": {
			reason: "when the users cannot be listed nothing is deleted",
			cr:     cr(deleting), host: hostState{vols: map[string]vol{f.oldVol: {data: f.old}}, fail: func(op, _, _ string) error {
				if op == "DomainDisks" {
					return context.DeadlineExceeded
				}
				return nil
			}},
			wantErr: errors.Wrap(context.DeadlineExceeded, errUsers), want: after{Host: map[string]string{f.oldVol: "old", f.oldVol + " record": uid}},
		},
	}
	runCases(t, "Delete", cases, f.labels, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		_, err := e.Delete(context.Background(), cr)
		return managed.ExternalObservation{}, err
	})
}

// noRecord and theirs are the ownership package's refusals of a volume without a record and
// of one whose record names them.
func noRecord(vol string) error {
	return &ownership.NotOwnedError{Volume: vol, Why: "it carries no ownership record"}
}
func theirs(vol string) error {
	return &ownership.NotOwnedError{Volume: vol, Why: "it belongs to " + them.String()}
}

// opCase is one table case of an external client method.
type opCase struct {
	reason string
	cr     *v1alpha1.SeedVolume
	host   hostState
	// wantErr is the error, compared with test.EquateErrors (so a wrong wrap fails); a case
	// whose error is built from values the case cannot see gives a substring in errSub and
	// want.Err instead.
	wantErr error
	errSub  string
	want    after
}

// runCases runs call on a fresh fake host for each case and compares the result, the status
// and what is left on the host with the case's want.
func runCases(t *testing.T, op string, cases map[string]opCase, labels map[string][]byte,
	call func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error)) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.host.storage(t)
			e := newExternal(s)
			e.kube = noSecrets{}
			sv := tc.cr.DeepCopy()
			o, err := call(e, sv)
			s.Fail = nil
			got := after{Exists: o.ResourceExists, UpToDate: o.ResourceUpToDate, Host: summarize(t, s, labels),
				Current: sv.Status.AtProvider.VolumeName, Retired: sv.Status.AtProvider.RetiredVolumes}
			if tc.wantErr != nil || err == nil {
				if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
					t.Errorf("%s\n%s(): -want error, +got error:\n%s", tc.reason, op, diff)
				}
			} else {
				got.Err = err.Error()
				if tc.errSub != "" && strings.Contains(got.Err, tc.errSub) {
					got.Err = tc.errSub
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\n%s(): -want, +got:\n%s\nerr: %v", tc.reason, op, diff, err)
			}
		})
	}
}

// noSecrets is a client.Reader that finds nothing.
type noSecrets struct{ client.Reader }

func (noSecrets) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return kerrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
}

// TestObserveFingerprint: after one read back, a steady-state Observe costs two cheap calls
// and no download; a truncated or refilled seed changes its fingerprint and is read again at
// the next poll; one altered in place without a change of size is read again after the
// recheck period.
func TestObserveFingerprint(t *testing.T) {
	type want struct {
		UpToDate  bool
		Downloads int
		Calls     int // Volume, VolumeInfo and Download calls
	}
	cases := map[string]struct {
		reason string
		change func(s *fakestorage.Storage, e *external, good []byte)
		want   want
	}{
		"Unchanged": {
			reason: "nothing changed: two VolumeInfo calls, no download",
			change: func(*fakestorage.Storage, *external, []byte) {},
			want:   want{UpToDate: true, Calls: 2},
		},
		"Truncated": {
			reason: "a truncated seed is seen at once",
			change: func(s *fakestorage.Storage, _ *external, good []byte) { s.Put(pool, volOf(t, cr()), good[:4096]) },
			want:   want{UpToDate: false, Calls: 3},
		},
		"AlteredSameSize": {
			reason: "a seed altered in place is trusted on its fingerprint until the recheck period",
			change: func(s *fakestorage.Storage, _ *external, good []byte) {
				bad := append([]byte{}, good...)
				bad[len(bad)-1] ^= 0xff
				s.Put(pool, volOf(t, cr()), bad)
			},
			want: want{UpToDate: true, Calls: 2},
		},
		"AlteredSameSizeRecheck": {
			reason: "after the recheck period it is read and found altered",
			change: func(s *fakestorage.Storage, e *external, good []byte) {
				bad := append([]byte{}, good...)
				bad[len(bad)-1] ^= 0xff
				s.Put(pool, volOf(t, cr()), bad)
				later := time.Now().Add(2 * DefaultRecheck)
				e.checks.now = func() time.Time { return later }
			},
			want: want{UpToDate: false, Downloads: 1, Calls: 4},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			good := iso(t, cr())
			s := hostState{vols: map[string]vol{volOf(t, cr()): {data: good}}}.storage(t)
			e := newExternal(s)
			if o, err := e.Observe(context.Background(), cr()); err != nil || !o.ResourceUpToDate {
				t.Fatalf("first Observe: %+v, %v", o, err)
			}
			tc.change(s, e, good)
			calls := func() int { return s.Calls["Volume"] + s.Calls["VolumeInfo"] + s.Calls["Download"] }
			c0, d0 := calls(), s.Calls["Download"]
			o, err := e.Observe(context.Background(), cr())
			if err != nil {
				t.Fatal(err)
			}
			got := want{UpToDate: o.ResourceUpToDate, Downloads: s.Calls["Download"] - d0, Calls: calls() - c0}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
