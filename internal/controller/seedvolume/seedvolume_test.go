package seedvolume

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

const (
	pool    = "default"
	volName = "ns_vm-0b5e2c4a.seed.iso"
	uid     = "0b5e2c4a-1111-2222-3333-444455556666"
	// victim is another namespace's seed volume on the same host.
	victim = "other_web-9f9f9f9f.seed.iso"
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
	meta.SetExternalName(sv, volName)
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

// iso is the seed cr asks for.
func iso(t *testing.T, sv *v1alpha1.SeedVolume) []byte {
	t.Helper()
	s, err := (&external{}).build(context.Background(), sv.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return s.ISO
}

func record(t *testing.T, vol string, o ownership.Owner) []byte {
	t.Helper()
	b, err := ownership.Encode(vol, o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// host is a fake host's state: the seed, its record, a victim's seed and record.
type hostState struct {
	seed, seedRecord, victimSeed []byte
	disks                        []libvirt.DomainDisk
	fail                         func(op, pool, name string) error
}

func (h hostState) storage(t *testing.T) *fakestorage.Storage {
	s := fakestorage.New()
	if h.seed != nil {
		s.Put(pool, volName, h.seed)
	}
	if h.seedRecord != nil {
		s.Put(pool, ownership.RecordVolume(volName), h.seedRecord)
	}
	if h.victimSeed != nil {
		s.Put(pool, victim, h.victimSeed)
		s.Put(pool, ownership.RecordVolume(victim), record(t, victim, them))
	}
	s.Disks = h.disks
	s.Fail = h.fail
	return s
}

// after is what the tests compare: the result and what is left on the host.
type after struct {
	Exists, UpToDate bool
	Err              string // a substring of the error, "" for none
	Seed             string // "want" (the ISO cr asks for), "other" (anything else), "" (absent)
	Record           string // the UID the record names, "" when absent
	VictimSeed       string // "untouched", "changed", or "" when absent
}

func observeOf(t *testing.T, s *fakestorage.Storage, want, victimBefore []byte, err error, errSub string) after {
	t.Helper()
	a := after{}
	if err != nil {
		a.Err = err.Error()
		if errSub != "" && strings.Contains(a.Err, errSub) {
			a.Err = errSub
		}
	}
	if b, ok := s.Get(pool, volName); ok {
		a.Seed = "other"
		if bytes.Equal(b, want) {
			a.Seed = "want"
		}
	}
	if b, ok := s.Get(pool, ownership.RecordVolume(volName)); ok {
		if r, err := ownership.Decode(b); err == nil {
			a.Record = r.Owner.UID
		} else {
			a.Record = "torn"
		}
	}
	if b, ok := s.Get(pool, victim); ok {
		a.VictimSeed = "changed"
		if bytes.Equal(b, victimBefore) {
			a.VictimSeed = "untouched"
		}
	}
	return a
}

func newExternal(s *fakestorage.Storage) *external {
	return &external{storage: s, defaults: v1alpha1.HostDefaults{Pool: pool}, recorder: event.NewNopRecorder(),
		records: ownership.NewRecords(), checks: newChecks(), host: "root@h:22"}
}

func TestObserve(t *testing.T) {
	want := iso(t, cr())
	corrupt := append([]byte{}, want...)
	corrupt[len(corrupt)-1] ^= 0xff
	ours := record(t, volName, us)
	victimISO := []byte("victim's seed")

	cases := map[string]opCase{
		"Absent": {
			reason: "no volume: it does not exist",
			cr:     cr(), want: after{},
		},
		"Identical": {
			reason: "our volume with the wanted bytes is up to date",
			cr:     cr(), host: hostState{seed: want, seedRecord: ours},
			want: after{Exists: true, UpToDate: true, Seed: "want", Record: uid},
		},
		"SameSizeOtherBytes": {
			reason: "a corrupted seed of the right size needs an update",
			cr:     cr(), host: hostState{seed: corrupt, seedRecord: ours},
			want: after{Exists: true, Seed: "other", Record: uid},
		},
		"Truncated": {
			reason: "a truncated seed needs an update",
			cr:     cr(), host: hostState{seed: want[:4096], seedRecord: ours},
			want: after{Exists: true, Seed: "other", Record: uid},
		},
		"NoRecord": {
			reason: "a volume of our name without an ownership record is never taken over",
			cr:     cr(), host: hostState{seed: want},
			errSub: "carries no ownership record",
			want:   after{Err: "carries no ownership record", Seed: "want"},
		},
		"ForeignRecord": {
			reason: "a volume whose record names another resource is refused",
			cr:     cr(), host: hostState{seed: want, seedRecord: record(t, volName, them)},
			errSub: "it belongs to SeedVolume other/web",
			want:   after{Err: "it belongs to SeedVolume other/web", Seed: "want", Record: them.UID},
		},
		"ExternalNameOfAnother": {
			reason: "an external name pointing at another namespace's seed is refused before any call",
			cr:     cr(externalName(victim)), host: hostState{victimSeed: victimISO},
			errSub: "is not the name of this SeedVolume's volume",
			want:   after{Err: "is not the name of this SeedVolume's volume", VictimSeed: "untouched"},
		},
		"LookupFails": {
			reason: "a failed lookup is an error",
			cr:     cr(), host: hostState{fail: func(op, _, _ string) error { return context.DeadlineExceeded }},
			errSub: errLookup, want: after{Err: errLookup},
		},
		"DeletingOurs": {
			reason: "while deleting, our volume exists so that Delete removes it",
			cr:     cr(deleting), host: hostState{seed: want, seedRecord: ours},
			want: after{Exists: true, Seed: "want", Record: uid},
		},
		"DeletingRecordOnly": {
			reason: "while deleting, a record left by a cut create still exists",
			cr:     cr(deleting), host: hostState{seedRecord: ours},
			want: after{Exists: true, Record: uid},
		},
		"DeletingForeign": {
			reason: "while deleting, a volume not ours is reported absent and left alone",
			cr:     cr(deleting), host: hostState{seed: want},
			want: after{Seed: "want"},
		},
		"DeletingWithForeignExternalName": {
			reason: "while deleting, a changed external name is ignored: the derived volume goes",
			cr:     cr(deleting, externalName(victim)), host: hostState{seed: want, seedRecord: ours, victimSeed: victimISO},
			want: after{Exists: true, Seed: "want", Record: uid, VictimSeed: "untouched"},
		},
	}
	runCases(t, "Observe", cases, want, victimISO, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		return e.Observe(context.Background(), cr)
	})
}

func TestCreate(t *testing.T) {
	want := iso(t, cr())
	victimISO := []byte("victim's seed")
	cases := map[string]opCase{
		"Fresh": {
			reason: "the record, then the volume with the seed",
			cr:     cr(), want: after{Seed: "want", Record: uid},
		},
		"RecordLeftByCutCreate": {
			reason: "a create cut after the record goes on",
			cr:     cr(), host: hostState{seedRecord: record(t, volName, us)},
			want: after{Seed: "want", Record: uid},
		},
		"ForeignRecord": {
			reason: "another's record at our name stops the create",
			cr:     cr(), host: hostState{seedRecord: record(t, volName, them)},
			errSub: "it belongs to", want: after{Err: "it belongs to", Record: them.UID},
		},
		"ExternalNameOfAnother": {
			reason: "an external name of another's volume creates nothing and touches nothing",
			cr:     cr(externalName(victim)), host: hostState{victimSeed: victimISO},
			errSub: "is not the name", want: after{Err: "is not the name", VictimSeed: "untouched"},
		},
		"CreateFails": {
			reason: "a failed volume create is an error (the record stays, ours)",
			cr:     cr(), host: hostState{fail: func(op, _, n string) error {
				if op == "CreateVolume" && n == volName {
					return context.DeadlineExceeded
				}
				return nil
			}},
			errSub: errCreate, want: after{Err: errCreate, Record: uid},
		},
		"UploadFails": {
			reason: "a failed upload is an error",
			cr:     cr(), host: hostState{fail: func(op, _, n string) error {
				if op == "Upload" && n == volName {
					return context.DeadlineExceeded
				}
				return nil
			}},
			errSub: errUpload, want: after{Err: errUpload, Seed: "other", Record: uid},
		},
		"SecretMissing": {
			reason: "bad input creates nothing on the host",
			cr: cr(func(sv *v1alpha1.SeedVolume) {
				sv.Spec.ForProvider.UserData = nil
				sv.Spec.ForProvider.UserDataSecretRef = &v1alpha1.LocalSecretKeySelector{Name: "s", Key: "k"}
			}),
			errSub: "cannot read user-data", want: after{Err: "cannot read user-data"},
		},
	}
	runCases(t, "Create", cases, want, victimISO, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		_, err := e.Create(context.Background(), cr)
		return managed.ExternalObservation{}, err
	})
}

func TestUpdate(t *testing.T) {
	newUD := cr(withUserData("#cloud-config\nhostname: x\n"))
	want := iso(t, newUD)
	old := iso(t, cr())
	victimISO := []byte("victim's seed")
	cases := map[string]opCase{
		"Rewrite": {
			reason: "our volume is rewritten with the new seed",
			cr:     newUD, host: hostState{seed: old, seedRecord: record(t, volName, us)},
			want: after{Seed: "want", Record: uid},
		},
		"NoRecord": {
			reason: "a volume without our record is never rewritten",
			cr:     newUD, host: hostState{seed: old},
			errSub: "carries no ownership record", want: after{Err: "carries no ownership record", Seed: "other"},
		},
		"ExternalNameOfAnother": {
			reason: "an external name of another's volume rewrites nothing",
			cr:     cr(withUserData("#cloud-config\nhostname: pwned\n"), externalName(victim)), host: hostState{seed: old, seedRecord: record(t, volName, us), victimSeed: victimISO},
			errSub: "is not the name", want: after{Err: "is not the name", Seed: "other", Record: uid, VictimSeed: "untouched"},
		},
		"Gone": {
			reason: "a volume gone since Observe is an error",
			cr:     newUD, errSub: errLookup, want: after{Err: errLookup},
		},
	}
	runCases(t, "Update", cases, want, victimISO, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		_, err := e.Update(context.Background(), cr)
		return managed.ExternalObservation{}, err
	})
}

func TestDelete(t *testing.T) {
	want := iso(t, cr())
	victimISO := []byte("victim's seed")
	ours := record(t, volName, us)
	cases := map[string]opCase{
		"Ours": {
			reason: "our unused volume and its record go",
			cr:     cr(deleting), host: hostState{seed: want, seedRecord: ours}, want: after{},
		},
		"Attached": {
			reason: "a volume a domain uses is never deleted",
			cr:     cr(deleting), host: hostState{seed: want, seedRecord: ours, disks: []libvirt.DomainDisk{{Domain: "ns_vm", Target: "sda", Path: "/pool/default/" + volName}}},
			errSub: "attached to domain ns_vm", want: after{Err: "attached to domain ns_vm", Seed: "want", Record: uid},
		},
		"RecordOnly": {
			reason: "a record without its volume goes",
			cr:     cr(deleting), host: hostState{seedRecord: ours}, want: after{},
		},
		"NoRecord": {
			reason: "a volume without our record is never deleted",
			cr:     cr(deleting), host: hostState{seed: want},
			errSub: "carries no ownership record", want: after{Err: "carries no ownership record", Seed: "want"},
		},
		"ExternalNameOfAnother": {
			reason: "the derived volume goes, never the one the external name names",
			cr:     cr(deleting, externalName(victim)), host: hostState{seed: want, seedRecord: ours, victimSeed: victimISO},
			want: after{VictimSeed: "untouched"},
		},
		"DisksFail": {
			reason: "when the users cannot be listed nothing is deleted",
			cr:     cr(deleting), host: hostState{seed: want, seedRecord: ours, fail: func(op, _, _ string) error {
				if op == "DomainDisks" {
					return context.DeadlineExceeded
				}
				return nil
			}},
			errSub: errUsers, want: after{Err: errUsers, Seed: "want", Record: uid},
		},
	}
	runCases(t, "Delete", cases, want, victimISO, func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
		_, err := e.Delete(context.Background(), cr)
		return managed.ExternalObservation{}, err
	})
}

