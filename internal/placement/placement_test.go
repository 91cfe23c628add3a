package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

const gib = 1 << 30

var one = Ratios{CPU: 1, Memory: 1}

func host(name string, cpus, memGiB, usedCPU, usedMiB int64) Host {
	return Host{Name: name, Ready: true, Size: Size{VCPUs: cpus, MemoryBytes: memGiB * gib}, Used: Size{VCPUs: usedCPU, MemoryBytes: usedMiB * mib}, Ratios: one}
}

func TestPlace(t *testing.T) {
	small := Size{VCPUs: 1, MemoryBytes: 512 * mib}
	type want struct {
		host    string
		skipped []Skip
	}
	cases := map[string]struct {
		reason string
		hosts  []Host
		want   Size
		w      want
	}{
		"Fits": {
			reason: "The only host with room takes the Proxy.",
			hosts:  []Host{host("a", 4, 8, 0, 0)},
			want:   small,
			w:      want{host: "a"},
		},
		"MostMemoryLeft": {
			reason: "Among hosts with room, the one with the most memory left once placed wins, whatever its name.",
			hosts:  []Host{host("a", 4, 8, 0, 6144), host("b", 4, 8, 0, 1024)},
			want:   small,
			w:      want{host: "b"},
		},
		"TieOnMemoryGoesToMoreCPU": {
			reason: "Equal memory left: the host with more vCPUs left wins.",
			hosts:  []Host{host("a", 4, 8, 3, 0), host("b", 4, 8, 0, 0)},
			want:   small,
			w:      want{host: "b"},
		},
		"FullTieGoesToFirstName": {
			reason: "Equal in everything: the first name wins, whatever the order hosts come in.",
			hosts:  []Host{host("b", 4, 8, 0, 0), host("a", 4, 8, 0, 0)},
			want:   small,
			w:      want{host: "a"},
		},
		"MemoryRatio": {
			reason: "A memory ratio of 2 lets a host of 1 GiB whose domains hold 1 GiB take 512 MiB more; ratio 1 would not.",
			hosts: []Host{
				{Name: "a", Ready: true, Size: Size{VCPUs: 4, MemoryBytes: gib}, Used: Size{MemoryBytes: gib}, Ratios: Ratios{CPU: 1, Memory: 2}},
				{Name: "b", Ready: true, Size: Size{VCPUs: 4, MemoryBytes: gib}, Used: Size{MemoryBytes: gib}, Ratios: one},
			},
			want: small,
			w:    want{host: "a", skipped: []Skip{{Host: "b", Reason: "needs 512 MiB of memory, 0 MiB left"}}},
		},
		"CPURatio": {
			reason: "A CPU ratio of 4 lets 2 CPUs hold 8 vCPUs: 7 held, 1 more fits, 2 do not.",
			hosts: []Host{
				{Name: "a", Ready: true, Size: Size{VCPUs: 2, MemoryBytes: 8 * gib}, Used: Size{VCPUs: 7}, Ratios: Ratios{CPU: 4, Memory: 1}},
			},
			want: Size{VCPUs: 2, MemoryBytes: 512 * mib},
			w:    want{skipped: []Skip{{Host: "a", Reason: "needs 2 vCPUs, 1 left"}}},
		},
		"Cordoned": {
			reason: "A cordoned host is skipped even when it has the most room.",
			hosts:  []Host{func() Host { h := host("a", 8, 64, 0, 0); h.Unschedulable = true; return h }(), host("b", 4, 8, 0, 0)},
			want:   small,
			w:      want{host: "b", skipped: []Skip{{Host: "a", Reason: "cordoned (spec.unschedulable)"}}},
		},
		"Evacuating": {
			reason: "An evacuating host is skipped, and says why.",
			hosts:  []Host{func() Host { h := host("a", 8, 64, 0, 0); h.Unschedulable, h.Evacuating = true, true; return h }(), host("b", 4, 8, 0, 0)},
			want:   small,
			w:      want{host: "b", skipped: []Skip{{Host: "a", Reason: "evacuating (spec.evacuate)"}}},
		},
		"Unready": {
			reason: "A host the provider could not read is skipped.",
			hosts:  []Host{func() Host { h := host("a", 8, 64, 0, 0); h.Ready = false; return h }(), host("b", 4, 8, 0, 0)},
			want:   small,
			w:      want{host: "b", skipped: []Skip{{Host: "a", Reason: "not Ready (the provider could not read it on its last poll)"}}},
		},
		"UnknownSize": {
			reason: "A Ready host whose size was never read is skipped rather than taken as empty.",
			hosts:  []Host{{Name: "a", Ready: true, Ratios: one}},
			want:   small,
			w:      want{skipped: []Skip{{Host: "a", Reason: "its CPUs and memory are not known yet"}}},
		},
		"BadRatios": {
			reason: "A host whose ratios are invalid is skipped with the ratio's message.",
			hosts: []Host{func() Host {
				h := host("a", 8, 64, 0, 0)
				h.RatiosErr = errors.New("spec.allocation.cpu must be above 0, got 0")
				return h
			}()},
			want: small,
			w:    want{skipped: []Skip{{Host: "a", Reason: "spec.allocation.cpu must be above 0, got 0"}}},
		},
		"NothingFits": {
			reason: "When no host fits, nothing is chosen and every host says why.",
			hosts:  []Host{host("a", 1, 1, 1, 1024), host("b", 4, 1, 0, 768)},
			want:   small,
			w: want{skipped: []Skip{
				{Host: "a", Reason: "needs 512 MiB of memory, 0 MiB left and needs 1 vCPUs, 0 left"},
				{Host: "b", Reason: "needs 512 MiB of memory, 256 MiB left"},
			}},
		},
		"NoHosts": {
			reason: "No candidate: nothing chosen, nothing skipped.",
			want:   small,
			w:      want{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := Place(tc.hosts, tc.want)
			got := want{host: d.Host, skipped: d.Skipped}
			if diff := cmp.Diff(tc.w, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nPlace(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestPlaceRace is the race of two Proxies created in the same second: two placements made
// from the same view of the hosts choose the same host, because that view cannot know of the
// other. Placement alone cannot prevent it; the provider's check at definition time (Fit under
// the host's lock, counting the domains actually defined) refuses the second: see
// TestRoomGuard in internal/controller/kvmdomain.
func TestPlaceRace(t *testing.T) {
	view := []Host{host("a", 4, 2, 0, 1536), host("b", 4, 1, 0, 768)} // a: 512 MiB left, b: 256
	want := Size{VCPUs: 1, MemoryBytes: 512 * mib}
	first, second := Place(view, want), Place(view, want)
	if first.Host != "a" || second.Host != "a" {
		t.Fatalf("both placements should choose a, got %q and %q", first.Host, second.Host)
	}
	// Once the first domain is defined on a, a's room is gone: what the provider sees.
	after := Room(view[0].Size, Size{VCPUs: 1, MemoryBytes: 2048 * mib}, one)
	if why := Fit(after, want); why == "" {
		t.Errorf("the second domain should not fit on a once the first is defined")
	}
}

func TestRatiosOf(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	cases := map[string]struct {
		reason string
		in     *v1alpha1.AllocationRatios
		want   Ratios
		err    error
	}{
		"Defaults": {reason: "Unset ratios are the defaults.", want: Ratios{CPU: 16, Memory: 1.5}},
		"Given":    {reason: "Given ratios are used.", in: &v1alpha1.AllocationRatios{CPU: q("4"), Memory: q("1")}, want: Ratios{CPU: 4, Memory: 1}},
		"Zero": {
			reason: "A zero ratio is refused, naming the field.", in: &v1alpha1.AllocationRatios{Memory: q("0")},
			want: Ratios{CPU: 16, Memory: 0}, err: errors.New("spec.allocation.memory must be above 0, got 0"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := RatiosOf(tc.in)
			if diff := cmp.Diff(tc.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nRatiosOf(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nRatiosOf(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
