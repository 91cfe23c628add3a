// Package v1alpha1 contains the v1alpha1 API of provider-kvm: the ProviderConfig and
// ClusterProviderConfig that describe one libvirt host each, and the managed resources
// BaseImage, SeedVolume and KVMDomain.
// +kubebuilder:object:generate=true
// +groupName=kvm.crossplane.io
// +versionName=v1alpha1
package v1alpha1
