package imagecache

import (
	"context"
	"testing"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

func TestSweep(t *testing.T) {
	boom := errors.New("boom")
	volB := DigestVolumeName(sumA, FormatRaw)
	type want struct {
		removed []string
		kept    map[string]error
		err     error
		names   []string
	}
	cases := map[string]struct {
		reason  string
		cluster string
		alive   Liveness
		setup   func(t *testing.T, h *fakestorage.Storage)
		want    want
	}{
		"NoLiveness": {
			reason: "without a Liveness no owner can be judged gone: nothing is done",
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, gone, rawSize)
			},
			want: want{names: sortedNames(volA, MarkerName(volA))},
		},
		"OwnersGone": {
			reason: "a volume whose owners are all gone is removed once unused",
			alive:  liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, gone, rawSize)
				owns(t, h, volA, gone)
			},
			want: want{removed: []string{volA}},
		},
		"LiveOwner": {
			reason: "a volume with a live owner stays; its stale records go",
			alive:  liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, us, rawSize)
				owns(t, h, volA, us)
				owns(t, h, volA, gone)
			},
			want: want{names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID))},
		},
		"InUse": {
			reason: "a volume without owners that is in use stays, and says why",
			alive:  liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, gone, rawSize)
				h.PutOverlay(tpool, "vm.root.qcow2", pathA)
				published(t, h, volB, sumA, FormatRaw, gone, rawSize)
			},
			want: want{
				removed: []string{volB},
				kept:    map[string]error{volA: &InUseError{Pool: tpool, Volume: volA, Users: []string{"volume default/vm.root.qcow2"}}},
				names:   sortedNames(volA, MarkerName(volA), "vm.root.qcow2"),
			},
		},
		"AnotherClustersOwner": {
			reason:  "an owner of another cluster sharing the host is unknown here, not gone: its record and the volume stay",
			cluster: "cluster-a",
			alive:   liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, inCluster(gone, "cluster-a"), rawSize)
				owns(t, h, volA, inCluster(them, "cluster-b"))
				owns(t, h, volA, inCluster(gone, "cluster-a"))
			},
			want: want{names: sortedNames(volA, MarkerName(volA), OwnerName(volA, them.UID))},
		},
		"OwnClusterAndUnnamedJudged": {
			reason:  "the records of this provider's cluster, and those that name no cluster, are judged: gone owners' go, and the volume with them",
			cluster: "cluster-a",
			alive:   liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, inCluster(gone, "cluster-b"), rawSize)
				owns(t, h, volA, inCluster(gone, "cluster-a"))
				owns(t, h, volA, them)
			},
			want: want{removed: []string{volA}},
		},
		"NoClusterIDLeavesNamedClusters": {
			reason: "a provider without a cluster ID judges only the records that name none",
			alive:  liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, gone, rawSize)
				owns(t, h, volA, inCluster(them, "cluster-b"))
				owns(t, h, volA, gone)
			},
			want: want{names: sortedNames(volA, MarkerName(volA), OwnerName(volA, them.UID))},
		},
		"LegacyLeftAlone": {
			reason: "volumes from before shared images are not swept",
			alive:  liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, legacyVol, sumA, FormatRaw, gone, rawSize)
			},
			want: want{names: sortedNames(legacyVol, MarkerName(legacyVol))},
		},
		"OwnersUnreadable": {
			reason: "a volume whose owners cannot be read stays, and says why",
			alive:  liveOnly(us),
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, gone, rawSize)
				owns(t, h, volA, gone)
				h.Fail = failOn("Download", OwnerName(volA, gone.UID), boom)
			},
			want: want{
				kept:  map[string]error{volA: errors.Wrapf(boom, errReadRecord, OwnerName(volA, gone.UID), tpool)},
				names: sortedNames(volA, MarkerName(volA), OwnerName(volA, gone.UID)),
			},
		},
		"ListFails": {
			reason: "a pool that cannot be listed fails the sweep",
			alive:  liveOnly(us),
			setup:  func(_ *testing.T, h *fakestorage.Storage) { h.Fail = failOn("VolumeNames", "", boom) },
			want:   want{err: boom},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := fakestorage.New()
			tc.setup(t, h)
			opts := []Option{WithClusterID(tc.cluster)}
			if tc.alive != nil {
				opts = append(opts, WithLiveness(tc.alive))
			}
			removed, kept, err := newFakeCache(h, testShared(), Downloads{}, opts...).Sweep(context.Background(), tpool)
			h.Fail = nil
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nSweep(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.removed, removed); diff != "" {
				t.Errorf("%s\nSweep(...) removed: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.kept, kept, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nSweep(...) kept: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.names, names(h)); diff != "" {
				t.Errorf("%s\nvolumes after Sweep: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
