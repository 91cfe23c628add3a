// Command provider runs provider-kvm: the Crossplane controllers that manage libvirt/KVM hosts
// over SSH.
package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/feature"
	"github.com/crossplane/crossplane-runtime/v2/pkg/gate"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/ratelimiter"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/customresourcesgate"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/statemetrics"

	"github.com/provider-kvm/provider-kvm/apis"
	kvmcontroller "github.com/provider-kvm/provider-kvm/internal/controller"
	"github.com/provider-kvm/provider-kvm/internal/controller/hoststatus"
	"github.com/provider-kvm/provider-kvm/internal/controller/setup"
	"github.com/provider-kvm/provider-kvm/internal/domainevents"
	"github.com/provider-kvm/provider-kvm/internal/fairness"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/publishqueue"
	"github.com/provider-kvm/provider-kvm/internal/version"
)

func main() {
	var (
		app            = kingpin.New(filepath.Base(os.Args[0]), "Crossplane provider for libvirt/KVM hosts reached over SSH.").DefaultEnvars()
		debug          = app.Flag("debug", "Log at debug verbosity, including controller-runtime's own logs.").Short('d').Bool()
		leaderElection = app.Flag("leader-election", "Use leader election, so that only one replica reconciles (a rolling update starts the new pod before the old one stops). --no-leader-election turns it off.").Short('l').Default("true").Envar("LEADER_ELECTION").Bool()
		leaderNS       = app.Flag("leader-election-namespace", "Namespace of the leader election Lease; default: the pod's own, or crossplane-system outside a cluster.").Default("").Envar("POD_NAMESPACE").String()

		syncInterval     = app.Flag("sync", "How often every resource is reconciled even when nothing changed (informer resync period).").Short('s').Default("1h").Duration()
		pollInterval     = app.Flag("poll", "How often each managed resource is checked for drift from its desired state.").Default("1m").Duration()
		pollStateMetric  = app.Flag("poll-state-metric", "How often the managed resource state metrics are recorded.").Default("5s").Duration()
		maxReconcileRate = app.Flag("max-reconcile-rate", "The global maximum rate per second of reconciles, and the number of concurrent reconciles per controller.").Default("10").Int()
		metricsAddr      = app.Flag("metrics-bind-address", "Address the Prometheus metrics endpoint binds to; 0 disables it.").Default(":8080").String()
		healthAddr       = app.Flag("health-probe-bind-address", "Address /healthz and /readyz bind to (liveness: the process answers; readiness: its caches are synced); 0 disables them.").Default(":8081").String()
		pprofAddr        = app.Flag("pprof-bind-address", "Address Go's pprof profiles (/debug/pprof/) bind to, e.g. 127.0.0.1:6060; 0 (the default) disables them. Profiles name no secret, but bind them to loopback or a port-forward only.").Default("0").String()

		namespacedSources = app.Flag("namespaced-image-sources", "YAML file of an imageSources policy (as in a ClusterProviderConfig's spec.imageSources) that every namespaced ProviderConfig's imageSources only narrow; its allow rules may lift the denial of private ranges for namespaced configs. Empty: namespaced configs may download from public addresses only.").Default("").String()
		requireSHA256     = app.Flag("require-image-sha256", "Refuse every BaseImage that does not pin spec.forProvider.source.sha256.").Default("false").Bool()
		consoleLogInPool  = app.Flag("console-log-in-pool", "Log the serial console of new domains in their storage pool (a directory pool) instead of libvirt's log directory, so that the end of a guest's console is shown, secrets withheld, in an event on a KVMDomain that is not Ready after 5 minutes.").Default("false").Bool()

		maxPublishJobs        = app.Flag("max-publish-jobs", "How many BaseImage publish jobs (download and upload) run at once in the provider; the others wait their turn, namespaces taking turns (the one with the fewest jobs running first, then first come first served). 0: no limit.").Default("16").Int()
		maxPublishJobsPerHost = app.Flag("max-publish-jobs-per-host", "How many BaseImage publish jobs run at once against one host. 0: no limit.").Default("4").Int()
		maxPublishJobsPerNS   = app.Flag("max-publish-jobs-per-namespace", "How many BaseImage publish jobs of one namespace run at once (on all hosts), so that one namespace's slow downloads never take every slot; keep it below --max-publish-jobs-per-host for one namespace never to fill a host. 0: no limit.").Default("2").Int()
		claimMinBytes         = app.Flag("publish-min-bytes", "Least progress, in bytes per --publish-min-window, an upload must make for BaseImages of other namespaces to keep waiting for it; slower, they may take its claim over and publish the image themselves. 0: no minimum.").Default(strconv.FormatInt(imagecache.DefaultMinThroughput.Bytes, 10)).Int64()
		claimMinWindow        = app.Flag("publish-min-window", "The window over which --publish-min-bytes is measured.").Default(imagecache.DefaultMinThroughput.Window.String()).Duration()

		clusterID = app.Flag("cluster-id", "Names this management cluster (a DNS label, e.g. prod-eu-1) in the ownership records of everything the provider makes on a host. Set a distinct one in each cluster whose providers share hosts: each then judges and sweeps only its own cluster's records, and leaves the others' (records that name no cluster, written before one was set, are judged by every provider). Empty: this cluster is the only one on its hosts.").Default("").Envar("CLUSTER_ID").String()

		enableManagementPolicies = app.Flag("enable-management-policies", "Honour spec.managementPolicies (e.g. Observe-only imports).").Default("true").Envar("ENABLE_MANAGEMENT_POLICIES").Bool()
	)
	kingpin.MustParse(app.Parse(os.Args[1:]))
	kingpin.FatalIfError(checkClusterID(*clusterID), "Invalid --cluster-id")

	zl := zap.New(zap.UseDevMode(*debug))
	log := logging.NewLogrLogger(zl.WithName("provider-kvm"))
	if *debug {
		// controller-runtime is very chatty; give it a real logger only when debugging.
		ctrl.SetLogger(zl)
	} else {
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	}
	log.Info("Starting provider-kvm", "version", version.Version)

	cfg, err := ctrl.GetConfig()
	kingpin.FatalIfError(err, "Cannot get API server rest config")

	// The scheme is whole before the manager is made: its cache options name CRDs.
	scheme := kruntime.NewScheme()
	kingpin.FatalIfError(clientgoscheme.AddToScheme(scheme), "Cannot add Kubernetes APIs to scheme")
	kingpin.FatalIfError(apis.AddToScheme(scheme), "Cannot add provider-kvm APIs to scheme")
	kingpin.FatalIfError(apiextensionsv1.AddToScheme(scheme), "Cannot add CustomResourceDefinition to scheme")

	mgr, err := ctrl.NewManager(ratelimiter.LimitRESTConfig(cfg, *maxReconcileRate), ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			SyncPeriod: syncInterval,
			// What the informers hold (docs/performance.md): objects without their managed
			// fields, which nothing here reads, and CRDs (the safe-start gate's, every CRD of
			// the cluster) without their schemas.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&apiextensionsv1.CustomResourceDefinition{}: {Transform: customresourcesgate.TransformStripCRDSchema},
			},
		},
		// Secrets are read from the API server, never cached: no informer on every Secret of
		// the cluster (decision 48).
		Client:                 setup.ClientOptions(),
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *healthAddr,
		PprofBindAddress:       *pprofAddr,

		// Leases only, with long durations: renewals under heavy reconcile load have been
		// observed to miss the default 10 s deadline.
		LeaderElection:          *leaderElection,
		LeaderElectionNamespace: leaseNamespace(*leaderNS),
		LeaderElectionID:        "crossplane-leader-election-provider-kvm",
		// A provider that stops gracefully hands over at once instead of after LeaseDuration.
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaseDuration:                 func() *time.Duration { d := 60 * time.Second; return &d }(),
		RenewDeadline:                 func() *time.Duration { d := 50 * time.Second; return &d }(),
	})
	kingpin.FatalIfError(err, "Cannot create controller manager")
	kingpin.FatalIfError(mgr.AddHealthzCheck("ping", healthz.Ping), "Cannot add the liveness check")
	kingpin.FatalIfError(mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		// Ready once the informers have synced; the probe's own timeout bounds the wait.
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}), "Cannot add the readiness check")

	mrMetrics := managed.NewMRMetricRecorder()
	stateMetrics := statemetrics.NewMRStateMetrics()
	metrics.Registry.MustRegister(mrMetrics)
	metrics.Registry.MustRegister(stateMetrics)

	o := controller.Options{
		Logger:                  log,
		MaxConcurrentReconciles: *maxReconcileRate,
		PollInterval:            *pollInterval,
		// The rate is shared equally among the namespaces that reconcile (decision 48).
		GlobalRateLimiter: fairness.NewLimiter(*maxReconcileRate),
		Features:          &feature.Flags{},
		// Safe-start: a managed resource controller starts only once its CRD exists.
		Gate: new(gate.Gate[schema.GroupVersionKind]),
		MetricOptions: &controller.MetricOptions{
			PollStateMetricInterval: *pollStateMetric,
			MRMetrics:               mrMetrics,
			MRStateMetrics:          stateMetrics,
		},
	}
	if *enableManagementPolicies {
		o.Features.Enable(feature.EnableBetaManagementPolicies)
		log.Info("Beta feature enabled", "flag", feature.EnableBetaManagementPolicies)
	}

	platform, err := platformOf(*namespacedSources, *requireSHA256)
	kingpin.FatalIfError(err, "Cannot read the platform's image source settings")

	kingpin.FatalIfError(customresourcesgate.Setup(mgr, o), "Cannot set up the CRD gate controller")
	// One SSH connection per host, shared by every managed resource on it; each connection
	// also carries the host's domain events to the KVMDomain controller, and its ups and downs
	// to the host status controllers.
	signals := hoststatus.NewSignals()
	shared := setup.NewShared(platform)
	// The events also keep the host's domain definitions remembered between reads true.
	events := domainevents.New(log.WithValues("component", "domain-events"), domainevents.WithDefinitions(shared.Libvirt))
	conns := host.NewConnections(host.WithLogger(log.WithValues("component", "host-connections")),
		host.WithOnLibvirt(events.Attach), host.WithOnState(signals.Notify))
	defer conns.Close() //nolint:errcheck // Best effort at exit.

	shared.ClusterID = *clusterID
	shared.Images = imagecache.NewShared(imagecache.WithMinThroughput(imagecache.Throughput{Bytes: *claimMinBytes, Window: *claimMinWindow}),
		imagecache.InCluster(*clusterID))
	shared.PublishLimits = publishqueue.Limits{Total: *maxPublishJobs, PerHost: *maxPublishJobsPerHost, PerNamespace: *maxPublishJobsPerNS}
	shared.ConsoleLogInPool = *consoleLogInPool
	kingpin.FatalIfError(kvmcontroller.SetupGated(mgr, o, conns, events, signals, shared), "Cannot set up provider-kvm controllers")
	kingpin.FatalIfError(mgr.Start(ctrl.SetupSignalHandler()), "Cannot start controller manager")
}

// inClusterNamespace is where Kubernetes tells a pod its namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaseNamespace is the namespace of the leader election Lease: the flag's, else the pod's own
// (controller-runtime reads it), else crossplane-system for a provider run outside a cluster.
func leaseNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if _, err := os.Stat(inClusterNamespace); err == nil {
		return ""
	}
	return "crossplane-system"
}

// checkClusterID accepts an empty cluster ID or a DNS label (RFC 1123).
func checkClusterID(id string) error {
	if id == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return errors.Errorf("%q is not a DNS label: %s", id, strings.Join(errs, "; "))
	}
	return nil
}
