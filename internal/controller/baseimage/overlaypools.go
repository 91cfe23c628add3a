package baseimage

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

// defaultPool is the pool a config without defaults.pool gives its resources (the CRD's
// default).
const defaultPool = "default"

const errOverlayPools = "cannot list the pools KVMDomains make overlays in"

// overlayPools names every pool a KVMDomain can have made an overlay in, on any host: each
// KVMDomain's spec.forProvider.pool and each config's defaults.pool (and the CRD's default).
// Only there does the in-use scan count what it cannot check as a doubt
// (imagecache.OverlayPools). Names of other hosts' pools only widen the scope, which is safe.
// A KVMDomain whose overlay sits in a pool that became inactive cannot delete that overlay,
// so it stays in the cluster, and its pool in this set, until the pool is back.
func overlayPools(r client.Reader) imagecache.OverlayPools {
	return func(ctx context.Context) (map[string]bool, error) {
		out := map[string]bool{defaultPool: true}
		ds := &v1alpha1.KVMDomainList{}
		if err := r.List(ctx, ds); err != nil {
			return nil, errors.Wrap(err, errOverlayPools)
		}
		for i := range ds.Items {
			if p := ds.Items[i].Spec.ForProvider.Pool; p != "" {
				out[p] = true
			}
		}
		pcs := &v1alpha1.ProviderConfigList{}
		if err := r.List(ctx, pcs); err != nil {
			return nil, errors.Wrap(err, errOverlayPools)
		}
		for i := range pcs.Items {
			if p := pcs.Items[i].Spec.Defaults.Pool; p != "" {
				out[p] = true
			}
		}
		cpcs := &v1alpha1.ClusterProviderConfigList{}
		if err := r.List(ctx, cpcs); err != nil {
			return nil, errors.Wrap(err, errOverlayPools)
		}
		for i := range cpcs.Items {
			if p := cpcs.Items[i].Spec.Defaults.Pool; p != "" {
				out[p] = true
			}
		}
		return out, nil
	}
}
