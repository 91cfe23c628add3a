//go:build generate

// Package apis drives code generation for the provider's API types.
//
// Run `make generate` (or `go generate -tags generate ./apis/...`): it removes and rewrites
// the CRDs in package/crds, the deepcopy functions (controller-gen) and the crossplane-runtime
// method sets and reference resolvers (angryjet).
package apis

// Remove existing CRDs so that a deleted kind does not leave its CRD behind.
//go:generate rm -rf ../package/crds

// Deepcopy methods and CRD manifests: the provider's, and the function input's (a Function
// package's input CRD, for crossplane beta validate and for readers; never installed).
//go:generate rm -rf ../package/function/input
//go:generate go tool controller-gen object:headerFile=../hack/boilerplate.go.txt paths=./v1alpha1/... crd:crdVersions=v1 output:artifacts:config=../package/crds
//go:generate go tool controller-gen object:headerFile=../hack/boilerplate.go.txt paths=./proxypolicy/... crd:crdVersions=v1 output:artifacts:config=../package/function/input

// crossplane-runtime method sets (resource.ModernManaged, ProviderConfig, usages) and resolvers.
//go:generate go tool angryjet generate-methodsets --header-file=../hack/boilerplate.go.txt ./...
