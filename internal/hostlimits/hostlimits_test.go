package hostlimits

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
)

const src = "ClusterProviderConfig/default"

// defaults are the CRD's defaults of spec.limits.
var defaults = Limits{Source: src, HostLimits: v1alpha1.HostLimits{
	MaxVirtualSizeGiB: 2048, MaxDiskSizeGiB: 2048, MaxMemoryMiB: 262144, MaxVCPU: 64, MinFreePoolMiB: 1024,
}}

func TestDomain(t *testing.T) {
	cases := map[string]struct {
		reason    string
		l         Limits
		vcpu, mem int64
		disk      uint64
		want      error
	}{
		"Small":     {reason: "a usual guest is within the defaults", l: defaults, vcpu: 2, mem: 2048, disk: 20 << 30},
		"AtTheCaps": {reason: "a cap is inclusive", l: defaults, vcpu: 64, mem: 262144, disk: 2048 << 30},
		"TooManyVCPU": {reason: "vcpu over maxVCPU is refused, naming the cap and the config", l: defaults, vcpu: 65, mem: 512, disk: 1 << 30,
			want: &ExceededError{What: "vcpu", Field: "maxVCPU", Asked: 65, Max: 64, Source: src}},
		"FourTiBMemory": {reason: "the 4 TiB admission allows is refused by the default cap", l: defaults, vcpu: 1, mem: 4 << 20,
			want: &ExceededError{What: "memoryMiB", Field: "maxMemoryMiB", Asked: 4 << 20, Max: 262144, Source: src}},
		"HugeVirtualSize": {reason: "a root disk of a base's 2^62-byte virtual size is refused", l: defaults, vcpu: 1, mem: 512, disk: 1 << 62,
			want: &ExceededError{What: "root disk GiB", Field: "maxDiskSizeGiB", Asked: 1 << 32, Max: 2048, Source: src}},
		"PartGiBRoundsUp": {reason: "a disk a byte over the cap is over it", l: defaults, vcpu: 1, mem: 512, disk: 2048<<30 + 1,
			want: &ExceededError{What: "root disk GiB", Field: "maxDiskSizeGiB", Asked: 2049, Max: 2048, Source: src}},
		"Unset": {reason: "zero caps do not limit", l: Limits{Source: src}, vcpu: 256, mem: 4 << 20, disk: 1 << 62},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.l.Domain(tc.vcpu, tc.mem, tc.disk)
			if diff := cmp.Diff(tc.want, got, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nDomain(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCounts(t *testing.T) {
	l := Limits{Source: src, HostLimits: v1alpha1.HostLimits{MaxDomainsPerNamespace: 2, MaxImagesPerNamespace: 1}}
	cases := map[string]struct {
		reason string
		got    error
		want   error
	}{
		"DomainsBelow": {reason: "one domain, one more allowed", got: l.DomainCount(1)},
		"DomainsAtCap": {reason: "two domains, the third refused", got: l.DomainCount(2),
			want: &ExceededError{What: "domains of this namespace on the host, with this one,", Field: "maxDomainsPerNamespace", Asked: 3, Max: 2, Source: src}},
		"ImagesAtCap": {reason: "one image, the second refused", got: l.ImageCount(1),
			want: &ExceededError{What: "images of this namespace on the host, with this one,", Field: "maxImagesPerNamespace", Asked: 2, Max: 1, Source: src}},
		"Unlimited": {reason: "unset counts do not limit", got: defaults.DomainCount(100000)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got, test.EquateErrors()); diff != "" {
				t.Errorf("%s\n-want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestExceededMessage(t *testing.T) {
	got := (&ExceededError{What: "memoryMiB", Field: "maxMemoryMiB", Asked: 8192, Max: 4096, Source: src}).Error()
	want := "memoryMiB 8192 exceeds limits.maxMemoryMiB 4096 of ClusterProviderConfig/default: nothing was made on the host; ask for less, or ask the platform team to raise the limit"
	if got != want {
		t.Errorf("Error():\n got %q\nwant %q", got, want)
	}
}

func TestCountDomains(t *testing.T) {
	def := func(ns, uid string) string {
		if ns == "" {
			return "<domain type='qemu'><name>foreign</name></domain>"
		}
		x, err := domainxml.Domain(domainxml.Spec{Name: ns + "_" + uid, Type: "qemu", VCPU: 1, MemoryMiB: 512, Firmware: "bios",
			RootDisk: domainxml.Volume{Pool: "p", Name: "v"}, Network: "default", MAC: domainxml.MAC(uid),
			Owner: domainxml.Owner{UID: uid, Namespace: ns, Name: uid}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	defs := []string{def("a", "1"), def("a", "2"), def("b", "3"), def("", "")}
	cases := map[string]struct {
		reason  string
		ns, uid string
		want    int
	}{
		"OwnNamespace": {reason: "domains marked as the namespace's count", ns: "a", uid: "9", want: 2},
		"LeavesItself": {reason: "the domain being created (defined by an earlier attempt) is not counted", ns: "a", uid: "2", want: 1},
		"OtherNS":      {reason: "another namespace's domains and unmarked ones are not counted", ns: "b", uid: "9", want: 1},
		"EmptyNS":      {reason: "a namespace with none", ns: "c", uid: "9", want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := CountDomains(defs, tc.ns, tc.uid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s\nCountDomains() = %d, want %d", tc.reason, got, tc.want)
			}
		})
	}
}

func TestRoom(t *testing.T) {
	cases := map[string]struct {
		reason          string
		l               Limits
		available, need uint64
		want            error
	}{
		"Room":  {reason: "image and margin fit", l: defaults, available: 10 << 30, need: 1 << 30},
		"Exact": {reason: "exactly image and margin fit", l: defaults, available: 2 << 30, need: 1 << 30},
		"NoMargin": {reason: "the image fits but the margin does not: refused", l: defaults, available: 2<<30 - 1, need: 1 << 30,
			want: &PoolFullError{Pool: "p", Available: 2<<30 - 1, Need: 2 << 30, Source: src}},
		"Empty": {reason: "a pool with no byte free has no room, even without a margin or a size", l: Limits{Source: src},
			want: &PoolFullError{Pool: "p", Need: 1, Source: src}},
		"FullPoolOverlay": {reason: "a new overlay (need 0) on a pool under the margin is refused", l: defaults, available: 10 << 20,
			want: &PoolFullError{Pool: "p", Available: 10 << 20, Need: 1<<30 + 1, Source: src}},
		"NoMarginSet": {reason: "without a margin, anything that fits", l: Limits{Source: src}, available: 5, need: 5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.l.Room("p", tc.available, tc.need)
			if diff := cmp.Diff(tc.want, got, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nRoom(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestIsNoSpace(t *testing.T) {
	cases := map[string]struct {
		reason string
		err    error
		want   bool
	}{
		"Nil":      {reason: "no error", err: nil},
		"Libvirt":  {reason: "libvirt's stream error text", err: errors.Wrap(errors.New("unable to write to '/p/v': No space left on device"), "cannot upload"), want: true},
		"PoolFull": {reason: "a refusal before the write", err: errors.Wrap(&PoolFullError{Pool: "p"}, "x"), want: true},
		"Other":    {reason: "another failure", err: errors.New("connection reset by peer")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsNoSpace(tc.err); got != tc.want {
				t.Errorf("%s\nIsNoSpace() = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

func TestResume(t *testing.T) {
	cases := map[string]struct {
		reason      string
		l           Limits
		why         PauseReason
		wantRunning bool
		available   uint64
		want        bool
	}{
		"IOErrorRoom":     {reason: "paused on an I/O error, pool has the margin again: resume", l: defaults, why: PausedIOError, wantRunning: true, available: 2 << 30, want: true},
		"IOErrorFull":     {reason: "pool still under the margin: the guest would pause again", l: defaults, why: PausedIOError, wantRunning: true, available: 100 << 20},
		"UserPaused":      {reason: "paused for another reason (virsh suspend): never resumed", l: defaults, why: PausedOther, wantRunning: true, available: 1 << 40},
		"WantStopped":     {reason: "the resource wants it stopped: not resumed", l: defaults, why: PausedIOError, available: 1 << 40},
		"NoMarginNoSpace": {reason: "without a margin, a pool with no byte free", l: Limits{}, why: PausedIOError, wantRunning: true},
		"NoMarginSpace":   {reason: "without a margin, any free space", l: Limits{}, why: PausedIOError, wantRunning: true, available: 4096, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.l.Resume(tc.why, tc.wantRunning, tc.available); got != tc.want {
				t.Errorf("%s\nResume() = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}
