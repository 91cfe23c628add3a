package imagecache

import (
	"strings"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	"github.com/google/go-cmp/cmp"
)

func TestPlanPublish(t *testing.T) {
	sum := strings.Repeat("d", 64)
	src := Source{URL: "https://example.org/a.qcow2", SHA256: sum, Format: FormatQCOW2}
	vol := DigestVolumeName(sum, FormatQCOW2)
	us, them, gone := Owner{UID: "us"}, Owner{UID: "them"}, Owner{UID: "gone"}
	live := map[string]bool{"them": true}
	claim := func(o Owner, state string) *Record { return &Record{State: state, Volume: vol, Owner: o} }
	marker := func(o Owner, digest string, f Format) *Record {
		return &Record{State: RecordPublished, Volume: vol, Owner: o, SHA256: digest, Format: f}
	}
	type want struct {
		plan publishPlan
		err  error
	}
	cases := map[string]struct {
		reason   string
		img      Image
		ourClaim bool
		lease    lease
		want     want
	}{
		"Nothing": {
			reason: "an empty pool: write our claim, then upload",
			img:    Image{State: StateAbsent, Volume: vol},
			want:   want{plan: publishPlan{WriteClaim: true}},
		},
		"PublishedByUs": {
			reason: "already published by us: reuse it",
			img:    Image{State: StatePublished, Volume: vol, HasData: true, HasMarker: true, Owner: us, Marker: marker(us, sum, FormatQCOW2)},
			want:   want{plan: publishPlan{Reuse: true}},
		},
		"PublishedWithStaleClaim": {
			reason:   "a claim of ours left next to the published image goes",
			img:      Image{State: StatePublished, Volume: vol, HasData: true, HasMarker: true, HasClaim: true, Owner: us, Marker: marker(us, sum, FormatQCOW2), Claim: claim(us, RecordClaimed)},
			ourClaim: true,
			want:     want{plan: publishPlan{Reuse: true, DropClaim: true}},
		},
		"PublishedWithOthersClaim": {
			reason: "another process's claim next to the published image is left to it",
			img:    Image{State: StatePublished, Volume: vol, HasData: true, HasMarker: true, HasClaim: true, Owner: us, Marker: marker(us, sum, FormatQCOW2), Claim: claim(us, RecordClaimed)},
			lease:  leaseFresh,
			want:   want{plan: publishPlan{Reuse: true}},
		},
		"PublishedByOther": {
			reason: "the same bytes another BaseImage (any namespace) published: attach to it",
			img:    Image{State: StatePublished, Volume: vol, HasData: true, HasMarker: true, Owner: them, Marker: marker(them, sum, FormatQCOW2)},
			want:   want{plan: publishPlan{Reuse: true}},
		},
		"PublishedWithOtherDigest": {
			reason: "a marker recording other bytes under this digest's name is never used",
			img:    Image{State: StatePublished, Volume: vol, HasData: true, HasMarker: true, Owner: them, Marker: marker(them, strings.Repeat("e", 64), FormatQCOW2)},
			want:   want{err: errors.Errorf(errOtherDigest, vol, "", strings.Repeat("e", 64), FormatQCOW2, sum, FormatQCOW2)},
		},
		"PublishedWithOtherFormat": {
			reason: "the same digest recorded as another format is never used",
			img:    Image{State: StatePublished, Volume: vol, HasData: true, HasMarker: true, Owner: them, Marker: marker(them, sum, FormatRaw)},
			want:   want{err: errors.Errorf(errOtherDigest, vol, "", sum, FormatRaw, sum, FormatQCOW2)},
		},
		"ClaimedByLiveOther": {
			reason: "an upload another live owner runs is waited for, never touched",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: them, Claim: claim(them, RecordClaimed)},
			want:   want{plan: publishPlan{Wait: true}},
		},
		"RemovalByLiveOther": {
			reason: "a removal another live owner runs is waited for",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: them, Claim: claim(them, RecordRemoving)},
			want:   want{plan: publishPlan{Wait: true}},
		},
		"SameOwnerOtherHolderFresh": {
			reason: "two provider processes reconciling one BaseImage: the other's renewed upload is waited for, never deleted",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: us, Claim: claim(us, RecordClaimed)},
			lease:  leaseFresh,
			want:   want{plan: publishPlan{Wait: true}},
		},
		"GoneOwnerFreshClaim": {
			reason: "a renewed claim is waited for even when the BaseImage it names is gone: its holder still writes",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: gone, Claim: claim(gone, RecordClaimed)},
			lease:  leaseFresh,
			want:   want{plan: publishPlan{Wait: true}},
		},
		"TornClaimFresh": {
			reason: "a claim unreadable mid-renewal but renewed is waited for",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true},
			lease:  leaseFresh,
			want:   want{plan: publishPlan{Wait: true}},
		},
		"LiveOwnerStaleClaim": {
			reason: "a claim whose holder stopped renewing is debris, even when the BaseImage it names lives (its provider was killed)",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: them, Claim: claim(them, RecordClaimed)},
			lease:  leaseStale,
			want:   want{plan: publishPlan{CheckUsers: true, Delete: []string{vol, ClaimName(vol)}, WriteClaim: true}},
		},
		"SameOwnerOtherHolderStale": {
			reason: "our BaseImage's upload by a process that is gone (a restart): cleaned once stale",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: us, Claim: claim(us, RecordClaimed)},
			lease:  leaseStale,
			want:   want{plan: publishPlan{CheckUsers: true, Delete: []string{vol, ClaimName(vol)}, WriteClaim: true}},
		},
		"ClaimedByGoneOwner": {
			reason: "the cut upload of an owner whose record is gone is debris: clean it and upload",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: gone, Claim: claim(gone, RecordClaimed)},
			want:   want{plan: publishPlan{CheckUsers: true, Delete: []string{vol, ClaimName(vol)}, WriteClaim: true}},
		},
		"DataWithoutRecord": {
			reason: "data that no record names was not made by us",
			img:    Image{State: StateDebris, Volume: vol, HasData: true},
			want:   want{err: &OwnedByOtherError{Volume: vol}},
		},
		"OurCutUpload": {
			reason:   "our cut upload: check users, delete the data and our claim, write a new claim",
			img:      Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: us, Claim: claim(us, RecordClaimed)},
			ourClaim: true,
			want:     want{plan: publishPlan{CheckUsers: true, Delete: []string{vol, ClaimName(vol)}, WriteClaim: true}},
		},
		"OurTornMarker": {
			reason:   "a torn marker of ours: delete marker, data and claim, write a new claim",
			img:      Image{State: StateDebris, Volume: vol, HasData: true, HasMarker: true, HasClaim: true, Owner: us, Claim: claim(us, RecordClaimed)},
			ourClaim: true,
			want:     want{plan: publishPlan{CheckUsers: true, Delete: []string{MarkerName(vol), vol, ClaimName(vol)}, WriteClaim: true}},
		},
		"OurCutRemoval": {
			reason: "a removal of ours cut half-way: its claim is replaced by a fresh one",
			img:    Image{State: StateDebris, Volume: vol, HasData: true, HasClaim: true, Owner: us, Claim: claim(us, RecordRemoving)},
			want:   want{plan: publishPlan{CheckUsers: true, Delete: []string{vol, ClaimName(vol)}, WriteClaim: true}},
		},
		"TornClaimOnly": {
			reason: "a torn claim without data guards nothing: replaced",
			img:    Image{State: StateDebris, Volume: vol, HasClaim: true},
			want:   want{plan: publishPlan{Delete: []string{ClaimName(vol)}, WriteClaim: true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := planPublish(tc.img, us, src, live, tc.ourClaim, tc.lease)
			if diff := cmp.Diff(tc.want, want{plan: p, err: err}, cmp.AllowUnexported(want{}), test.EquateErrors()); diff != "" {
				t.Errorf("%s\nplanPublish(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestVerifyUpload(t *testing.T) {
	sum := strings.Repeat("a", 64)
	qcow := Source{URL: "https://x/i.qcow2", SHA256: sum, Format: FormatQCOW2}
	cases := map[string]struct {
		reason  string
		src     Source
		u       uploaded
		virtual int64
		err     error
	}{
		"Complete":        {reason: "all bytes, the digest, the file: the header's virtual size", src: qcow, u: uploaded{N: 10, Total: 10, Physical: 10, SHA256: sum, VirtualSize: 100}, virtual: 100},
		"NoContentLength": {reason: "an unknown length is fine when the file holds every byte", src: qcow, u: uploaded{N: 10, Physical: 10, SHA256: sum, VirtualSize: 100}, virtual: 100},
		"Raw":             {reason: "a raw image is as large as its bytes", src: Source{URL: "https://x/i.img", Format: FormatRaw}, u: uploaded{N: 10, Physical: 10, SHA256: sum}, virtual: 10},
		"Short":           {reason: "fewer bytes than announced", src: qcow, u: uploaded{N: 9, Total: 10, Physical: 9, SHA256: sum}, err: errors.Errorf(errSize, qcow.URL, 9, 10)},
		"WrongDigest":     {reason: "another image", src: qcow, u: uploaded{N: 10, Total: 10, Physical: 10, SHA256: strings.Repeat("b", 64)}, err: &DigestMismatchError{URL: qcow.URL, Want: sum, Got: strings.Repeat("b", 64)}},
		"ShortOnDisk":     {reason: "the stream was complete but the file is not", src: qcow, u: uploaded{N: 10, Total: 10, Physical: 8, SHA256: sum}, err: errors.Errorf(errPhysical, "vol", 8, 10)},
		"UnverifiedRaw":   {reason: "no digest asked: the computed one is not compared", src: Source{URL: "https://x/i.img", Format: FormatRaw}, u: uploaded{N: 3, Physical: 3, SHA256: "c"}, virtual: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v, err := verifyUpload(tc.src, tc.src.URL, "vol", tc.u)
			if diff := cmp.Diff(tc.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nverifyUpload(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.virtual, v); diff != "" {
				t.Errorf("%s\nverifyUpload(): -want virtual size, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestSlowClaim(t *testing.T) {
	floor := Throughput{Bytes: 1000, Window: time.Minute}
	at := func(d time.Duration, b int64) progressSample { return progressSample{at: t0.Add(d), bytes: b} }
	cases := map[string]struct {
		reason  string
		samples []progressSample
		floor   Throughput
		want    bool
	}{
		"NotWatchedLongEnough": {
			reason:  "an upload watched for less than a window is not slow, however little it did",
			samples: []progressSample{at(0, 0), at(59*time.Second, 0)},
			floor:   floor,
		},
		"SlowOverWindow": {
			reason:  "less than the minimum over a whole window is slow",
			samples: []progressSample{at(0, 0), at(30*time.Second, 500), at(time.Minute, 999)},
			floor:   floor,
			want:    true,
		},
		"MinimumMade": {
			reason:  "the minimum over the window is enough",
			samples: []progressSample{at(0, 0), at(time.Minute, 1000)},
			floor:   floor,
		},
		"LatestWindowCounts": {
			reason:  "what counts is the last window: fast long ago, stuck since, is slow",
			samples: []progressSample{at(0, 0), at(time.Minute, 5000), at(2*time.Minute, 5000)},
			floor:   floor,
			want:    true,
		},
		"ClosestSampleAWindowBack": {
			reason:  "the newest sample at least a window before the last is the one compared",
			samples: []progressSample{at(0, 0), at(90*time.Second, 100), at(150*time.Second, 1200)},
			floor:   floor,
		},
		"NoMinimum": {
			reason:  "without a minimum nothing is slow",
			samples: []progressSample{at(0, 0), at(time.Hour, 0)},
		},
		"OneSample": {
			reason:  "one look tells nothing",
			samples: []progressSample{at(0, 0)},
			floor:   floor,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := slowClaim(tc.samples, tc.floor); got != tc.want {
				t.Errorf("%s\nslowClaim(...) = %t, want %t", tc.reason, got, tc.want)
			}
		})
	}
}

// TestProgressClock: a new claim (another holder or time) or data written anew starts the
// watch again; old samples are dropped but one a window old is kept.
func TestProgressClock(t *testing.T) {
	p := &progressClock{seen: map[string]claimProgress{}, min: Throughput{Bytes: 1000, Window: time.Minute}}
	steps := []struct {
		reason string
		claim  string
		bytes  int64
		at     time.Duration
		want   bool
	}{
		{reason: "first look", claim: "c1", bytes: 0},
		{reason: "a window later with too little: slow", claim: "c1", bytes: 10, at: time.Minute, want: true},
		{reason: "another claim starts anew", claim: "c2", bytes: 10, at: 2 * time.Minute},
		{reason: "its data shrank (written anew): starts anew", claim: "c2", bytes: 5, at: 3 * time.Minute},
		{reason: "then a window without progress: slow", claim: "c2", bytes: 5, at: 4 * time.Minute, want: true},
		{reason: "progress over the last window: not slow", claim: "c2", bytes: 2000, at: 5 * time.Minute},
	}
	for _, s := range steps {
		if got := p.slow("k", s.claim, s.bytes, t0.Add(s.at)); got != s.want {
			t.Errorf("%s: slow(%q, %d, +%s) = %t, want %t", s.reason, s.claim, s.bytes, s.at, got, s.want)
		}
	}
	if n := len(p.seen["k"].samples); n > 3 {
		t.Errorf("kept %d samples; want those of the last window and one before it (at most 3 here)", n)
	}
}

func TestClaimClockJudge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	claimStale := defaultTiming().claimStale
	k := &claimClock{seen: map[string]claimSeen{}, stale: claimStale}
	steps := []struct {
		reason string
		mtime  string
		at     time.Duration
		want   lease
	}{
		{reason: "no timestamps: unknown", mtime: "", want: leaseUnknown},
		{reason: "first seen: fresh, whatever its age on the host's clock", mtime: "5.0", want: leaseFresh},
		{reason: "unchanged within claimStale: fresh", mtime: "5.0", at: claimStale - time.Second, want: leaseFresh},
		{reason: "unchanged for claimStale: stale", mtime: "5.0", at: claimStale, want: leaseStale},
		{reason: "renewed: fresh again, counted from now", mtime: "9.0", at: claimStale + time.Second, want: leaseFresh},
		{reason: "a renewed claim goes stale only claimStale after its last change was seen", mtime: "9.0", at: 2 * claimStale, want: leaseFresh},
		{reason: "and then it does", mtime: "9.0", at: 2*claimStale + time.Second, want: leaseStale},
	}
	for _, s := range steps {
		if got := k.judge("claim", s.mtime, t0.Add(s.at)); got != s.want {
			t.Errorf("%s: judge(%q, +%s) = %d, want %d", s.reason, s.mtime, s.at, got, s.want)
		}
	}
	k.forget("claim")
	if got := k.judge("claim", "9.0", t0.Add(10*claimStale)); got != leaseFresh {
		t.Errorf("after forget, a claim is first seen again: got %d, want fresh", got)
	}
}

func TestPlanRemove(t *testing.T) {
	vol := volA
	pub := Image{State: StatePublished, Pool: tpool, Volume: vol, HasData: true, HasMarker: true, HasOwn: true, Path: pathA, Owner: us}
	with := func(img Image, f func(*Image)) Image { f(&img); return img }
	unused, used := &Usage{}, &Usage{Users: []string{"volume default/vm.root.qcow2"}}
	ownUsed := &Usage{Users: []string{"volume default/ns-a_vm-1234abcd.root.qcow2", "volume default/ns-b_vm-1234abcd.root.qcow2"}}
	otherUsed := &Usage{Users: []string{"domain ns-b_vm disk vda", "volume default/ns-b_vm-1234abcd.root.qcow2"}}
	ownDoubt := &Usage{Doubts: []string{"domain ns-a_vm disk vdb is /srv/x.qcow2, which is in no active pool"}}
	poolDoubt := &Usage{Users: []string{"domain ns-b_vm disk vda"}, Doubts: []string{"pool cold is inactive, so its volumes cannot be checked (start the pool, or delete it)"}}
	deleteAll := []string{vol, OwnerName(vol, us.UID), ClaimName(vol)}
	type want struct {
		plan removePlan
		err  error
	}
	cases := map[string]struct {
		reason string
		f      removeFacts
		want   want
	}{
		"Kept": {
			reason: "other owners remain: only the caller's record goes",
			f:      removeFacts{img: pub, uid: us.UID, others: 2},
			want:   want{plan: removePlan{Kept: true, DeleteOwn: true}},
		},
		"Absent": {
			reason: "nothing on the host but the caller's record",
			f:      removeFacts{img: Image{State: StateAbsent, Pool: tpool, Volume: vol, HasOwn: true}, uid: us.UID},
			want:   want{plan: removePlan{Done: true, DeleteOwn: true}},
		},
		"NoRecordNamesAnyone": {
			reason: "data without records is never ours",
			f:      removeFacts{img: Image{State: StateDebris, Pool: tpool, Volume: vol, HasData: true}, uid: us.UID},
			want:   want{err: &OwnedByOtherError{Pool: tpool, Volume: vol}},
		},
		"AskPublisher": {
			reason: "a legacy volume of another owner: is its publisher alive?",
			f:      removeFacts{img: with(pub, func(i *Image) { i.Volume, i.HasOwn, i.Owner = legacyVol, false, them }), uid: us.UID},
			want:   want{plan: removePlan{Need: needPublisher}},
		},
		"PublisherLive": {
			reason: "a legacy volume of a live owner is theirs",
			f:      removeFacts{img: with(pub, func(i *Image) { i.Volume, i.HasOwn, i.Owner = legacyVol, false, them }), uid: us.UID, askedPublisher: true, publisherLive: true},
			want:   want{err: &OwnedByOtherError{Pool: tpool, Volume: legacyVol, Owner: them}},
		},
		"AskUsers": {
			reason: "data exists: its users are found before anything is decided",
			f:      removeFacts{img: pub, uid: us.UID},
			want:   want{plan: removePlan{Need: needUsers}},
		},
		"InUse": {
			reason: "data in use stays",
			f:      removeFacts{img: pub, uid: us.UID, usage: used},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Users: used.Users}},
		},
		"InUseAndDoubts": {
			reason: "data in use stays, doubts or not",
			f:      removeFacts{img: pub, uid: us.UID, usage: &Usage{Users: used.Users, Doubts: []string{"pool vms is inactive"}}},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Users: used.Users, Doubts: []string{"pool vms is inactive"}}},
		},
		"DoubtLeftToSweep": {
			reason: "the last owner of data nothing is seen to use lets go of it despite a doubt; the volume waits for the sweep",
			f:      removeFacts{img: pub, uid: us.UID, usage: &Usage{Doubts: []string{"pool vms is inactive"}}},
			want:   want{plan: removePlan{Left: true, DeleteOwn: true, Doubts: []string{"pool vms is inactive"}}},
		},
		"DoubtKeepsForSweep": {
			reason: "the sweep removes nothing whose users cannot be ruled out",
			f:      removeFacts{img: with(pub, func(i *Image) { i.HasOwn = false }), usage: &Usage{Doubts: []string{"pool vms is inactive"}}},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Doubts: []string{"pool vms is inactive"}}},
		},
		"AskLease": {
			reason: "a claim this process does not hold: how fresh is it?",
			f:      removeFacts{img: with(pub, func(i *Image) { i.HasClaim = true }), uid: us.UID, usage: unused},
			want:   want{plan: removePlan{Need: needLease}},
		},
		"ClaimHeld": {
			reason: "a claim its holder renews is never deleted under it",
			f:      removeFacts{img: with(pub, func(i *Image) { i.HasClaim = true }), uid: us.UID, usage: unused, judgedLease: true, lease: leaseFresh},
			want:   want{err: errors.Errorf(errClaimHeld, vol, tpool)},
		},
		"StaleClaim": {
			reason: "a stale claim is debris: unpublish and delete, without a claim of our own",
			f:      removeFacts{img: with(pub, func(i *Image) { i.HasClaim = true }), uid: us.UID, usage: unused, judgedLease: true, lease: leaseStale},
			want:   want{plan: removePlan{Unpublish: true, Delete: deleteAll}},
		},
		"Remove": {
			reason: "the last owner of an unused volume: claim, unpublish, delete",
			f:      removeFacts{img: pub, uid: us.UID, usage: unused},
			want:   want{plan: removePlan{WriteClaim: true, Unpublish: true, Delete: deleteAll}},
		},
		"CoOwnerAsksUsers": {
			reason: "a co-owner that names its namespace finds the users before it detaches",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", others: 1},
			want:   want{plan: removePlan{Need: needUsers}},
		},
		"CoOwnerOwnDisksKeepRecord": {
			reason: "a co-owner whose namespace's overlay backs onto the volume keeps its record",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", others: 1, usage: ownUsed},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Users: ownUsed.Users, Namespace: "ns-a"}},
		},
		"CoOwnerOwnDoubtKeepsRecord": {
			reason: "a doubt about the namespace's own disk keeps the record too",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", others: 1, usage: ownDoubt},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Doubts: ownDoubt.Doubts, Namespace: "ns-a"}},
		},
		"CoOwnerOthersDisksDetach": {
			reason: "disks of other namespaces do not keep a co-owner",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", others: 1, usage: otherUsed},
			want:   want{plan: removePlan{Kept: true, DeleteOwn: true}},
		},
		"LastOwnerLeaves": {
			reason: "the last owner of a volume only other namespaces use leaves it to them",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", usage: otherUsed},
			want:   want{plan: removePlan{Left: true, DeleteOwn: true}},
		},
		"LastOwnerOwnDisks": {
			reason: "the last owner whose namespace's disks use the volume stays",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", usage: ownUsed},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Users: ownUsed.Users, Namespace: "ns-a"}},
		},
		"LastOwnerPoolDoubt": {
			reason: "a pool that cannot be checked keeps the last owner: nobody can tell whose disks are there",
			f:      removeFacts{img: pub, uid: us.UID, namespace: "ns-a", usage: poolDoubt},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Users: poolDoubt.Users, Doubts: poolDoubt.Doubts, Namespace: "ns-a"}},
		},
		"SweepNeverLeaves": {
			reason: "Sweep owns nothing: a volume in use stays",
			f:      removeFacts{img: with(pub, func(i *Image) { i.HasOwn = false }), usage: otherUsed},
			want:   want{err: &InUseError{Pool: tpool, Volume: vol, Users: otherUsed.Users}},
		},
		"RemoveDebrisWithoutData": {
			reason: "a marker without data: no users to find",
			f:      removeFacts{img: with(pub, func(i *Image) { i.State, i.HasData = StateDebris, false }), uid: us.UID},
			want:   want{plan: removePlan{WriteClaim: true, Unpublish: true, Delete: deleteAll}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := planRemove(tc.f)
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nplanRemove(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.plan, p); diff != "" {
				t.Errorf("%s\nplanRemove(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestPlanRecheck(t *testing.T) {
	boom := errors.New("boom")
	inUse := &InUseError{Pool: tpool, Volume: volA, Users: []string{"volume default/vm.root.qcow2"}}
	pub := Image{State: StatePublished, Volume: volA}
	type want struct {
		plan recheckPlan
		err  error
	}
	cases := map[string]struct {
		reason         string
		img            Image
		others         int
		ownersErr, use error
		want           want
	}{
		"Clear":        {reason: "nobody appeared: go on", img: pub},
		"OwnerAdded":   {reason: "an owner appeared: restore and detach", img: pub, others: 1, want: want{plan: recheckPlan{Restore: true, DropClaim: true, Kept: true}}},
		"OverlayAdded": {reason: "a user appeared: restore and fail", img: pub, use: inUse, want: want{plan: recheckPlan{Restore: true, DropClaim: true}, err: inUse}},
		"OwnersFail":   {reason: "owners unknown: restore and fail", img: pub, ownersErr: boom, want: want{plan: recheckPlan{Restore: true, DropClaim: true}, err: boom}},
		"Debris":       {reason: "debris is not marked again", img: Image{State: StateDebris, Volume: volA}, others: 1, want: want{plan: recheckPlan{DropClaim: true, Kept: true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := planRecheck(tc.img, tc.others, tc.ownersErr, tc.use)
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nplanRecheck(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.plan, p); diff != "" {
				t.Errorf("%s\nplanRecheck(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
