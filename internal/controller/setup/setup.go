// Package setup wires a managed resource controller the same way for every kind: safe-start
// gating, crossplane-runtime's managed reconciler with our typed external connector, reference
// resolution, management policies, metrics and the rate and worker shares of each namespace
// (internal/fairness).
package setup

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/feature"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	"github.com/crossplane/crossplane-runtime/v2/pkg/statemetrics"

	"github.com/provider-kvm/provider-kvm/internal/fairness"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// Kind describes one managed resource kind.
type Kind[T resource.Managed] struct {
	GroupKind string
	GVK       schema.GroupVersionKind
	Object    client.Object
	List      resource.ManagedList
	// Connector builds the external client; it receives the controller's event recorder.
	Connector func(event.Recorder) managed.TypedExternalConnector[T]
	// ExternalName derives the external name (the libvirt object's name) of a resource that
	// has none yet. It must be a pure function of the resource (see internal/names), so a
	// provider killed in the middle of a create finds the same object again.
	ExternalName func(mg resource.Managed) string
	// Timeout bounds one reconcile (default: crossplane-runtime's).
	Timeout time.Duration
	// Options are extra reconciler options.
	Options []managed.ReconcilerOption
	// Watches are extra sources of reconcile requests (e.g. libvirt events).
	Watches []source.TypedSource[reconcile.Request]
}

// Gated registers the controller with o.Gate: it starts once its CRD is established.
func Gated[T resource.Managed](mgr ctrl.Manager, o controller.Options, k Kind[T]) error {
	o.Gate.Register(func() {
		if err := Now(mgr, o, k); err != nil {
			panic(errors.Wrapf(err, "cannot set up %s controller", k.GroupKind))
		}
	}, k.GVK)
	return nil
}

// Now sets the controller up immediately.
func Now[T resource.Managed](mgr ctrl.Manager, o controller.Options, k Kind[T]) error {
	name := managed.ControllerName(k.GroupKind)
	rec := event.NewAPIRecorder(mgr.GetEventRecorderFor(name)) //nolint:staticcheck // crossplane-runtime's recorder still takes the old events API.

	updated := &Updated{}
	opts := []managed.ReconcilerOption{
		managed.WithTypedExternalConnector[T](instrument(trackUpdates(k.Connector(rec), updated), k.GVK.Kind, metrics.Default)),
		managed.WithLogger(o.Logger.WithValues("controller", name)),
		managed.WithPollInterval(o.PollInterval),
		// Resources that are not Ready yet, or were just updated, are looked at again within
		// seconds (PollHook); Ready ones at --poll, give or take PollJitter of it.
		managed.WithPollIntervalHook(Jittered(PollHook(time.Now, updated), PollJitter, randFloat)),
		managed.WithRecorder(rec),
		managed.WithReferenceResolver(managed.NewAPISimpleReferenceResolver(mgr.GetClient())),
		// External names are derived from namespace, name and UID by each kind (see
		// internal/names), not copied from metadata.name, so two namespaces never collide on
		// a host, and a create interrupted before its result was recorded is safe to retry.
		managed.WithInitializers(externalNamer(mgr.GetClient(), k.ExternalName)),
		managed.WithDeterministicExternalName(true),
		// The last step of a deletion retries a conflicting finalizer removal on a fresh copy
		// instead of waiting out the backoff (finalizer.go).
		managed.WithFinalizer(Finalizer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}),
		// No creation grace period: crossplane-runtime waits 30 s after a create before it
		// trusts an Observe that finds nothing, for eventually consistent cloud APIs. Every
		// Observe here reads the host's libvirt, which shows what Create made at once; the wait
		// only held up deleting a resource whose create failed (a refused BaseImage took 30 s
		// to go) and a publish retried after its backoff (baseimage.retryDelay).
		managed.WithCreationGracePeriod(0),
	}
	if k.Timeout > 0 {
		opts = append(opts, managed.WithTimeout(k.Timeout))
	}
	if o.Features.Enabled(feature.EnableBetaManagementPolicies) {
		opts = append(opts, managed.WithManagementPolicies())
	}
	if o.MetricOptions != nil {
		opts = append(opts, managed.WithMetricRecorder(o.MetricOptions.MRMetrics))
		if o.MetricOptions.MRStateMetrics != nil {
			sm := statemetrics.NewMRStateRecorder(mgr.GetClient(), o.Logger, o.MetricOptions.MRStateMetrics, k.List, o.MetricOptions.PollStateMetricInterval)
			if err := mgr.Add(sm); err != nil {
				return errors.Wrapf(err, "cannot register state metrics recorder for %s", k.GroupKind)
			}
		}
	}
	opts = append(opts, k.Options...)

	r := managed.NewReconciler(mgr, resource.ManagedKind(k.GVK), opts...)
	copts := o.ForControllerRuntime()
	copts.RateLimiter = requeueLimiter()
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(copts).
		WithEventFilter(resource.DesiredStateChanged()).
		For(k.Object)
	for _, s := range k.Watches {
		b = b.WatchesRawSource(s)
	}
	// Each namespace gets an equal share of the rate (with a fairness.Limiter as
	// o.GlobalRateLimiter, as cmd/provider sets) and of this controller's workers, so one
	// namespace's failing resources cannot starve the others (decision 48).
	return b.Complete(fairness.NewReconciler(r, o.GlobalRateLimiter, copts.MaxConcurrentReconciles))
}

// MaxRequeueBackoff caps the per-resource backoff between reconciles that ask to be
// requeued. crossplane-runtime's default cap is 60 s, and its managed reconciler requeues
// with backoff on every step of a deletion as well as on errors, without resetting it in
// between. Our deletions wait on guests (a graceful shutdown) and on each other (a seed is
// held while a domain uses it), so with 60 s a Proxy whose guest shuts down in 30 s took about
// three minutes to go away. Persistent errors are retried at most this often per resource;
// the global rate limiter still bounds the total.
const MaxRequeueBackoff = 10 * time.Second

func requeueLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, MaxRequeueBackoff)
}

// externalNamer sets a derived external name on a resource that has none, and persists it
// before anything is created on the host.
func externalNamer(kube client.Client, derive func(resource.Managed) string) managed.Initializer {
	return managed.InitializerFn(func(ctx context.Context, mg resource.Managed) error {
		if meta.GetExternalName(mg) != "" {
			return nil
		}
		meta.SetExternalName(mg, derive(mg))
		return errors.Wrap(kube.Update(ctx, mg), "cannot record the external name")
	})
}
