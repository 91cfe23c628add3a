package hoststatus

import (
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// Gauges are the host gauges of one status read: domains by state (ours apart), pool
// capacity, allocation and available bytes, total and free memory. They come from what Read
// already asked (DomainStats, PoolUsage, NodeInfo, FreeMemory): no call of their own.
func Gauges(r Reading) metrics.HostFigures {
	f := metrics.HostFigures{Domains: map[metrics.DomainKey]int{}, Pools: map[string][3]uint64{},
		MemoryTotal: r.Node.MemoryBytes, MemoryFree: r.FreeMemory}
	for _, d := range r.Domains {
		f.Domains[metrics.DomainKey{State: d.State, Managed: r.Ours[d.UUID()]}]++
	}
	for _, p := range r.Pools {
		if p.Missing {
			continue
		}
		f.Pools[p.Name] = [3]uint64{p.Pool.CapacityBytes, p.Pool.AllocationBytes, p.Pool.AvailableBytes}
	}
	return f
}
