package kvmdomain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/placement"
)

func TestRoomFor(t *testing.T) {
	ours := func(uid string) string { return domainXML(t, "d-"+uid, uid, domainxml.MAC(uid)) } // 1 vCPU, 512 MiB
	foreign := domainXML(t, "foreign", "", "52:54:00:aa:bb:cc")                                // not ours: not counted
	node := libvirt.NodeInfo{CPUs: 2, MemoryBytes: 1 << 30}
	one := placement.Ratios{CPU: 1, Memory: 1}
	want := domainxml.Size{VCPU: 1, MemoryMiB: 512}
	full := func(why string, vcpus, mib int64) error {
		return errors.Errorf(errHostFull, "root@h:22", "ClusterProviderConfig/a", why, 1.0, 1.0, "ClusterProviderConfig/a", vcpus, mib)
	}
	cases := map[string]struct {
		reason string
		defs   []string
		ratios placement.Ratios
		want   error
	}{
		"Empty":         {reason: "An empty host has room.", ratios: one},
		"LastRoom":      {reason: "One 512 MiB domain on a 1 GiB host leaves room for one more.", defs: []string{ours("u1"), foreign}, ratios: one},
		"Full":          {reason: "Two 512 MiB domains fill a 1 GiB host at ratio 1.", defs: []string{ours("u1"), ours("u2")}, ratios: one, want: full("needs 512 MiB of memory, 0 MiB left and needs 1 vCPUs, 0 left", 2, 1024)},
		"OwnNotCounted": {reason: "The resource's own domain (a re-definition) is not counted against it.", defs: []string{ours("u1"), ours("self")}, ratios: one},
		"Ratio":         {reason: "A memory ratio of 1.5 leaves 512 MiB on a 1 GiB host holding 1 GiB.", defs: []string{ours("u1"), ours("u2")}, ratios: placement.Ratios{CPU: 2, Memory: 1.5}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := roomFor(tc.defs, node, tc.ratios, "self", want, "root@h:22", "ClusterProviderConfig/a")
			if diff := cmp.Diff(tc.want, got, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nroomFor(): -want error, +got error:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRoomGuardRace is the race of two Proxies placed on the same host from the same view of
// it: their KVMDomains are defined at once on a host with room for one. The host's lock makes
// the room check and the definition one step, so exactly one is defined and the other is
// refused as host full.
func TestRoomGuardRace(t *testing.T) {
	h := newFakeHost()
	h.node = &libvirt.NodeInfo{CPUs: 4, MemoryBytes: 1 << 30}
	withDomain("team-c_old", "old-uid", libvirt.StateRunning)(t, h) // 512 MiB held: room for one more
	e := newExt(h, false)
	one := resource.MustParse("1")
	e.allocation = &v1alpha1.AllocationRatios{Memory: &one}
	// The fake host is not safe for concurrent use: every call to it below is made under
	// e.defines, the lock under test, so a data race here would be a finding of that lock.
	errs := make([]error, 2)
	crs := make([]*v1alpha1.KVMDomain, 2)
	xs := make([]string, 2)
	for i := range 2 {
		u := fmt.Sprintf("uid-%d", i)
		crs[i] = kvm(func(d *v1alpha1.KVMDomain) { d.SetUID(types.UID(u)); d.SetName(fmt.Sprintf("p%d", i)) })
		xs[i] = domainXML(t, fmt.Sprintf("team-a_p%d", i), u, domainxml.MAC(u))
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.define(context.Background(), crs[i], xs[i])
		}()
	}
	wg.Wait()
	var defined, refused int
	for _, err := range errs {
		switch {
		case err == nil:
			defined++
		case strings.HasPrefix(err.Error(), placement.ErrHostFull+": "):
			refused++
		default:
			t.Errorf("define(): unexpected error %v", err)
		}
	}
	if defined != 1 || refused != 1 {
		t.Errorf("two domains on a host with room for one: %d defined, %d refused; want 1 and 1", defined, refused)
	}
	if len(h.domains) != 2 {
		t.Errorf("the host holds %d domains, want 2 (the old one and one new)", len(h.domains))
	}
}
