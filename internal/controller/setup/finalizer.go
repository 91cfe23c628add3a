package setup

import (
	"context"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
)

const (
	errAddFinalizer    = "cannot add the finalizer"
	errRemoveFinalizer = "cannot remove the finalizer"
	errReread          = "cannot read the resource again after a conflicting update"
)

// finalizerAttempts bounds how often RemoveFinalizer re-reads and retries after a conflict.
const finalizerAttempts = 5

// Finalizer adds and removes crossplane-runtime's managed resource finalizer as its
// APIFinalizer does, with one difference: when removing it conflicts, it reads the resource
// again from the API server (not the cache) and tries again.
//
// The last reconcile of a deletion almost always works on a stale copy: the one before wrote
// the resource's status (the external resource is gone), and the event that triggers the last
// one (the domain's Undefined event, say) arrives before the cache has that write.
// crossplane-runtime answers the conflict with a requeue under the resource's backoff, which
// after a graceful shutdown has grown to its cap: the resource stayed 10 s longer than its
// guest. Only the finalizer list changes here, so updating a fresh copy is safe.
type Finalizer struct {
	Client client.Client // writes
	Reader client.Reader // reads that bypass the cache
}

var _ resource.Finalizer = Finalizer{}

// AddFinalizer adds the finalizer; a conflict is returned (crossplane-runtime requeues), so
// what the reconcile observed so far is never replaced by a fresh copy.
func (f Finalizer) AddFinalizer(ctx context.Context, obj resource.Object) error {
	if meta.FinalizerExists(obj, managed.FinalizerName) {
		return nil
	}
	meta.AddFinalizer(obj, managed.FinalizerName)
	return errors.Wrap(f.Client.Update(ctx, obj), errAddFinalizer)
}

// RemoveFinalizer removes the finalizer, retrying on a fresh copy after a conflict. A resource
// that is gone meanwhile is not an error.
func (f Finalizer) RemoveFinalizer(ctx context.Context, obj resource.Object) error {
	for attempt := 1; ; attempt++ {
		if !meta.FinalizerExists(obj, managed.FinalizerName) {
			return nil
		}
		meta.RemoveFinalizer(obj, managed.FinalizerName)
		err := f.Client.Update(ctx, obj)
		if !kerrors.IsConflict(err) || attempt == finalizerAttempts {
			return errors.Wrap(resource.IgnoreNotFound(err), errRemoveFinalizer)
		}
		if err := f.Reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return errors.Wrap(resource.IgnoreNotFound(err), errReread)
		}
	}
}
