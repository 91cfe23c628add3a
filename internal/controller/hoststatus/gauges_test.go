package hoststatus

import (
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"

	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

func TestGauges(t *testing.T) {
	ours := golibvirt.Domain{Name: "team-a_web", UUID: golibvirt.UUID{1}}
	r := Reading{
		Node:       lv.NodeInfo{MemoryBytes: 16 << 30},
		FreeMemory: 6 << 30,
		Domains: []lv.DomainStat{
			{Handle: ours, State: lv.StateRunning},
			{Handle: golibvirt.Domain{Name: "team-a_db", UUID: golibvirt.UUID{2}}, State: lv.StateShutOff},
			{Handle: golibvirt.Domain{Name: "someone-else", UUID: golibvirt.UUID{3}}, State: lv.StateRunning},
			{Handle: golibvirt.Domain{Name: "paused", UUID: golibvirt.UUID{4}}, State: lv.StatePaused},
		},
		Ours: map[string]bool{lv.DomainStat{Handle: ours}.UUID(): true, lv.DomainStat{Handle: golibvirt.Domain{UUID: golibvirt.UUID{2}}}.UUID(): true},
		Pools: []PoolReading{
			{Name: "default", Pool: lv.Pool{CapacityBytes: 100, AllocationBytes: 40, AvailableBytes: 60}},
			{Name: "gone", Missing: true},
		},
	}
	want := metrics.HostFigures{
		Domains: map[metrics.DomainKey]int{
			{State: lv.StateRunning, Managed: true}:  1,
			{State: lv.StateShutOff, Managed: true}:  1,
			{State: lv.StateRunning, Managed: false}: 1,
			{State: lv.StatePaused, Managed: false}:  1,
		},
		Pools:       map[string][3]uint64{"default": {100, 40, 60}},
		MemoryTotal: 16 << 30,
		MemoryFree:  6 << 30,
	}
	if diff := cmp.Diff(want, Gauges(r)); diff != "" {
		t.Errorf("Gauges: -want, +got:\n%s", diff)
	}
}
