package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHostLabel(t *testing.T) {
	cases := map[string]struct {
		address, want string
	}{
		"SSH":           {address: "kvm@10.0.0.5:22", want: "10.0.0.5:22"},
		"NoUser":        {address: "10.0.0.5:22", want: "10.0.0.5:22"},
		"Unix":          {address: "unix:/run/libvirt/libvirt-sock", want: "unix:/run/libvirt/libvirt-sock"},
		"UnixWithAtSig": {address: "unix:/tmp/a@b/sock", want: "unix:/tmp/a@b/sock"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, HostLabel(tc.address)); diff != "" {
				t.Errorf("HostLabel(%q): -want +got:\n%s", tc.address, diff)
			}
		})
	}
}

func TestKindFrom(t *testing.T) {
	cases := map[string]struct {
		ctx  context.Context
		want string
	}{
		"None":  {ctx: context.Background(), want: KindOther},
		"Empty": {ctx: WithKind(context.Background(), ""), want: KindOther},
		"Set":   {ctx: WithKind(context.Background(), "BaseImage"), want: "BaseImage"},
		"Inner": {ctx: WithKind(WithKind(context.Background(), "BaseImage"), "KVMDomain"), want: "KVMDomain"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, KindFrom(tc.ctx)); diff != "" {
				t.Errorf("KindFrom: -want +got:\n%s", diff)
			}
		})
	}
}

// The counters are exposed under their names and labels.
func TestCounters(t *testing.T) {
	c := New()
	r := prometheus.NewRegistry()
	if err := c.Register(r); err != nil {
		t.Fatal(err)
	}
	ctx := WithKind(context.Background(), "SeedVolume")
	c.Call(ctx, "StorageVolGetInfo")
	c.Call(ctx, "StorageVolGetInfo")
	c.Call(context.Background(), "ConnectOpen")
	c.Opened("10.0.0.5:22")
	c.ConnectFailed("10.0.0.6:22")
	c.ConnectFailed("10.0.0.6:22")
	c.ConnectFailed("10.0.0.7:22")
	c.Reachable("10.0.0.7:22")
	c.Orphans("ClusterProviderConfig/default", 3)
	c.Orphans("ClusterProviderConfig/default", 2)
	c.OrphansDeleted("ClusterProviderConfig/default", 0)
	c.OrphansDeleted("ClusterProviderConfig/default", 1)
	c.OrphansDeleted("ProviderConfig/team-a/own", 2)
	want := `
# HELP provider_kvm_libvirt_calls_total libvirt RPCs made, by the managed resource kind whose reconcile made them (other when unknown) and the RPC.
# TYPE provider_kvm_libvirt_calls_total counter
provider_kvm_libvirt_calls_total{kind="SeedVolume",op="StorageVolGetInfo"} 2
provider_kvm_libvirt_calls_total{kind="other",op="ConnectOpen"} 1
# HELP provider_kvm_libvirt_connections_opened_total libvirt connections opened: the host's shared one (first open and reconnects) and those of their own (downloads and uploads).
# TYPE provider_kvm_libvirt_connections_opened_total counter
provider_kvm_libvirt_connections_opened_total{host="10.0.0.5:22"} 1
# HELP provider_kvm_host_connect_failures_total Connection attempts to the libvirt host that failed.
# TYPE provider_kvm_host_connect_failures_total counter
provider_kvm_host_connect_failures_total{host="10.0.0.6:22"} 2
provider_kvm_host_connect_failures_total{host="10.0.0.7:22"} 1
# HELP provider_kvm_host_unreachable 1 while the libvirt host's circuit breaker is open (its last connection attempt failed), else 0.
# TYPE provider_kvm_host_unreachable gauge
provider_kvm_host_unreachable{host="10.0.0.6:22"} 1
provider_kvm_host_unreachable{host="10.0.0.7:22"} 0
# HELP provider_kvm_host_orphans Orphans (objects with the provider's ownership record whose managed resource is gone) the config's last host status read found.
# TYPE provider_kvm_host_orphans gauge
provider_kvm_host_orphans{config="ClusterProviderConfig/default"} 2
# HELP provider_kvm_host_orphans_deleted_total Orphans removed from the host through the config (spec.orphans: Delete).
# TYPE provider_kvm_host_orphans_deleted_total counter
provider_kvm_host_orphans_deleted_total{config="ClusterProviderConfig/default"} 1
provider_kvm_host_orphans_deleted_total{config="ProviderConfig/team-a/own"} 2
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), CallsName, ConnectionsName, FailuresName, UnreachableName, OrphansName, OrphansDelName); err != nil {
		t.Error(err)
	}
}

func TestHostGauges(t *testing.T) {
	c := New()
	reg := prometheus.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	c.Host("ClusterProviderConfig/a", HostFigures{
		Domains: map[DomainKey]int{{State: "Running", Managed: true}: 2, {State: "Paused"}: 1},
		Pools:   map[string][3]uint64{"default": {100, 40, 60}}, MemoryTotal: 16, MemoryFree: 6,
	})
	// A second read that finds no paused domain drops that series.
	c.Host("ClusterProviderConfig/a", HostFigures{Domains: map[DomainKey]int{{State: "Running", Managed: true}: 3},
		Pools: map[string][3]uint64{"default": {100, 50, 50}}, MemoryTotal: 16, MemoryFree: 5})
	want := `
# HELP provider_kvm_host_domains The host's domains by libvirt state; managed=true for those carrying the provider's ownership mark (the config's last host status read).
# TYPE provider_kvm_host_domains gauge
provider_kvm_host_domains{config="ClusterProviderConfig/a",managed="true",state="Running"} 3
# HELP provider_kvm_host_memory_bytes The host's total and free memory in bytes (the config's last host status read).
# TYPE provider_kvm_host_memory_bytes gauge
provider_kvm_host_memory_bytes{config="ClusterProviderConfig/a",figure="free"} 5
provider_kvm_host_memory_bytes{config="ClusterProviderConfig/a",figure="total"} 16
# HELP provider_kvm_host_pool_bytes A storage pool's capacity, allocation and available bytes (the config's last host status read).
# TYPE provider_kvm_host_pool_bytes gauge
provider_kvm_host_pool_bytes{config="ClusterProviderConfig/a",figure="allocation",pool="default"} 50
provider_kvm_host_pool_bytes{config="ClusterProviderConfig/a",figure="available",pool="default"} 50
provider_kvm_host_pool_bytes{config="ClusterProviderConfig/a",figure="capacity",pool="default"} 100
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), DomainsName, MemoryName, PoolBytesName); err != nil {
		t.Error(err)
	}
	c.ForgetHost("ClusterProviderConfig/a")
	if n, err := testutil.GatherAndCount(reg, DomainsName, MemoryName, PoolBytesName); err != nil || n != 0 {
		t.Errorf("after ForgetHost: %d series, %v; want none", n, err)
	}
}
