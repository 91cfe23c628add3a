// Package v1alpha1 holds ProxyPolicy, the input of function-kvm-proxy: what a platform team
// sets once, in the Proxy Composition's pipeline step, for every Proxy the Composition serves
// (placement on hosts, and the rules Proxies must keep). It is read by the function from the
// step's input; it is never stored in the cluster as an object.
// +kubebuilder:object:generate=true
// +groupName=proxy.fn.kvm.crossplane.io
// +versionName=v1alpha1
package v1alpha1
