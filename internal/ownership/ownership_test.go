package ownership

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

const (
	pool = "p"
	vol  = "team-a_web-6c1f0b6e.seed.iso"
	host = "root@h:22"
)

var (
	alice = Owner{Kind: "SeedVolume", UID: "uid-a", Namespace: "team-a", Name: "web"}
	mallo = Owner{Kind: "SeedVolume", UID: "uid-b", Namespace: "team-b", Name: "evil"}
	t0    = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

func record(t *testing.T, volume string, o Owner) []byte {
	t.Helper()
	b, err := Encode(volume, o, t0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// what the tests compare: the error class and the record left on the host.
type result struct {
	NotOwned bool
	Err      bool
	Record   string
}

func outcome(err error, s *fakestorage.Storage) result {
	b, _ := s.Get(pool, RecordVolume(vol))
	r := result{NotOwned: IsNotOwned(err), Err: err != nil && !IsNotOwned(err)}
	if len(b) > 0 {
		if rec, derr := Decode(b); derr == nil {
			r.Record = rec.Owner.UID
		} else {
			r.Record = "torn"
		}
	}
	return r
}

func TestVerify(t *testing.T) {
	cases := map[string]struct {
		reason string
		setup  func(t *testing.T, s *fakestorage.Storage)
		want   result
	}{
		"NoRecord":    {reason: "a volume without a record is never ours", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, vol, []byte("iso")) }, want: result{NotOwned: true}},
		"Ours":        {reason: "a record naming us verifies", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, vol, alice)) }, want: result{Record: "uid-a"}},
		"Foreign":     {reason: "a record naming another resource is refused", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, vol, mallo)) }, want: result{NotOwned: true, Record: "uid-b"}},
		"OtherVolume": {reason: "a record copied from another volume is refused", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, "other", alice)) }, want: result{NotOwned: true, Record: "uid-a"}},
		"Torn":        {reason: "a torn record is not proof", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), []byte(`{"schema":1,"ki`)) }, want: result{NotOwned: true, Record: "torn"}},
		"HostError": {reason: "a failed lookup is an error, not a verdict", setup: func(t *testing.T, s *fakestorage.Storage) {
			s.Fail = func(string, string, string) error { return context.DeadlineExceeded }
		}, want: result{Err: true}},
		"KindDiffers": {reason: "the same UID under another kind is not us", setup: func(t *testing.T, s *fakestorage.Storage) {
			o := alice
			o.Kind = "KVMDomain"
			s.Put(pool, RecordVolume(vol), record(t, vol, o))
		}, want: result{NotOwned: true, Record: "uid-a"}},
		"EmptyRecord": {reason: "an empty record volume is torn", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), nil) }, want: result{NotOwned: true}},
		"DownloadFails": {reason: "a failed read is an error", setup: func(t *testing.T, s *fakestorage.Storage) {
			s.Put(pool, RecordVolume(vol), record(t, vol, alice))
			s.Fail = failOn("Download")
		}, want: result{Err: true, Record: "uid-a"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fakestorage.New()
			tc.setup(t, s)
			err := NewRecords().Verify(context.Background(), s, host, pool, vol, alice)
			s.Fail = nil
			if diff := cmp.Diff(tc.want, outcome(err, s)); diff != "" {
				t.Errorf("%s\nVerify(): -want, +got:\n%s\nerr: %v", tc.reason, diff, err)
			}
		})
	}
}

func failOn(op string) func(string, string, string) error {
	return func(o, _, _ string) error {
		if o == op {
			return context.DeadlineExceeded
		}
		return nil
	}
}

func TestClaim(t *testing.T) {
	cases := map[string]struct {
		reason string
		setup  func(t *testing.T, s *fakestorage.Storage)
		want   result
	}{
		"Fresh":        {reason: "no record: one naming us is written", setup: func(*testing.T, *fakestorage.Storage) {}, want: result{Record: "uid-a"}},
		"AlreadyOurs":  {reason: "our record stays", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, vol, alice)) }, want: result{Record: "uid-a"}},
		"Foreign":      {reason: "another's record is never replaced", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, vol, mallo)) }, want: result{NotOwned: true, Record: "uid-b"}},
		"TornNoVolume": {reason: "a torn record guarding nothing is rewritten", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), []byte("{")) }, want: result{Record: "uid-a"}},
		"TornWithVolume": {reason: "a torn record with its volume present is not ours to rewrite", setup: func(t *testing.T, s *fakestorage.Storage) {
			s.Put(pool, RecordVolume(vol), []byte("{"))
			s.Put(pool, vol, []byte("x"))
		}, want: result{NotOwned: true, Record: "torn"}},
		"CreateFails": {reason: "a failed create is an error", setup: func(t *testing.T, s *fakestorage.Storage) { s.Fail = failOn("CreateVolume") }, want: result{Err: true}},
		"LostRaceToOther": {reason: "a record another made in between is checked, not overwritten", setup: func(t *testing.T, s *fakestorage.Storage) {
			s.BeforeCreate = func(p, n string) { s.Put(p, n, record(t, vol, mallo)) }
		}, want: result{NotOwned: true, Record: "uid-b"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fakestorage.New()
			tc.setup(t, s)
			err := NewRecords().Claim(context.Background(), s, host, pool, vol, alice)
			s.Fail = nil
			if diff := cmp.Diff(tc.want, outcome(err, s)); diff != "" {
				t.Errorf("%s\nClaim(): -want, +got:\n%s\nerr: %v", tc.reason, diff, err)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	cases := map[string]struct {
		reason string
		setup  func(t *testing.T, s *fakestorage.Storage)
		want   result
	}{
		"Ours":    {reason: "our record goes", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, vol, alice)) }, want: result{}},
		"None":    {reason: "nothing to do", setup: func(*testing.T, *fakestorage.Storage) {}, want: result{}},
		"Foreign": {reason: "another's record stays", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), record(t, vol, mallo)) }, want: result{NotOwned: true, Record: "uid-b"}},
		"Torn":    {reason: "a torn record of a deleted volume guards nothing", setup: func(t *testing.T, s *fakestorage.Storage) { s.Put(pool, RecordVolume(vol), []byte("{")) }, want: result{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fakestorage.New()
			tc.setup(t, s)
			err := NewRecords().Release(context.Background(), s, host, pool, vol, alice)
			if diff := cmp.Diff(tc.want, outcome(err, s)); diff != "" {
				t.Errorf("%s\nRelease(): -want, +got:\n%s\nerr: %v", tc.reason, diff, err)
			}
		})
	}
}

