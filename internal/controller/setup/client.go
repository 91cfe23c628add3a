package setup

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClientOptions are the manager client's options: Secrets are read from the API server, never
// through the cache. controller-runtime's default client starts an informer for every kind it
// is asked to Get, which for Secrets means a watch on, and a copy in memory of, every Secret of
// the cluster (service account tokens, other teams' credentials). The provider reads only the
// few Secrets a ProviderConfig or a SeedVolume names, each once per reconcile, so an uncached
// read costs little and holds nothing.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}
