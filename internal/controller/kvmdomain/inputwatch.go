package kvmdomain

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

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// A KVMDomain waits for its BaseImage and SeedVolume to be Ready, and reports when a
// SeedVolume's content changed. These sources requeue the KVMDomains of a namespace that name
// an input the moment that input turns Ready (or stops being so, or gets new content), rather
// than at their next poll or backoff.

// inputWatches returns the sources of KVMDomain requests for changes of their inputs.
func inputWatches(c cache.Cache, kube client.Reader) []source.TypedSource[reconcile.Request] {
	return []source.TypedSource[reconcile.Request]{
		source.Kind[client.Object](c, &v1alpha1.BaseImage{}, referrersOf(kube, baseImageOf), predicate.Funcs{UpdateFunc: inputChanged}),
		source.Kind[client.Object](c, &v1alpha1.SeedVolume{}, referrersOf(kube, seedVolumeOf), predicate.Funcs{UpdateFunc: inputChanged}),
	}
}

func baseImageOf(d *v1alpha1.KVMDomain) *string  { return d.Spec.ForProvider.BaseImageName }
func seedVolumeOf(d *v1alpha1.KVMDomain) *string { return d.Spec.ForProvider.SeedVolumeName }

// referrersOf maps an input to the KVMDomains of its namespace whose field ref names it.
func referrersOf(kube client.Reader, ref func(*v1alpha1.KVMDomain) *string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		l := &v1alpha1.KVMDomainList{}
		if err := kube.List(ctx, l, client.InNamespace(o.GetNamespace())); err != nil {
			return nil // the poll still comes
		}
		return referrers(l.Items, o.GetName(), ref)
	})
}

// referrers are the requests for the domains whose field ref names name.
func referrers(domains []v1alpha1.KVMDomain, name string, ref func(*v1alpha1.KVMDomain) *string) []reconcile.Request {
	var rs []reconcile.Request
	for i := range domains {
		if r := ref(&domains[i]); r != nil && *r == name {
			rs = append(rs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: domains[i].GetNamespace(), Name: domains[i].GetName()}})
		}
	}
	return rs
}

// inputChanged is true for the updates a KVMDomain acts on: its input turned Ready or stopped
// being so, or has other content (a new image volume, a new seed). Upload progress and other
// status churn are not.
func inputChanged(e ctrlevent.UpdateEvent) bool {
	return inputState(e.ObjectOld) != inputState(e.ObjectNew)
}

type state struct {
	ready   xpv2.ConditionReason
	content string
}

func inputState(o client.Object) state {
	switch v := o.(type) {
	case *v1alpha1.BaseImage:
		return state{ready: v.GetCondition(xpv2.TypeReady).Reason, content: v.Status.AtProvider.VolumeName + "@" + v.Status.AtProvider.SHA256}
	case *v1alpha1.SeedVolume:
		return state{ready: v.GetCondition(xpv2.TypeReady).Reason, content: v.Status.AtProvider.VolumeName + "@" + v.Status.AtProvider.ISOSHA256}
	}
	return state{}
}
