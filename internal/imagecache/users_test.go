package imagecache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

func TestUsers(t *testing.T) {
	boom := errors.New("boom")
	other := "/var/lib/images/vm.qcow2"
	disk := func(d libvirt.DomainDisk) libvirt.DomainDisk {
		d.Domain, d.Target = "vm", "vda"
		if d.Device == "" {
			d.Device = "disk"
		}
		return d
	}
	type want struct {
		u   Usage
		err error
	}
	cases := map[string]struct {
		reason string
		setup  func(h *fakestorage.Storage)
		want   want
	}{
		"Unused": {
			reason: "nothing backs onto the base",
			setup:  func(h *fakestorage.Storage) { h.Put(tpool, "vm.root.qcow2", nil) },
		},
		"OverlayInPool": {
			reason: "a volume whose backing store is the base uses it",
			setup:  func(h *fakestorage.Storage) { h.PutOverlay(tpool, "vm.root.qcow2", pathA) },
			want:   want{u: Usage{Users: []string{"volume default/vm.root.qcow2"}}},
		},
		"OverlayInAnotherPool": {
			reason: "every pool is looked at",
			setup:  func(h *fakestorage.Storage) { h.PutOverlay("other", "vm.root.qcow2", pathA) },
			want:   want{u: Usage{Users: []string{"volume other/vm.root.qcow2"}}},
		},
		"DomainDisk": {
			reason: "a domain whose disk is the base uses it, running or not",
			setup:  func(h *fakestorage.Storage) { h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Path: pathA})} },
			want:   want{u: Usage{Users: []string{"domain vm disk vda"}}},
		},
		"DomainBackingChain": {
			reason: "a domain whose disk's backing chain holds the base uses it",
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Path: pathA, Backing: true, ChainKnown: true})}
			},
			want: want{u: Usage{Users: []string{"domain vm disk vda"}}},
		},
		"InactivePool": {
			reason: "an inactive pool's volumes cannot be checked",
			setup:  func(h *fakestorage.Storage) { h.Inactive = []string{"other"} },
			want:   want{u: Usage{Doubts: []string{"pool other is inactive, so its volumes cannot be checked (start the pool, or delete it)"}}},
		},
		"PoolUnreadable": {
			reason: "a pool that cannot be read is a doubt",
			setup: func(h *fakestorage.Storage) {
				h.Put("other", "x", nil)
				h.Fail = func(op, pool, _ string) error {
					if op == "Volumes" && pool == "other" {
						return boom
					}
					return nil
				}
			},
			want: want{u: Usage{Doubts: []string{"pool other cannot be read: boom"}}},
		},
		"PoolGone": {
			reason: "a pool deleted since it was listed is no doubt",
			setup: func(h *fakestorage.Storage) {
				h.Put("other", "x", nil)
				h.Fail = failOn("Volumes", "", fakestorage.NotFound)
			},
		},
		"DiskVolumeUnresolved": {
			reason: "a disk that is a volume libvirt cannot resolve is a doubt",
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Pool: "gone", Volume: "vm.qcow2", Format: "qcow2"})}
			},
			want: want{u: Usage{Doubts: []string{"domain vm disk vda is volume gone/vm.qcow2, which cannot be read"}}},
		},
		"DiskOutsidePools": {
			reason: "a qcow2 disk outside every pool whose chain libvirt does not show is a doubt",
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Path: other, Format: "qcow2"})}
			},
			want: want{u: Usage{Doubts: []string{"domain vm disk vda is " + other + ", which is in no active pool, and libvirt shows no backing chain for it while the domain is not running"}}},
		},
		"DiskInPool": {
			reason: "a disk that is a volume of a pool that was read was checked there",
			setup: func(h *fakestorage.Storage) {
				h.Put(tpool, "vm.root.qcow2", nil)
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Path: fakestorage.Path(tpool, "vm.root.qcow2"), Format: "qcow2"})}
			},
		},
		"DiskWithoutBacking": {
			reason: "cdroms, floppies, raw disks and disks whose chain is shown cannot hide a backing file",
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{
					disk(libvirt.DomainDisk{Path: other, Device: "cdrom"}),
					disk(libvirt.DomainDisk{Path: other, Device: "floppy"}),
					disk(libvirt.DomainDisk{Path: other, Format: "raw"}),
					disk(libvirt.DomainDisk{Path: other, Format: "qcow2", ChainKnown: true}),
				}
			},
		},
		"PoolsFail": {
			reason: "pools that cannot be listed fail the check",
			setup:  func(h *fakestorage.Storage) { h.Fail = failOn("AllPools", "", boom) },
			want:   want{err: errors.Wrapf(boom, errUsers, pathA)},
		},
		"DisksFail": {
			reason: "domains that cannot be listed fail the check",
			setup:  func(h *fakestorage.Storage) { h.Fail = failOn("DomainDiskSources", "", boom) },
			want:   want{err: errors.Wrapf(boom, errUsers, pathA)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := fakestorage.New()
			h.Put(tpool, volA, nil)
			tc.setup(h)
			u, err := newFakeCache(h, testShared(), Downloads{}).Users(context.Background(), pathA)
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nUsers(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.u, u); diff != "" {
				t.Errorf("%s\nUsers(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestUsersScoped(t *testing.T) {
	boom := errors.New("boom")
	disk := func(d libvirt.DomainDisk) libvirt.DomainDisk {
		d.Domain, d.Target, d.Device, d.Format = "vm", "vda", "disk", "qcow2"
		return d
	}
	unreadable := func(pool string) func(op, pool, name string) error {
		return func(op, p, _ string) error {
			if op == "Volumes" && p == pool {
				return boom
			}
			return nil
		}
	}
	overlayPools := map[string]bool{"vms": true}
	type want struct {
		u   Usage
		err error
	}
	cases := map[string]struct {
		reason  string
		overlay map[string]bool
		fail    error
		setup   func(h *fakestorage.Storage)
		want    want
	}{
		"InactiveUnrelatedPool": {
			reason:  "an inactive pool no overlay can be in is no doubt",
			overlay: overlayPools,
			setup:   func(h *fakestorage.Storage) { h.Inactive = []string{"backups"} },
		},
		"InactiveOverlayPool": {
			reason:  "an inactive pool overlays are made in is a doubt",
			overlay: overlayPools,
			setup:   func(h *fakestorage.Storage) { h.Inactive = []string{"vms"} },
			want:    want{u: Usage{Doubts: []string{"pool vms is inactive, so its volumes cannot be checked (start the pool, or delete it)"}}},
		},
		"UnreadableUnrelatedPool": {
			reason:  "a pool no overlay can be in that cannot be read is no doubt",
			overlay: overlayPools,
			setup: func(h *fakestorage.Storage) {
				h.Put("backups", "x", nil)
				h.Fail = unreadable("backups")
			},
		},
		"UnreadableBasePool": {
			reason:  "the base's own pool is always in scope",
			overlay: overlayPools,
			setup:   func(h *fakestorage.Storage) { h.Fail = unreadable(tpool) },
			want:    want{u: Usage{Doubts: []string{"pool " + tpool + " cannot be read: boom"}}},
		},
		"OverlayInUnrelatedPool": {
			reason:  "a volume that backs onto the base is a user wherever it is",
			overlay: overlayPools,
			setup:   func(h *fakestorage.Storage) { h.PutOverlay("backups", "vm.root.qcow2", pathA) },
			want:    want{u: Usage{Users: []string{"volume backups/vm.root.qcow2"}}},
		},
		"DiskVolumeOfUnrelatedPool": {
			reason:  "a disk that is an unresolved volume of a pool no overlay can be in is no doubt",
			overlay: overlayPools,
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Pool: "backups", Volume: "vm.qcow2"})}
			},
		},
		"DiskVolumeOfOverlayPool": {
			reason:  "a disk that is an unresolved volume of an overlay pool is a doubt",
			overlay: overlayPools,
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Pool: "vms", Volume: "vm.qcow2"})}
			},
			want: want{u: Usage{Doubts: []string{"domain vm disk vda is volume vms/vm.qcow2, which cannot be read"}}},
		},
		"DiskFileElsewhere": {
			reason:  "a shut-off domain's qcow2 file in no directory of an overlay pool is no doubt",
			overlay: overlayPools,
			setup: func(h *fakestorage.Storage) {
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Path: "/var/lib/images/vm.qcow2"})}
			},
		},
		"DiskFileInInactiveOverlayPool": {
			reason:  "a shut-off domain's qcow2 file in the directory of an inactive overlay pool is a doubt",
			overlay: overlayPools,
			setup: func(h *fakestorage.Storage) {
				h.Inactive = []string{"vms"}
				h.Disks = []libvirt.DomainDisk{disk(libvirt.DomainDisk{Path: fakestorage.Path("vms", "vm.qcow2")})}
			},
			want: want{u: Usage{Doubts: []string{
				"domain vm disk vda is " + fakestorage.Path("vms", "vm.qcow2") + ", which is in no active pool, and libvirt shows no backing chain for it while the domain is not running",
				"pool vms is inactive, so its volumes cannot be checked (start the pool, or delete it)",
			}}},
		},
		"OverlayPoolsFail": {
			reason: "overlay pools that cannot be found fail the check",
			fail:   boom,
			want:   want{err: errors.Wrapf(boom, errUsers, pathA)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := fakestorage.New()
			h.Put(tpool, volA, nil)
			if tc.setup != nil {
				tc.setup(h)
			}
			op := WithOverlayPools(func(context.Context) (map[string]bool, error) { return tc.overlay, tc.fail })
			u, err := newFakeCache(h, testShared(), Downloads{}, op).Users(context.Background(), pathA)
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nUsers(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.u, u); diff != "" {
				t.Errorf("%s\nUsers(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestUsersRecent: a removal's first check reuses a scan of the host for ScanReuse; Users
// always reads the host.
func TestUsersRecent(t *testing.T) {
	overlay := Usage{Users: []string{"volume default/vm.root.qcow2"}}
	type want struct{ Recent, Fresh Usage }
	cases := map[string]struct {
		reason string
		after  time.Duration
		want   want
	}{
		"Reused": {
			reason: "an overlay made after a scan a second old is not in the reused scan, but Users sees it",
			after:  time.Second,
			want:   want{Recent: Usage{}, Fresh: overlay},
		},
		"Expired": {
			reason: "a scan ScanReuse old is read again",
			after:  ScanReuse,
			want:   want{Recent: overlay, Fresh: overlay},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := fakestorage.New()
			h.Put(tpool, volA, nil)
			now := t0
			c := newFakeCache(h, testShared(), Downloads{}, WithClock(func() time.Time { return now }))
			if _, err := c.usersRecent(context.Background(), pathA); err != nil {
				t.Fatal(err)
			}
			h.PutOverlay(tpool, "vm.root.qcow2", pathA)
			now = now.Add(tc.after)
			recent, err := c.usersRecent(context.Background(), pathA)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := c.Users(context.Background(), pathA)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, want{Recent: recent, Fresh: fresh}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nusersRecent, Users: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// lateHost is a fake host on which late runs after the pools' volumes were listed, as the
// domains' disks are read: what it makes is missing from the scan's listings.
type lateHost struct {
	*fakestorage.Storage
	late func(h *fakestorage.Storage)
}

func (h lateHost) DomainDiskSources(ctx context.Context) ([]libvirt.DomainDisk, error) {
	if h.late != nil {
		h.late(h.Storage)
	}
	return h.Storage.DomainDiskSources(ctx)
}

// TestUsersVolumeDisks: disks whose source is a volume are resolved from the volumes the scan
// listed, without a call each; only one missing from a listing is looked up, and what cannot
// be resolved is a doubt, never unused. The calls of each scan are counted.
func TestUsersVolumeDisks(t *testing.T) {
	boom := errors.New("boom")
	vdisk := func(dom, pool, volume string) libvirt.DomainDisk {
		return libvirt.DomainDisk{Domain: dom, Target: "vda", Pool: pool, Volume: volume, Device: "disk", Format: "qcow2"}
	}
	// scan is the calls of one scan of a host with one active pool and no lookup.
	scan := func(extra map[string]int) map[string]int {
		m := map[string]int{"AllPools": 1, "Volumes": 1, "DomainDiskSources": 1}
		for k, v := range extra {
			m[k] += v
		}
		return m
	}
	type want struct {
		u     Usage
		calls map[string]int
	}
	cases := map[string]struct {
		reason string
		setup  func(h *fakestorage.Storage)
		late   func(h *fakestorage.Storage)
		want   want
	}{
		"BaseIsTheSource": {
			reason: "a domain whose disk is the base's own volume uses it, resolved from the listing",
			setup:  func(h *fakestorage.Storage) { h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, volA)} },
			want:   want{u: Usage{Users: []string{"domain vm disk vda"}}, calls: scan(nil)},
		},
		"OverlayFromListing": {
			reason: "a shut-off domain's overlay volume is checked as a volume of its pool: a user, and no doubt",
			setup: func(h *fakestorage.Storage) {
				h.PutOverlay(tpool, "vm.root.qcow2", pathA)
				h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, "vm.root.qcow2")}
			},
			want: want{u: Usage{Users: []string{"volume default/vm.root.qcow2"}}, calls: scan(nil)},
		},
		"UnrelatedFromListing": {
			reason: "a disk that is a listed volume backing onto something else is neither a user nor a doubt",
			setup: func(h *fakestorage.Storage) {
				h.PutOverlay(tpool, "vm.root.qcow2", "/pool/default/other.qcow2")
				h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, "vm.root.qcow2")}
			},
			want: want{calls: scan(nil)},
		},
		"ManyDomains": {
			reason: "fifty domains of two volume disks each cost no call beyond the listings: one per domain inside DomainDiskSources",
			setup: func(h *fakestorage.Storage) {
				for i := range 50 {
					root, seed := fmt.Sprintf("vm%02d.root.qcow2", i), fmt.Sprintf("vm%02d.seed.iso", i)
					h.PutOverlay(tpool, root, "/pool/default/other.qcow2")
					h.Put(tpool, seed, nil)
					h.Disks = append(h.Disks, vdisk(fmt.Sprintf("vm%02d", i), tpool, root), libvirt.DomainDisk{Domain: fmt.Sprintf("vm%02d", i), Target: "sda", Pool: tpool, Volume: seed, Device: "cdrom", Format: "raw"})
				}
			},
			want: want{calls: scan(nil)},
		},
		"MadeSinceListing": {
			reason: "a volume made after its pool was listed is looked up, and its backing store checked: a user",
			late: func(h *fakestorage.Storage) {
				h.PutOverlay(tpool, "vm.new.qcow2", pathA)
				h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, "vm.new.qcow2")}
			},
			want: want{u: Usage{Users: []string{"volume default/vm.new.qcow2"}}, calls: scan(map[string]int{"Volume": 1})},
		},
		"MadeSinceListingUnrelated": {
			reason: "a volume made after its pool was listed that backs onto nothing is looked up once, and is neither a user nor a doubt",
			late: func(h *fakestorage.Storage) {
				h.Put(tpool, "vm.new.qcow2", nil)
				h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, "vm.new.qcow2"), vdisk("vm2", tpool, "vm.new.qcow2")}
			},
			want: want{calls: scan(map[string]int{"Volume": 1})},
		},
		"MissingFromReadPool": {
			reason: "a disk naming a volume its pool does not have is looked up, and is a doubt",
			setup:  func(h *fakestorage.Storage) { h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, "vm.gone.qcow2")} },
			want: want{
				u:     Usage{Doubts: []string{"domain vm disk vda is volume default/vm.gone.qcow2, which cannot be read"}},
				calls: scan(map[string]int{"Volume": 1}),
			},
		},
		"LookupFails": {
			reason: "a volume made since the listing that cannot be read is a doubt, not unused",
			setup:  func(h *fakestorage.Storage) { h.Fail = failOn("Volume", "vm.new.qcow2", boom) },
			late: func(h *fakestorage.Storage) {
				h.PutOverlay(tpool, "vm.new.qcow2", pathA)
				h.Disks = []libvirt.DomainDisk{vdisk("vm", tpool, "vm.new.qcow2")}
			},
			want: want{
				u:     Usage{Doubts: []string{"domain vm disk vda is volume default/vm.new.qcow2, which cannot be read"}},
				calls: scan(map[string]int{"Volume": 1}),
			},
		},
		"InactivePool": {
			reason: "a disk that is a volume of an inactive pool is not looked up, and is a doubt beside the pool's",
			setup: func(h *fakestorage.Storage) {
				h.Inactive = []string{"vms"}
				h.Disks = []libvirt.DomainDisk{vdisk("vm", "vms", "vm.qcow2")}
			},
			want: want{
				u: Usage{Doubts: []string{
					"domain vm disk vda is volume vms/vm.qcow2, which cannot be read",
					"pool vms is inactive, so its volumes cannot be checked (start the pool, or delete it)",
				}},
				calls: scan(nil),
			},
		},
		"UnreadablePool": {
			reason: "a disk that is a volume of a pool that could not be listed is not looked up, and is a doubt beside the pool's",
			setup: func(h *fakestorage.Storage) {
				h.PutOverlay("other", "vm.qcow2", pathA)
				h.Fail = func(op, pool, _ string) error {
					if op == "Volumes" && pool == "other" {
						return boom
					}
					return nil
				}
				h.Disks = []libvirt.DomainDisk{vdisk("vm", "other", "vm.qcow2")}
			},
			want: want{
				u: Usage{Doubts: []string{
					"domain vm disk vda is volume other/vm.qcow2, which cannot be read",
					"pool other cannot be read: boom",
				}},
				calls: map[string]int{"AllPools": 1, "Volumes": 2, "DomainDiskSources": 1},
			},
		},
		"PoolNotOnHost": {
			reason: "a disk that is a volume of a pool the host does not have is not looked up, and is a doubt",
			setup:  func(h *fakestorage.Storage) { h.Disks = []libvirt.DomainDisk{vdisk("vm", "gone", "vm.qcow2")} },
			want: want{
				u:     Usage{Doubts: []string{"domain vm disk vda is volume gone/vm.qcow2, which cannot be read"}},
				calls: scan(nil),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := fakestorage.New()
			h.Put(tpool, volA, nil)
			if tc.setup != nil {
				tc.setup(h)
			}
			u, err := newFakeCache(lateHost{Storage: h, late: tc.late}, testShared(), Downloads{}).Users(context.Background(), pathA)
			if err != nil {
				t.Fatalf("%s\nUsers(...): %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want.u, u, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nUsers(...): -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.calls, h.Calls); diff != "" {
				t.Errorf("%s\ncalls of the scan: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
