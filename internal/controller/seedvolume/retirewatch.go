package seedvolume

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// whenDomainMayHaveSwitched is a source of requests for a SeedVolume with retired volumes,
// sent when a KVMDomain naming it changes (it switches its cdrom to the new volume and reports
// so): the retired volume it read is removed then, not a poll interval later. A SeedVolume
// without retired volumes is not reconciled for its KVMDomains' changes.
func whenDomainMayHaveSwitched(c cache.Cache) source.TypedSource[reconcile.Request] {
	return source.Kind[client.Object](c, &v1alpha1.KVMDomain{},
		handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return retiringSeedOf(ctx, c, o)
		}),
		predicate.Funcs{
			CreateFunc:  func(ctrlevent.CreateEvent) bool { return false },
			UpdateFunc:  func(ctrlevent.UpdateEvent) bool { return true },
			GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
			DeleteFunc:  func(ctrlevent.DeleteEvent) bool { return false },
		})
}

// retiringSeedOf is the request for the SeedVolume o (a KVMDomain) names, when that SeedVolume
// has retired volumes.
func retiringSeedOf(ctx context.Context, r client.Reader, o client.Object) []reconcile.Request {
	d, ok := o.(*v1alpha1.KVMDomain)
	if !ok || d.Spec.ForProvider.SeedVolumeName == nil || *d.Spec.ForProvider.SeedVolumeName == "" {
		return nil
	}
	key := types.NamespacedName{Namespace: d.GetNamespace(), Name: *d.Spec.ForProvider.SeedVolumeName}
	sv := &v1alpha1.SeedVolume{}
	if err := r.Get(ctx, key, sv); err != nil || len(sv.Status.AtProvider.RetiredVolumes) == 0 {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}
