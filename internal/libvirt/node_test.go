package libvirt

import (
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
)

func TestVersion(t *testing.T) {
	cases := map[uint64]string{0: "", 9_000_000: "9.0.0", 7_002_019: "7.2.19", 10_010_001: "10.10.1", 1_000: "0.1.0"}
	for v, want := range cases {
		if got := Version(v); got != want {
			t.Errorf("Version(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestDomainStat(t *testing.T) {
	p := func(field string, v any) golibvirt.TypedParam {
		return golibvirt.TypedParam{Field: field, Value: golibvirt.TypedParamValue{I: v}}
	}
	d := golibvirt.Domain{Name: "team-a_vm", UUID: golibvirt.UUID{1}}
	cases := map[string]struct {
		reason string
		params []golibvirt.TypedParam
		want   DomainStat
	}{
		"Running": {
			reason: "a running domain: its maximum vCPUs and memory (KiB to bytes)",
			params: []golibvirt.TypedParam{p("state.state", int32(golibvirt.DomainRunning)), p("state.reason", int32(1)),
				p("vcpu.current", uint32(1)), p("vcpu.maximum", uint32(2)), p("balloon.current", uint64(262144)), p("balloon.maximum", uint64(524288))},
			want: DomainStat{Handle: d, Active: true, State: StateRunning, VCPUs: 2, MemoryBytes: 512 << 20},
		},
		"ShutOff": {
			reason: "a defined domain is not active",
			params: []golibvirt.TypedParam{p("state.state", int32(golibvirt.DomainShutoff)), p("vcpu.maximum", uint32(1)), p("balloon.maximum", uint64(1048576))},
			want:   DomainStat{Handle: d, State: StateShutOff, VCPUs: 1, MemoryBytes: 1 << 30},
		},
		"Paused": {
			reason: "a paused domain holds its memory: active",
			params: []golibvirt.TypedParam{p("state.state", int32(golibvirt.DomainPaused))},
			want:   DomainStat{Handle: d, Active: true, State: StatePaused},
		},
		"OddTypes": {
			reason: "values of another numeric type, and strings, are read or skipped",
			params: []golibvirt.TypedParam{p("vcpu.maximum", int64(4)), p("balloon.maximum", "x")},
			want:   DomainStat{Handle: d, VCPUs: 4},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := domainStat(golibvirt.DomainStatsRecord{Dom: d, Params: tc.params})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\ndomainStat(): -want, +got:\n%s", tc.reason, diff)
			}
			if got.Name() != "team-a_vm" || got.UUID() != "01000000-0000-0000-0000-000000000000" {
				t.Errorf("Name(), UUID() = %q, %q", got.Name(), got.UUID())
			}
		})
	}
}
