// Package metrics holds the provider's own Prometheus counters, registered on
// controller-runtime's registry (served on the provider's metrics endpoint):
//
//   - provider_kvm_libvirt_calls_total{kind, op}: libvirt RPCs made, by the managed resource
//     kind whose reconcile made them ("other" when unknown) and the RPC (e.g.
//     DomainLookupByName).
//   - provider_kvm_libvirt_connections_opened_total{host}: libvirt connections opened, the
//     host's shared one (first open and reconnects) and those of their own (downloads and
//     uploads).
//   - provider_kvm_host_connect_failures_total{host}: connection attempts to the host that
//     failed.
//   - provider_kvm_host_unreachable{host}: 1 while the host's circuit breaker is open (its
//     last connection attempt failed), else 0.
//   - provider_kvm_host_orphans{config}: orphans (objects with the provider's ownership record
//     whose managed resource is gone) the config's last host status read found on its host;
//     config is "ClusterProviderConfig/NAME" or "ProviderConfig/NAMESPACE/NAME".
//   - provider_kvm_host_orphans_deleted_total{config}: orphans removed through the config
//     (spec.orphans: Delete).
//   - provider_kvm_host_domains{config, state, managed}: the host's domains by libvirt state
//     (Running, ShutOff, Paused, ...), managed "true" for those carrying the provider's
//     ownership mark; from the config's last host status read.
//   - provider_kvm_host_pool_bytes{config, pool, figure}: a pool's capacity, allocation and
//     available bytes (figure), from the same read.
//   - provider_kvm_host_memory_bytes{config, figure}: the host's total and free memory.
//   - provider_kvm_reconcile_failures_total{kind, reason}: managed resource reconciles that
//     failed, by the step's reason (CannotConnectToProvider, CannotObserveExternalResource,
//     CannotCreateExternalResource, CannotUpdateExternalResource,
//     CannotDeleteExternalResource), which crossplane-runtime puts in conditions, not in
//     controller-runtime's error counter.
//   - provider_kvm_external_seconds{kind, op}: how long Observe, Create, Update and Delete took
//     (a histogram).
//
// Labels never hold secrets: kinds and RPC names are fixed sets, host is host:port or the
// Unix socket path, config a config's kind and name.
package metrics

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric names.
const (
	CallsName       = "provider_kvm_libvirt_calls_total"
	ConnectionsName = "provider_kvm_libvirt_connections_opened_total"
	FailuresName    = "provider_kvm_host_connect_failures_total"
	UnreachableName = "provider_kvm_host_unreachable"
	OrphansName     = "provider_kvm_host_orphans"
	OrphansDelName  = "provider_kvm_host_orphans_deleted_total"
	DomainsName     = "provider_kvm_host_domains"
	PoolBytesName   = "provider_kvm_host_pool_bytes"
	MemoryName      = "provider_kvm_host_memory_bytes"
	FailuresByName  = "provider_kvm_reconcile_failures_total"
	ExternalName    = "provider_kvm_external_seconds"
)

// OpConnectOpen is the op label of opening a libvirt connection (go-libvirt's ConnectToURI
// makes that one RPC).
const OpConnectOpen = "ConnectOpen"

// HostLabel is the host label of a host address: user@host:port loses its user.
func HostLabel(address string) string {
	if i := strings.LastIndexByte(address, '@'); i >= 0 && !strings.HasPrefix(address, "unix:") {
		return address[i+1:]
	}
	return address
}

// KindOther is the kind label of calls made outside a managed resource's reconcile.
const KindOther = "other"

// Counters are the provider's counters; Default is the one registered on the metrics endpoint.
type Counters struct {
	calls       *prometheus.CounterVec
	conns       *prometheus.CounterVec
	failures    *prometheus.CounterVec
	unreachable *prometheus.GaugeVec
	orphans     *prometheus.GaugeVec
	orphansDel  *prometheus.CounterVec
	domains     *prometheus.GaugeVec
	poolBytes   *prometheus.GaugeVec
	memory      *prometheus.GaugeVec
	reconcile   *prometheus.CounterVec
	external    *prometheus.HistogramVec
}

