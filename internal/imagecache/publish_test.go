package imagecache

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

func TestPublish(t *testing.T) {
	boom := errors.New("boom")
	enospc := errors.New("unable to write to '/pool/default/x': No space left on device")
	data := []byte(strings.Repeat("raw image bytes ", rawSize/16))
	digest := sha(data)
	vol := DigestVolumeName(digest, FormatRaw)
	other := strings.Repeat("c", 64)
	otherVol := DigestVolumeName(other, FormatRaw)
	srv := newRawServer(t, data)
	url := srv.URL + "/img"
	pinned := Source{URL: url, SHA256: digest, Format: FormatRaw}
	torn := []byte(`{"schema":1,`)

	type args struct {
		src   Source
		owner Owner
		setup func(t *testing.T, h *fakestorage.Storage, sh *Shared)
		// timeout bounds the Publish (waits end with it).
		timeout time.Duration
	}
	// got is what a Publish is judged by.
	type got struct {
		Reused bool
		Bytes  int64
		State  State
		// Downloads counts the requests the image server saw.
		Downloads int32
		Names     []string
	}
	type want struct {
		got got
		err error
	}
	publishedNames := sortedNames(vol, MarkerName(vol), OwnerName(vol, us.UID))
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"Upload": {
			reason: "nothing on the host: claim, upload, verify, mark",
			args:   args{src: pinned, owner: us},
			want:   want{got: got{Bytes: rawSize, State: StatePublished, Downloads: 1, Names: publishedNames}},
		},
		"Unpinned": {
			reason: "an image without sha256 is downloaded once to hash it, then published for that digest",
			args:   args{src: Source{URL: url, Format: FormatRaw}, owner: us},
			want:   want{got: got{Bytes: rawSize, State: StatePublished, Downloads: 2, Names: publishedNames}},
		},
		"Reuse": {
			reason: "published with the digest asked for by another BaseImage: its own URL is downloaded and hashed (a digest is not possession), nothing is uploaded, the owner record is added",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, vol, digest, FormatRaw, them, rawSize)
				owns(t, h, vol, them)
			}},
			want: want{got: got{Reused: true, State: StatePublished, Downloads: 1, Names: sortedNames(vol, MarkerName(vol), OwnerName(vol, them.UID), OwnerName(vol, us.UID))}},
		},
		"ReuseDropsOurClaim": {
			reason: "a claim of ours left next to the published image is dropped",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, vol, digest, FormatRaw, us, rawSize)
				claimed(t, h, vol, us, holder, RecordClaimed)
			}},
			want: want{got: got{Reused: true, State: StatePublished, Names: publishedNames}},
		},
		"OtherDigest": {
			reason: "a volume marked as holding other bytes is never used for this image",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, vol, other, FormatRaw, them, rawSize)
			}},
			want: want{
				got: got{State: StatePublished, Names: publishedNames},
				err: errors.Errorf(errOtherDigest, vol, tpool, other, FormatRaw, digest, FormatRaw),
			},
		},
		"WaitForFreshClaim": {
			reason: "an upload another process renews is waited for, until the context ends",
			args: args{src: pinned, owner: us, timeout: time.Second, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				sh.timing.waitPoll = time.Hour // the context ends during the wait
				claimed(t, h, vol, them, "other-process", RecordClaimed)
			}},
			want: want{
				// Its own URL is hashed before it waits for another's upload of the digest.
				got: got{State: StateDebris, Downloads: 1, Names: sortedNames(ClaimName(vol), OwnerName(vol, us.UID))},
				err: errors.Wrapf(context.DeadlineExceeded, errWait, vol),
			},
		},
		"WaitForLiveOwnerWithoutTimestamps": {
			reason: "a claim whose freshness cannot be told is waited for while it names another live owner",
			args: args{src: pinned, owner: us, timeout: time.Second, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				sh.timing.waitPoll = time.Hour // the context ends during the wait
				h.NoTimestamps = true
				claimed(t, h, vol, them, "other-process", RecordClaimed)
				owns(t, h, vol, them)
			}},
			want: want{
				got: got{State: StateDebris, Downloads: 1, Names: sortedNames(ClaimName(vol), OwnerName(vol, them.UID), OwnerName(vol, us.UID))},
				err: errors.Wrapf(context.DeadlineExceeded, errWait, vol),
			},
		},
		"ClaimOfGoneOwnerWithoutTimestamps": {
			reason: "a claim whose freshness cannot be told, of an owner without a record, is debris",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.NoTimestamps = true
				claimed(t, h, vol, gone, "other-process", RecordClaimed)
				h.Put(tpool, vol, data[:100])
			}},
			want: want{got: got{Bytes: rawSize, State: StatePublished, Downloads: 1, Names: publishedNames}},
		},
		"TakeOverStaleClaim": {
			reason: "a claim unchanged for claimStale is debris: cleaned, then uploaded anew",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				claimed(t, h, vol, them, "other-process", RecordClaimed)
				h.Put(tpool, vol, data[:100])
				staleClaim(h, sh, vol)
			}},
			want: want{got: got{Bytes: rawSize, State: StatePublished, Downloads: 1, Names: publishedNames}},
		},
		"TakeOverSlowClaim": {
			reason: "a claim another namespace's upload keeps fresh, but whose data grew less than the minimum over a window, is taken over like a stale one",
			args: args{src: pinned, owner: us, timeout: 5 * time.Second, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				claimed(t, h, vol, them, "other-process", RecordClaimed)
				h.Put(tpool, vol, data[:100])
				sawProgress(h, sh, vol, "other-process", 4096, t0.Add(-6*time.Minute)) // as much as now
			}},
			want: want{got: got{Bytes: rawSize, State: StatePublished, Downloads: 1, Names: publishedNames}},
		},
		"WaitForClaimAboveMinimum": {
			reason: "an upload of another namespace that made the minimum over the window is waited for",
			args: args{src: pinned, owner: us, timeout: 3 * time.Second, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				sh.timing.waitPoll = time.Hour // the context ends during the wait
				sh.progress.min = Throughput{Bytes: 4096, Window: 5 * time.Minute}
				claimed(t, h, vol, them, "other-process", RecordClaimed)
				h.Put(tpool, vol, data[:100])
				sawProgress(h, sh, vol, "other-process", 0, t0.Add(-6*time.Minute))
			}},
			want: want{
				got: got{State: StateDebris, Downloads: 1, Names: sortedNames(vol, ClaimName(vol), OwnerName(vol, us.UID))},
				err: errors.Wrapf(context.DeadlineExceeded, errWait, vol),
			},
		},
		"WaitForSlowClaimOfOwnNamespace": {
			reason: "a slow upload of the same namespace is waited for: its team's own URL",
			args: args{src: pinned, owner: us, timeout: 3 * time.Second, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				sh.timing.waitPoll = time.Hour // the context ends during the wait
				claimed(t, h, vol, Owner{UID: "uid-mate", Namespace: us.Namespace, Name: "mate"}, "other-process", RecordClaimed)
				h.Put(tpool, vol, data[:100])
				sawProgress(h, sh, vol, "other-process", 4096, t0.Add(-6*time.Minute))
			}},
			want: want{
				got: got{State: StateDebris, Names: sortedNames(vol, ClaimName(vol), OwnerName(vol, us.UID))},
				err: errors.Wrapf(context.DeadlineExceeded, errWait, vol),
			},
		},
		"CutDataReplaced": {
			reason: "data shorter than its marker records is debris: cleaned, then uploaded anew",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, vol, digest, FormatRaw, them, rawSize)
				h.Put(tpool, vol, data[:100])
				owns(t, h, vol, them)
			}},
			want: want{got: got{Bytes: rawSize, State: StatePublished, Downloads: 1, Names: sortedNames(vol, MarkerName(vol), OwnerName(vol, us.UID), OwnerName(vol, them.UID))}},
		},
		"DebrisInUse": {
			reason: "even debris is never deleted under an overlay",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, vol, digest, FormatRaw, them, rawSize)
				h.Put(tpool, vol, data[:100])
				h.PutOverlay(tpool, "vm.root.qcow2", fakestorage.Path(tpool, vol))
			}},
			want: want{
				got: got{State: StateDebris, Names: sortedNames(vol, MarkerName(vol), "vm.root.qcow2")},
				err: &InUseError{Pool: tpool, Volume: vol, Users: []string{"volume default/vm.root.qcow2"}},
			},
		},
		"TornMarkerOfNoOne": {
			reason: "data next to a torn marker that names no one is refused as data without records",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Put(tpool, vol, data)
				h.Put(tpool, MarkerName(vol), torn)
			}},
			want: want{got: got{State: StateDebris, Names: sortedNames(vol, MarkerName(vol))}, err: &OwnedByOtherError{Pool: tpool, Volume: vol}},
		},
		"DataWithoutRecords": {
			reason: "data that no record names is refused: we write the claim before any data",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Put(tpool, vol, data)
			}},
			want: want{got: got{State: StateDebris, Names: []string{vol}}, err: &OwnedByOtherError{Pool: tpool, Volume: vol}},
		},
		"DigestMismatch": {
			reason: "bytes that do not hash to the digest asked for leave nothing behind",
			args:   args{src: Source{URL: url, SHA256: other, Format: FormatRaw}, owner: us},
			want:   want{got: got{Bytes: rawSize, Downloads: 1}, err: &DigestMismatchError{URL: url, Want: other, Got: digest}},
		},
		"ClaimRace": {
			reason: "a claim written by another process between our look and our write: retry later",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.BeforeCreate = func(_, name string) {
					if name == ClaimName(vol) {
						b, _ := Record{State: RecordClaimed, Volume: vol, Owner: them, Holder: "other-process", Time: t0}.Encode()
						h.Put(tpool, name, b)
					}
				}
			}},
			want: want{got: got{Names: []string{ClaimName(vol)}}, err: errors.Errorf(errClaimRace, vol, tpool)},
		},
		"OwnerRecordFails": {
			reason: "an owner record that cannot be written fails the publish before anything else",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Fail = failOn("CreateVolume", OwnerName(vol, us.UID), boom)
			}},
			want: want{err: errors.Wrapf(boom, errOwnerRecord, vol, tpool)},
		},
		"UploadFails": {
			reason: "an upload that fails removes what it wrote, claim last",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Fail = failOn("Upload", vol, boom)
			}},
			want: want{got: got{Downloads: 1, Bytes: rawSize}, err: errors.Wrapf(boom, errUpload, url, vol, tpool)},
		},
		"PoolWithoutRoom": {
			reason: "a full pool is refused before anything is written: no upload, nothing left",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Free = map[string]uint64{tpool: 0}
			}},
			want: want{got: got{Downloads: 1}, err: &hostlimits.PoolFullError{Pool: tpool, Need: 1}},
		},
		"UploadENOSPC": {
			reason: "an upload that runs out of space is a PoolFullError, and what it wrote is removed",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Fail = failOn("Upload", vol, enospc)
			}},
			want: want{got: got{Downloads: 1, Bytes: rawSize}, err: &hostlimits.PoolFullError{Pool: tpool, Cause: errors.Wrapf(enospc, errUpload, url, vol, tpool)}},
		},
		"UploadFailsIntoFullPool": {
			reason: "an upload that fails without ENOSPC named, into a pool found full afterwards, is a PoolFullError too",
			args: args{src: pinned, owner: us, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Fail = failOn("Upload", vol, boom)
				h.BeforeCreate = func(_, name string) {
					if name == vol {
						h.Free = map[string]uint64{tpool: 4096} // the upload fills the pool
					}
				}
			}},
			want: want{got: got{Downloads: 1, Bytes: rawSize}, err: &hostlimits.PoolFullError{Pool: tpool, Cause: errors.Wrapf(boom, errUpload, url, vol, tpool)}},
		},
		"ReuseSameNamespace": {
			reason: "bytes another BaseImage of the same namespace downloaded (or this one before a restore, with another UID) attach without a download",
			args: args{src: pinned, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, vol, digest, FormatRaw, Owner{UID: "uid-before-restore", Namespace: us.Namespace, Name: us.Name}, rawSize)
			}},
			want: want{got: got{Reused: true, State: StatePublished, Names: publishedNames}},
		},
		"DigestIsNotPossession": {
			reason: "a BaseImage that names another's cached digest, with a URL that does not serve those bytes, is refused after hashing its URL, with an upload's mismatch message; nothing changes on the host",
			args: args{src: Source{URL: url, SHA256: other, Format: FormatRaw}, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, otherVol, other, FormatRaw, them, rawSize)
				owns(t, h, otherVol, them)
			}},
			want: want{
				got: got{Downloads: 1, Names: sortedNames(otherVol, MarkerName(otherVol), OwnerName(otherVol, them.UID))},
				err: &DigestMismatchError{URL: url, Want: other, Got: digest},
			},
		},
		"DigestIsNotPossessionWhileUploading": {
			reason: "nor does it wait for another's upload of that digest and attach when it ends",
			args: args{src: Source{URL: url, SHA256: other, Format: FormatRaw}, owner: us, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				claimed(t, h, otherVol, them, "other-process", RecordClaimed)
				owns(t, h, otherVol, them)
			}},
			want: want{
				got: got{Downloads: 1, State: StateDebris, Names: sortedNames(ClaimName(otherVol), OwnerName(otherVol, them.UID))},
				err: &DigestMismatchError{URL: url, Want: other, Got: digest},
			},
		},
		"NoOwner": {
			reason: "a publish names its owner",
			args:   args{src: pinned},
			want:   want{err: errors.New(errNoOwnerUID)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv.hits.Store(0)
			h, sh := fakestorage.New(), testShared()
			if tc.args.setup != nil {
				tc.args.setup(t, h, sh)
			}
			ctx := context.Background()
			if tc.args.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.args.timeout)
				defer cancel()
			}
			c := newFakeCache(h, sh, downloadsFor(t, allowServers(t, srv.Server)))
			res, err := c.Publish(ctx, tpool, tc.args.src, tc.args.owner, nil)
			h.Fail, h.BeforeCreate = nil, nil
			g := got{Reused: res.Reused, Bytes: res.Bytes, State: res.Image.State, Downloads: srv.hits.Load(), Names: names(h)}
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nPublish(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.got, g); diff != "" {
				t.Errorf("%s\nPublish(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// downloadHooked is a fake host that runs before, when set, ahead of each record read:
// another process acting between two reads of one lookup.
type downloadHooked struct {
	*fakestorage.Storage
	before func(name string)
}

func (h *downloadHooked) Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error {
	if h.before != nil {
		h.before(name)
	}
	return h.Storage.Download(ctx, pool, name, w, offset, length)
}

// TestPublishSettlesAMarkerBeingWritten: a lookup that reads the marker while another process
// is writing it (created, still empty) and the claim right after that process dropped it sees
// data that no record names. Publish looks again, finds the image published, and attaches:
// it never refuses the image as data no one made.
func TestPublishSettlesAMarkerBeingWritten(t *testing.T) {
	data := []byte(strings.Repeat("raw image bytes ", rawSize/16))
	digest := sha(data)
	vol := DigestVolumeName(digest, FormatRaw)
	srv := newRawServer(t, data)
	h := &downloadHooked{Storage: fakestorage.New()}
	h.Put(tpool, vol, data)
	h.Put(tpool, MarkerName(vol), nil) // the other process created it and is filling it
	claimed(t, h.Storage, vol, them, "other-process", RecordClaimed)
	owns(t, h.Storage, vol, them)
	claimReads := 0
	h.before = func(name string) {
		if name != ClaimName(vol) {
			return
		}
		// The first look (before Publish proves it has the bytes) sees the upload in progress;
		// during the second, the other process fills the marker and drops its claim between
		// our read of the one and of the other.
		if claimReads++; claimReads == 2 {
			published(t, h.Storage, vol, digest, FormatRaw, them, len(data))
			if err := h.DeleteVolume(context.Background(), tpool, ClaimName(vol)); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := New(h, testShared(), downloadsFor(t, allowServers(t, srv.Server)), WithClock(func() time.Time { return t0 }))
	res, err := c.Publish(context.Background(), tpool, Source{URL: srv.URL + "/img", SHA256: digest, Format: FormatRaw}, us, nil)
	if err != nil {
		t.Fatalf("Publish while another process finishes the upload: %v; want the published image attached", err)
	}
	want := sortedNames(vol, MarkerName(vol), OwnerName(vol, them.UID), OwnerName(vol, us.UID))
	if diff := cmp.Diff(want, names(h.Storage)); !res.Reused || diff != "" {
		t.Errorf("Publish: Reused=%v, volumes -want +got:\n%s", res.Reused, diff)
	}
}

// TestPublishRecordsClusterID: a provider with a cluster ID names it in the owner records and
// the marker it writes, and rewrites its BaseImage's record that named none (written before
// the provider had one), so that other clusters sharing the host leave them alone.
func TestPublishRecordsClusterID(t *testing.T) {
	data := []byte(strings.Repeat("raw image bytes ", rawSize/16))
	digest := sha(data)
	vol := DigestVolumeName(digest, FormatRaw)
	srv := newRawServer(t, data)
	src := Source{URL: srv.URL + "/img", SHA256: digest, Format: FormatRaw}
	want := inCluster(us, "cluster-a")
	cases := map[string]struct {
		reason string
		setup  func(t *testing.T, h *fakestorage.Storage)
	}{
		"Upload": {reason: "an upload's marker and owner record name the cluster"},
		"LegacyRecord": {
			reason: "an owner record of the BaseImage that names no cluster is rewritten to name it",
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, vol, digest, FormatRaw, want, rawSize)
				owns(t, h, vol, us)
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := fakestorage.New()
			if tc.setup != nil {
				tc.setup(t, h)
			}
			c := newFakeCache(h, testShared(), downloadsFor(t, allowServers(t, srv.Server)), WithClusterID("cluster-a"))
			if _, err := c.Publish(context.Background(), tpool, src, us, nil); err != nil {
				t.Fatalf("%s\nPublish(...): %v", tc.reason, err)
			}
			for _, n := range []string{MarkerName(vol), OwnerName(vol, us.UID)} {
				_, rec, invalid, err := c.readRecord(context.Background(), tpool, n)
				if err != nil || invalid != nil || rec == nil {
					t.Fatalf("%s\nrecord %s: %v %v", tc.reason, n, err, invalid)
				}
				if diff := cmp.Diff(want, rec.Owner); diff != "" {
					t.Errorf("%s\nowner in %s: -want, +got:\n%s", tc.reason, n, diff)
				}
			}
		})
	}
}
