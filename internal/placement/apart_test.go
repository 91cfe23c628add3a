package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlaceApart(t *testing.T) {
	small := Size{VCPUs: 1, MemoryBytes: 512 * mib}
	a, b, full := host("a", 8, 16, 0, 0), host("b", 8, 8, 0, 0), host("full", 8, 1, 0, 1024)
	cases := map[string]struct {
		reason string
		hosts  []Host
		taken  map[string]int
		mode   AntiAffinity
		want   string
	}{
		"FirstReplica": {reason: "Without replicas yet, the roomiest host.",
			hosts: []Host{a, b}, mode: Strict, want: "a"},
		"SecondApart": {reason: "A second replica goes to another host, though it has less room.",
			hosts: []Host{a, b}, taken: map[string]int{"a": 1}, mode: Strict, want: "b"},
		"StrictNoOtherHost": {reason: "Strict: no host without a replica fits, so none.",
			hosts: []Host{a, full}, taken: map[string]int{"a": 1}, mode: Strict, want: ""},
		"PreferredFallsBack": {reason: "Preferred: when only a host with a replica fits, there.",
			hosts: []Host{a, full}, taken: map[string]int{"a": 1}, mode: Preferred, want: "a"},
		"PreferredFewest": {reason: "Preferred: among hosts with replicas, the one with the fewest.",
			hosts: []Host{a, b}, taken: map[string]int{"a": 2, "b": 1}, mode: Preferred, want: "b"},
		"PreferredStillSkipsUnfit": {reason: "Preferred never places on a host without room.",
			hosts: []Host{full}, taken: map[string]int{"full": 1}, mode: Preferred, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := PlaceApart(tc.hosts, small, tc.taken, tc.mode)
			if diff := cmp.Diff(tc.want, d.Host); diff != "" {
				t.Errorf("%s\nPlaceApart host (-want +got):\n%s (skipped %v)", tc.reason, diff, d.Skipped)
			}
			if tc.want == "" && len(d.Skipped) != len(tc.hosts) {
				t.Errorf("%s\nan unplaced replica must say why for every host, got %v", tc.reason, d.Skipped)
			}
		})
	}
}
