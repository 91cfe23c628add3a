package setup

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

// WhenDomainGone is a source of requests for the input (SeedVolume or BaseImage) that a
// KVMDomain named, sent when that KVMDomain is gone from the API: its domain is undefined and
// its overlay removed, so a deletion of the input that was held while the domain used it can
// go on at once, not after its backoff. name picks the input's name from the KVMDomain.
func WhenDomainGone(c cache.Cache, name func(*v1alpha1.KVMDomain) *string) source.TypedSource[reconcile.Request] {
	return source.Kind[client.Object](c, &v1alpha1.KVMDomain{},
		handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return inputOf(o, name)
		}),
		predicate.Funcs{
			CreateFunc:  func(ctrlevent.CreateEvent) bool { return false },
			UpdateFunc:  func(ctrlevent.UpdateEvent) bool { return false },
			GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
			DeleteFunc:  func(ctrlevent.DeleteEvent) bool { return true },
		})
}

// inputOf is the request for the input of o that name picks, if o is a KVMDomain naming one.
func inputOf(o client.Object, name func(*v1alpha1.KVMDomain) *string) []reconcile.Request {
	d, ok := o.(*v1alpha1.KVMDomain)
	if !ok {
		return nil
	}
	n := name(d)
	if n == nil || *n == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: d.GetNamespace(), Name: *n}}}
}