// TestVerifyCache: a verified record costs one lookup afterwards, and its disappearance is seen.
func TestVerifyCache(t *testing.T) {
	s := fakestorage.New()
	s.Put(pool, RecordVolume(vol), record(t, vol, alice))
	r := NewRecords()
	ctx := context.Background()
	if err := r.Verify(ctx, s, host, pool, vol, alice); err != nil {
		t.Fatal(err)
	}
	before := s.Calls["Download"]
	if err := r.Verify(ctx, s, host, pool, vol, alice); err != nil {
		t.Fatal(err)
	}
	if got := s.Calls["Download"] - before; got != 0 {
		t.Errorf("a cached Verify downloaded %d times, want 0", got)
	}
	if err := s.DeleteVolume(ctx, pool, RecordVolume(vol)); err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(ctx, s, host, pool, vol, alice); !IsNotOwned(err) {
		t.Errorf("Verify() after the record was deleted: %v, want NotOwned", err)
	}
	// Another resource never profits from our cache entry.
	s.Put(pool, RecordVolume(vol), record(t, vol, alice))
	if err := r.Verify(ctx, s, host, pool, vol, alice); err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(ctx, s, host, pool, vol, mallo); !IsNotOwned(err) {
		t.Errorf("Verify() as another owner: %v, want NotOwned", err)
	}
}

// TestVerifyFingerprint: a cached Verify trusts a record only while its volume's fingerprint
// is unchanged and for at most the recheck period; VerifyFresh always reads.
func TestVerifyFingerprint(t *testing.T) {
	type want struct {
		Downloads int
		NotOwned  bool
	}
	cases := map[string]struct {
		reason string
		change func(t *testing.T, s *fakestorage.Storage, r *Records)
		verify func(r *Records, s *fakestorage.Storage) error
		want   want
	}{
		"Unchanged": {
			reason: "an unchanged record costs no download",
			change: func(*testing.T, *fakestorage.Storage, *Records) {},
			want:   want{},
		},
		"ReplacedByAnother": {
			reason: "a record replaced by one of another size (another owner) is read again and refused",
			change: func(t *testing.T, s *fakestorage.Storage, _ *Records) {
				s.Put(pool, RecordVolume(vol), append(record(t, vol, mallo), make([]byte, 5000)...))
			},
			want: want{Downloads: 1, NotOwned: true},
		},
		"RecheckPeriodOver": {
			reason: "a record trusted for the recheck period is read again",
			change: func(_ *testing.T, _ *fakestorage.Storage, r *Records) {
				now := time.Now().Add(2 * DefaultRecheck)
				r.now = func() time.Time { return now }
			},
			want: want{Downloads: 1},
		},
		"Fresh": {
			reason: "VerifyFresh, for deletes, always reads",
			change: func(*testing.T, *fakestorage.Storage, *Records) {},
			verify: func(r *Records, s *fakestorage.Storage) error {
				return r.VerifyFresh(context.Background(), s, host, pool, vol, alice)
			},
			want: want{Downloads: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fakestorage.New()
			s.Put(pool, RecordVolume(vol), record(t, vol, alice))
			r := NewRecords()
			if err := r.Verify(context.Background(), s, host, pool, vol, alice); err != nil {
				t.Fatal(err)
			}
			tc.change(t, s, r)
			before := s.Calls["Download"]
			verify := tc.verify
			if verify == nil {
				verify = func(r *Records, s *fakestorage.Storage) error {
					return r.Verify(context.Background(), s, host, pool, vol, alice)
				}
			}
			err := verify(r, s)
			got := want{Downloads: s.Calls["Download"] - before, NotOwned: IsNotOwned(err)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s\nerr: %v", tc.reason, diff, err)
			}
		})
	}
}