// New returns unregistered counters.
func New() *Counters {
	return &Counters{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: CallsName,
			Help: "libvirt RPCs made, by the managed resource kind whose reconcile made them (other when unknown) and the RPC.",
		}, []string{"kind", "op"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ConnectionsName,
			Help: "libvirt connections opened: the host's shared one (first open and reconnects) and those of their own (downloads and uploads).",
		}, []string{"host"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: FailuresName,
			Help: "Connection attempts to the libvirt host that failed.",
		}, []string{"host"}),
		unreachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: UnreachableName,
			Help: "1 while the libvirt host's circuit breaker is open (its last connection attempt failed), else 0.",
		}, []string{"host"}),
		orphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: OrphansName,
			Help: "Orphans (objects with the provider's ownership record whose managed resource is gone) the config's last host status read found.",
		}, []string{"config"}),
		orphansDel: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: OrphansDelName,
			Help: "Orphans removed from the host through the config (spec.orphans: Delete).",
		}, []string{"config"}),
		domains: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: DomainsName,
			Help: "The host's domains by libvirt state; managed=true for those carrying the provider's ownership mark (the config's last host status read).",
		}, []string{"config", "state", "managed"}),
		poolBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: PoolBytesName,
			Help: "A storage pool's capacity, allocation and available bytes (the config's last host status read).",
		}, []string{"config", "pool", "figure"}),
		memory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MemoryName,
			Help: "The host's total and free memory in bytes (the config's last host status read).",
		}, []string{"config", "figure"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: FailuresByName,
			Help: "Managed resource reconciles that failed, by kind and the failed step's reason.",
		}, []string{"kind", "reason"}),
		external: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ExternalName,
			Help:    "How long the external client's Observe, Create, Update and Delete took, by kind and op.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind", "op"}),
	}
}

// Register adds the counters to r.
func (c *Counters) Register(r prometheus.Registerer) error {
	for _, m := range []prometheus.Collector{c.calls, c.conns, c.failures, c.unreachable, c.orphans, c.orphansDel,
		c.domains, c.poolBytes, c.memory, c.reconcile, c.external} {
		if err := r.Register(m); err != nil {
			return err
		}
	}
	return nil
}

// Call counts one libvirt RPC op made on behalf of the kind ctx carries.
func (c *Counters) Call(ctx context.Context, op string) {
	c.calls.WithLabelValues(KindFrom(ctx), op).Inc()
}

// Opened counts one libvirt connection opened to host.
func (c *Counters) Opened(host string) {
	c.conns.WithLabelValues(host).Inc()
}

// ConnectFailed counts one failed connection attempt to host and marks it unreachable.
func (c *Counters) ConnectFailed(host string) {
	c.failures.WithLabelValues(host).Inc()
	c.unreachable.WithLabelValues(host).Set(1)
}

// Reachable marks host reachable again.
func (c *Counters) Reachable(host string) {
	c.unreachable.WithLabelValues(host).Set(0)
}

// Orphans sets the orphans the config's last read found.
func (c *Counters) Orphans(config string, n int) {
	c.orphans.WithLabelValues(config).Set(float64(n))
}

// OrphansDeleted counts n orphans removed through the config.
func (c *Counters) OrphansDeleted(config string, n int) {
	c.orphansDel.WithLabelValues(config).Add(float64(n))
}

// HostFigures are what one host status read found, for the host gauges.
type HostFigures struct {
	// Domains counts the host's domains by state and by whether they are ours.
	Domains map[DomainKey]int
	// Pools are, by name, capacity, allocation and available bytes; a missing pool is left out.
	Pools       map[string][3]uint64
	MemoryTotal uint64
	MemoryFree  uint64
}

