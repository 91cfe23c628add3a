// Package envtests runs the provider's CRDs, examples and ProviderConfig controllers against a
// real kube-apiserver and etcd (controller-runtime's envtest). The binaries come from
// KUBEBUILDER_ASSETS, which `make test` fills by building them from Go modules
// (cluster/controlplane/build.sh).
package crds
