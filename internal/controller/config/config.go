// Package config reconciles ProviderConfigs and ClusterProviderConfigs: it counts the
// ProviderConfigUsages that managed resources record, and holds a config's deletion with a
// finalizer while any managed resource still uses it. A namespaced ProviderConfig and its
// Secrets are also held while managed resources of its namespace name it (hold.go), so that
// deleting a team's namespace still lets its resources remove their VMs.
package config

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/ratelimiter"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/providerconfig"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// Setup adds the ProviderConfig and ClusterProviderConfig controllers to mgr.
//
// Both count the same namespaced ProviderConfigUsage type: crossplane-runtime's usage tracker
// writes one in the managed resource's namespace, labelled with the config's kind and name, for
// either kind of config. The ClusterProviderConfig controller lists them in all namespaces.
func Setup(mgr ctrl.Manager, o controller.Options) error {
	if err := setup(mgr, o, &v1alpha1.ProviderConfig{}, v1alpha1.ProviderConfigGroupKind, v1alpha1.ProviderConfigGroupVersionKind, v1alpha1.ProviderConfigKind); err != nil {
		return err
	}
	if err := setupHold(mgr, o); err != nil {
		return err
	}
	return setup(mgr, o, &v1alpha1.ClusterProviderConfig{}, v1alpha1.ClusterProviderConfigGroupKind, v1alpha1.ClusterProviderConfigGroupVersionKind, v1alpha1.ClusterProviderConfigKind)
}

func setup(mgr ctrl.Manager, o controller.Options, obj resource.ProviderConfig, groupKind string, gvk schema.GroupVersionKind, kind string) error {
	name := providerconfig.ControllerName(groupKind)
	of := resource.ProviderConfigKinds{
		Config:    gvk,
		Usage:     v1alpha1.ProviderConfigUsageGroupVersionKind,
		UsageList: v1alpha1.ProviderConfigUsageListGroupVersionKind,
	}
	r := providerconfig.NewReconciler(mgr, of,
		providerconfig.WithLogger(o.Logger.WithValues("controller", name)),
		providerconfig.WithRecorder(event.NewAPIRecorder(mgr.GetEventRecorderFor(name)))) //nolint:staticcheck // crossplane-runtime's recorder still takes the old events API.

	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(o.ForControllerRuntime()).
		For(obj).
		Watches(&v1alpha1.ProviderConfigUsage{}, &resource.EnqueueRequestForProviderConfig{Kind: kind}).
		Complete(ratelimiter.NewReconciler(name, r, o.GlobalRateLimiter))
}
