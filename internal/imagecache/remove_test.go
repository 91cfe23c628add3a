package imagecache

import (
	"context"
	"testing"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

func TestRemove(t *testing.T) {
	boom := errors.New("boom")
	inactive := "pool other is inactive, so its volumes cannot be checked (start the pool, or delete it)"
	type args struct {
		volume string
		uid    string
		alive  Liveness
		// overlayPools, when set, scopes the doubts (WithOverlayPools).
		overlayPools map[string]bool
		// namespace of the caller (WithNamespace).
		namespace string
		setup     func(t *testing.T, h *fakestorage.Storage, sh *Shared)
		// after runs once a volume was deleted (another process acting meanwhile).
		after func(h *fakestorage.Storage, name string)
	}
	type want struct {
		r     Removal
		err   error
		names []string
	}
	publishedOwned := func(t *testing.T, h *fakestorage.Storage, owners ...Owner) {
		published(t, h, volA, sumA, FormatQCOW2, owners[0], rawSize)
		for _, o := range owners {
			owns(t, h, volA, o)
		}
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"NotAVolume": {
			reason: "a name that is not a BaseImage volume's is refused",
			args:   args{volume: "team-b.root.qcow2", uid: us.UID},
			want:   want{err: errors.Errorf(errNotOurs, "team-b.root.qcow2")},
		},
		"Absent": {
			reason: "a volume already gone is success",
			args:   args{volume: volA, uid: us.UID},
			want:   want{},
		},
		"AbsentWithOwnRecord": {
			reason: "the caller's record of a volume already gone is deleted",
			args:   args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) { owns(t, h, volA, us) }},
			want:   want{},
		},
		"OthersRemain": {
			reason: "while another live owner remains, only the caller's record goes",
			args:   args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) { publishedOwned(t, h, them, us) }},
			want:   want{r: Removal{Kept: true, Owners: 1}, names: sortedNames(volA, MarkerName(volA), OwnerName(volA, them.UID))},
		},
		"LastOwner": {
			reason: "the last owner's Remove deletes the data, its marker and its record",
			args:   args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) { publishedOwned(t, h, us) }},
			want:   want{},
		},
		"StaleOwnersSwept": {
			reason: "records of owners gone from the cluster are deleted first: the caller is the last",
			args: args{volume: volA, uid: us.UID, alive: liveOnly(us),
				setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) { publishedOwned(t, h, gone, us) }},
			want: want{},
		},
		"DataWithoutRecords": {
			reason: "data that no record names was never ours",
			args:   args{volume: volA, uid: us.UID, setup: func(_ *testing.T, h *fakestorage.Storage, _ *Shared) { h.Put(tpool, volA, []byte("x")) }},
			want:   want{err: &OwnedByOtherError{Pool: tpool, Volume: volA}, names: []string{volA}},
		},
		"LegacyOfLiveOwner": {
			reason: "a volume from before shared images is its publisher's while it exists",
			args: args{volume: legacyVol, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, legacyVol, sumA, FormatQCOW2, them, rawSize)
			}},
			want: want{err: &OwnedByOtherError{Pool: tpool, Volume: legacyVol, Owner: them}, names: sortedNames(legacyVol, MarkerName(legacyVol))},
		},
		"LegacyOfGoneOwner": {
			reason: "a volume from before shared images whose publisher is gone is anyone's to remove",
			args: args{volume: legacyVol, uid: us.UID, alive: liveOnly(us), setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, legacyVol, sumA, FormatQCOW2, gone, rawSize)
			}},
			want: want{},
		},
		"InUseByOverlay": {
			reason: "a volume another volume backs onto stays, with the caller's record",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.PutOverlay(tpool, "vm.root.qcow2", pathA)
			}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Users: []string{"volume default/vm.root.qcow2"}},
				names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID), "vm.root.qcow2"),
			},
		},
		"InUseByDomain": {
			reason: "a volume a domain's disk uses stays",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.Disks = []libvirt.DomainDisk{{Domain: "vm", Target: "vda", Path: pathA, Device: "disk", Format: "qcow2"}}
			}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Users: []string{"domain vm disk vda"}},
				names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID)),
			},
		},
		"InactivePoolLeftToSweep": {
			reason: "the last owner of a volume nothing is seen to use lets go of it despite a doubt: its record goes, the volume stays for the sweep",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.Inactive = []string{"other"}
			}},
			want: want{
				r:     Removal{Left: true, Doubts: []string{inactive}},
				names: sortedNames(volA, MarkerName(volA)),
			},
		},
		"InactivePoolSweepKeeps": {
			reason: "the sweep removes no volume whose users cannot be ruled out",
			args: args{volume: volA, uid: "", setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, volA, sumA, FormatQCOW2, us, rawSize)
				h.Inactive = []string{"other"}
			}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Doubts: []string{inactive}},
				names: sortedNames(volA, MarkerName(volA)),
			},
		},
		"InactiveUnrelatedPool": {
			reason: "an inactive pool no overlay can be in (not among the overlay pools) is no doubt: the sweep removes the unused volume",
			args: args{volume: volA, uid: "", overlayPools: map[string]bool{tpool: true, "vms": true}, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, volA, sumA, FormatQCOW2, us, rawSize)
				h.Inactive = []string{"other"}
			}},
			want: want{},
		},
		"InactiveOverlayPool": {
			reason: "an inactive pool overlays are made in stays a doubt",
			args: args{volume: volA, uid: "", overlayPools: map[string]bool{"other": true}, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, volA, sumA, FormatQCOW2, us, rawSize)
				h.Inactive = []string{"other"}
			}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Doubts: []string{inactive}},
				names: sortedNames(volA, MarkerName(volA)),
			},
		},
		"FreshClaimOfAnother": {
			reason: "an upload another process still renews is never deleted under it",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				claimed(t, h, volA, them, "other-process", RecordClaimed)
			}},
			want: want{
				err:   errors.Errorf(errClaimHeld, volA, tpool),
				names: sortedNames(volA, MarkerName(volA), ClaimName(volA), OwnerName(volA, us.UID)),
			},
		},
		"StaleClaimOfAnother": {
			reason: "a claim whose holder stopped renewing it is debris: the removal goes on",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, sh *Shared) {
				publishedOwned(t, h, us)
				claimed(t, h, volA, them, "other-process", RecordClaimed)
				staleClaim(h, sh, volA)
			}},
			want: want{},
		},
		"OurUploadClaim": {
			reason: "an upload claim this process holds for the caller is no obstacle",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				claimed(t, h, volA, us, holder, RecordClaimed)
			}},
			want: want{},
		},
		"Sweeper": {
			reason: "Sweep removes a volume without owners in its own name",
			args: args{volume: volA, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				published(t, h, volA, sumA, FormatQCOW2, gone, rawSize)
			}},
			want: want{},
		},
		"OwnerAddedWhileUnpublishing": {
			reason: "an owner added once the marker is gone: the marker is restored and the caller detaches",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) { publishedOwned(t, h, us) },
				after: func(h *fakestorage.Storage, name string) {
					if name == MarkerName(volA) {
						b, _ := Record{State: RecordOwner, Volume: volA, Owner: them, Format: FormatQCOW2, Time: t0}.Encode()
						h.Put(tpool, OwnerName(volA, them.UID), b)
					}
				}},
			want: want{r: Removal{Kept: true, Owners: 1}, names: sortedNames(volA, MarkerName(volA), OwnerName(volA, them.UID))},
		},
		"OverlayCreatedWhileUnpublishing": {
			reason: "an overlay another process created before the marker went: the marker is restored and the volume stays",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) { publishedOwned(t, h, us) },
				after: func(h *fakestorage.Storage, name string) {
					if name == MarkerName(volA) {
						h.PutOverlay(tpool, "vm.root.qcow2", pathA)
					}
				}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Users: []string{"volume default/vm.root.qcow2"}},
				names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID), "vm.root.qcow2"),
			},
		},
		"DebrisNotRestored": {
			reason: "debris (a torn marker) found in use after unpublishing is not marked again",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				h.Put(tpool, volA, make([]byte, rawSize))
				h.Put(tpool, MarkerName(volA), []byte(`{"schema":1,`))
				owns(t, h, volA, us)
			}, after: func(h *fakestorage.Storage, name string) {
				if name == MarkerName(volA) {
					h.PutOverlay(tpool, "vm.root.qcow2", pathA)
				}
			}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Users: []string{"volume default/vm.root.qcow2"}},
				names: sortedNames(volA, OwnerName(volA, us.UID), "vm.root.qcow2"),
			},
		},
		"CoOwnerKeepsRecordForOwnOverlay": {
			reason: "a co-owner whose namespace's overlay backs onto the volume keeps its record, naming only its own overlay",
			args: args{volume: volA, uid: us.UID, namespace: "ns-a", setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, them, us)
				h.PutOverlay(tpool, "ns-a_vm-1234abcd.root.qcow2", pathA)
				h.PutOverlay(tpool, "ns-b_db-1234abcd.root.qcow2", pathA)
			}},
			want: want{
				err: &InUseError{Pool: tpool, Volume: volA, Namespace: "ns-a",
					Users: []string{"volume default/ns-a_vm-1234abcd.root.qcow2", "volume default/ns-b_db-1234abcd.root.qcow2"}},
				names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID), OwnerName(volA, them.UID), "ns-a_vm-1234abcd.root.qcow2", "ns-b_db-1234abcd.root.qcow2"),
			},
		},
		"CoOwnerDetachesFromOthersOverlay": {
			reason: "another namespace's overlay does not keep a co-owner",
			args: args{volume: volA, uid: us.UID, namespace: "ns-a", setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, them, us)
				h.PutOverlay(tpool, "ns-b_db-1234abcd.root.qcow2", pathA)
			}},
			want: want{r: Removal{Kept: true, Owners: 1}, names: sortedNames(volA, MarkerName(volA), OwnerName(volA, them.UID), "ns-b_db-1234abcd.root.qcow2")},
		},
		"LastOwnerLeavesToOthers": {
			reason: "the last owner of a volume that only another namespace's disks use leaves: its record goes, the volume stays for them",
			args: args{volume: volA, uid: us.UID, namespace: "ns-a", setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.PutOverlay(tpool, "ns-b_db-1234abcd.root.qcow2", pathA)
				h.Disks = []libvirt.DomainDisk{{Domain: "ns-b_db", Target: "vda", Path: fakestorage.Path(tpool, "ns-b_db-1234abcd.root.qcow2"), Device: "disk", Format: "qcow2", Backing: false, ChainKnown: true}}
			}},
			want: want{r: Removal{Left: true, OtherUsers: 1}, names: sortedNames(volA, MarkerName(volA), "ns-b_db-1234abcd.root.qcow2")},
		},
		"LastOwnerOwnOverlay": {
			reason: "the last owner whose namespace's overlay uses the volume stays",
			args: args{volume: volA, uid: us.UID, namespace: "ns-a", setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.PutOverlay(tpool, "ns-a_vm-1234abcd.root.qcow2", pathA)
			}},
			want: want{
				err:   &InUseError{Pool: tpool, Volume: volA, Namespace: "ns-a", Users: []string{"volume default/ns-a_vm-1234abcd.root.qcow2"}},
				names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID), "ns-a_vm-1234abcd.root.qcow2"),
			},
		},
		"LookupFails": {
			reason: "a failed lookup is an error, not a verdict",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.Fail = failOn("Volume", volA, boom)
			}},
			want: want{err: errors.Wrapf(boom, errLookup, volA, tpool), names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID))},
		},
		"UsersFail": {
			reason: "users that cannot be listed keep the volume",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.Fail = failOn("AllPools", "", boom)
			}},
			want: want{err: errors.Wrapf(boom, errUsers, pathA), names: sortedNames(volA, MarkerName(volA), OwnerName(volA, us.UID))},
		},
		"DeleteFails": {
			reason: "a delete that fails leaves the volume claimed for removal, unpublished",
			args: args{volume: volA, uid: us.UID, setup: func(t *testing.T, h *fakestorage.Storage, _ *Shared) {
				publishedOwned(t, h, us)
				h.Fail = failOn("DeleteVolume", volA, boom)
			}},
			want: want{err: errors.Wrapf(boom, errRemove, volA, tpool), names: sortedNames(volA, ClaimName(volA), OwnerName(volA, us.UID))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h, sh := fakestorage.New(), testShared()
			if tc.args.setup != nil {
				tc.args.setup(t, h, sh)
			}
			hh := &hooked{Storage: h}
			if tc.args.after != nil {
				hh.after = func(n string) { tc.args.after(h, n) }
			}
			var opts []Option
			if tc.args.alive != nil {
				opts = append(opts, WithLiveness(tc.args.alive))
			}
			if tc.args.overlayPools != nil {
				opts = append(opts, WithOverlayPools(func(context.Context) (map[string]bool, error) { return tc.args.overlayPools, nil }))
			}
			if tc.args.namespace != "" {
				opts = append(opts, WithNamespace(tc.args.namespace))
			}
			r, err := newFakeCache(hh, sh, Downloads{}, opts...).Remove(context.Background(), tpool, tc.args.volume, tc.args.uid)
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nRemove(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.r, r); diff != "" {
				t.Errorf("%s\nRemove(...): -want, +got:\n%s", tc.reason, diff)
			}
			h.Fail = nil
			if diff := cmp.Diff(tc.want.names, names(h)); diff != "" {
				t.Errorf("%s\nvolumes after Remove: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