// opCase is one table case of an external client method.
type opCase struct {
	reason string
	cr     *v1alpha1.SeedVolume
	host   hostState
	errSub string
	want   after
}

// runCases runs call on a fresh fake host for each case and compares the result and what is
// left on the host with the case's want.
func runCases(t *testing.T, op string, cases map[string]opCase, wantISO, victimISO []byte,
	call func(e *external, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error)) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.host.storage(t)
			e := newExternal(s)
			e.kube = noSecrets{}
			o, err := call(e, tc.cr)
			s.Fail = nil
			got := observeOf(t, s, wantISO, victimISO, err, tc.errSub)
			got.Exists, got.UpToDate = o.ResourceExists, o.ResourceUpToDate
			if diff := cmp.Diff(tc.want, got); diff != "" {
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
			change: func(s *fakestorage.Storage, _ *external, good []byte) { s.Put(pool, volName, good[:4096]) },
			want:   want{UpToDate: false, Calls: 3},
		},
		"AlteredSameSize": {
			reason: "a seed altered in place is trusted on its fingerprint until the recheck period",
			change: func(s *fakestorage.Storage, _ *external, good []byte) {
				bad := append([]byte{}, good...)
				bad[len(bad)-1] ^= 0xff
				s.Put(pool, volName, bad)
			},
			want: want{UpToDate: true, Calls: 2},
		},
		"AlteredSameSizeRecheck": {
			reason: "after the recheck period it is read and found altered",
			change: func(s *fakestorage.Storage, e *external, good []byte) {
				bad := append([]byte{}, good...)
				bad[len(bad)-1] ^= 0xff
				s.Put(pool, volName, bad)
				later := time.Now().Add(2 * DefaultRecheck)
				e.checks.now = func() time.Time { return later }
			},
			want: want{UpToDate: false, Downloads: 1, Calls: 4},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			good := iso(t, cr())
			s := hostState{seed: good, seedRecord: record(t, volName, us)}.storage(t)
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