// DomainKey is a domain gauge's labels.
type DomainKey struct {
	State   string
	Managed bool
}

// Host sets the config's host gauges to f, and drops the series of states and pools the read
// no longer found (a pool no longer used, no domain left Paused).
func (c *Counters) Host(config string, f HostFigures) {
	c.domains.DeletePartialMatch(prometheus.Labels{"config": config})
	for k, n := range f.Domains {
		c.domains.WithLabelValues(config, k.State, strconv.FormatBool(k.Managed)).Set(float64(n))
	}
	c.poolBytes.DeletePartialMatch(prometheus.Labels{"config": config})
	for p, b := range f.Pools {
		for i, fig := range []string{"capacity", "allocation", "available"} {
			c.poolBytes.WithLabelValues(config, p, fig).Set(float64(b[i]))
		}
	}
	c.memory.WithLabelValues(config, "total").Set(float64(f.MemoryTotal))
	c.memory.WithLabelValues(config, "free").Set(float64(f.MemoryFree))
}

// ForgetHost drops the config's host gauges (a deleted config).
func (c *Counters) ForgetHost(config string) {
	for _, g := range []*prometheus.GaugeVec{c.domains, c.poolBytes, c.memory, c.orphans} {
		g.DeletePartialMatch(prometheus.Labels{"config": config})
	}
}

// ReconcileFailed counts one failed reconcile of kind at the step reason.
func (c *Counters) ReconcileFailed(kind, reason string) {
	c.reconcile.WithLabelValues(kind, reason).Inc()
}

// External records how long op (Observe, Create, Update, Delete) of kind took.
func (c *Counters) External(kind, op string, d time.Duration) {
	c.external.WithLabelValues(kind, op).Observe(d.Seconds())
}

// Default is registered on controller-runtime's metrics registry.
var Default = New()

func init() {
	// Registering fixed, fresh collectors on a fresh registry cannot fail but for a
	// programming error (a duplicate name).
	if err := Default.Register(ctrlmetrics.Registry); err != nil {
		panic(err)
	}
}

// Call counts one libvirt RPC on Default.
func Call(ctx context.Context, op string) { Default.Call(ctx, op) }

// Opened counts one opened libvirt connection on Default.
func Opened(host string) { Default.Opened(host) }

// ConnectFailed counts one failed connection attempt on Default.
func ConnectFailed(host string) { Default.ConnectFailed(host) }

// Reachable marks host reachable again on Default.
func Reachable(host string) { Default.Reachable(host) }

// Orphans sets the orphans of config on Default.
func Orphans(config string, n int) { Default.Orphans(config, n) }

// Host sets the host gauges of config on Default.
func Host(config string, f HostFigures) { Default.Host(config, f) }

// ForgetHost drops the host gauges of config on Default.
func ForgetHost(config string) { Default.ForgetHost(config) }

// ReconcileFailed counts a failed reconcile on Default.
func ReconcileFailed(kind, reason string) { Default.ReconcileFailed(kind, reason) }

// External records an external client call's duration on Default.
func External(kind, op string, d time.Duration) { Default.External(kind, op, d) }

// OrphansDeleted counts removed orphans of config on Default.
func OrphansDeleted(config string, n int) { Default.OrphansDeleted(config, n) }

type kindKey struct{}

// WithKind returns a context whose libvirt calls are counted for kind (e.g. KVMDomain). An
// empty kind leaves ctx as it is.
func WithKind(ctx context.Context, kind string) context.Context {
	if kind == "" {
		return ctx
	}
	return context.WithValue(ctx, kindKey{}, kind)
}

// KindFrom returns the kind ctx carries, or KindOther.
func KindFrom(ctx context.Context) string {
	if ctx != nil {
		if k, ok := ctx.Value(kindKey{}).(string); ok && k != "" {
			return k
		}
	}
	return KindOther
}
