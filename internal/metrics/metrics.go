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
//
// Labels never hold secrets: kinds and RPC names are fixed sets, host is host:port or the
// Unix socket path, config a config's kind and name.
package metrics

import (
	"context"
	"strings"

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
	}
}

// Register adds the counters to r.
func (c *Counters) Register(r prometheus.Registerer) error {
	for _, m := range []prometheus.Collector{c.calls, c.conns, c.failures, c.unreachable, c.orphans, c.orphansDel} {
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
