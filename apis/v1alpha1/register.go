package v1alpha1

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Package type metadata.
const (
	Group   = "kvm.crossplane.io"
	Version = "v1alpha1"
)

var (
	// SchemeGroupVersion is the group version used to register these objects.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

	// SchemeBuilder is used to add Go types to the GroupVersionKind scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: SchemeGroupVersion}
)

// kindOf returns the Kind, GroupKind string and GroupVersionKind of a type.
func kindOf(v any) (string, string, schema.GroupVersionKind) {
	k := reflect.TypeOf(v).Name()
	return k, schema.GroupKind{Group: Group, Kind: k}.String(), SchemeGroupVersion.WithKind(k)
}

// ProviderConfig type metadata.
var (
	ProviderConfigKind, ProviderConfigGroupKind, ProviderConfigGroupVersionKind = kindOf(ProviderConfig{})
)

// ClusterProviderConfig type metadata.
var (
	ClusterProviderConfigKind, ClusterProviderConfigGroupKind, ClusterProviderConfigGroupVersionKind = kindOf(ClusterProviderConfig{})
)

// ProviderConfigUsage type metadata.
var (
	ProviderConfigUsageKind, _, ProviderConfigUsageGroupVersionKind         = kindOf(ProviderConfigUsage{})
	ProviderConfigUsageListKind, _, ProviderConfigUsageListGroupVersionKind = kindOf(ProviderConfigUsageList{})
)

// BaseImage type metadata.
var (
	BaseImageKind, BaseImageGroupKind, BaseImageGroupVersionKind = kindOf(BaseImage{})
)

// SeedVolume type metadata.
var (
	SeedVolumeKind, SeedVolumeGroupKind, SeedVolumeGroupVersionKind = kindOf(SeedVolume{})
)

// KVMDomain type metadata.
var (
	KVMDomainKind, KVMDomainGroupKind, KVMDomainGroupVersionKind = kindOf(KVMDomain{})
)

func init() {
	SchemeBuilder.Register(&ProviderConfig{}, &ProviderConfigList{})
	SchemeBuilder.Register(&ClusterProviderConfig{}, &ClusterProviderConfigList{})
	SchemeBuilder.Register(&ProviderConfigUsage{}, &ProviderConfigUsageList{})
	SchemeBuilder.Register(&BaseImage{}, &BaseImageList{})
	SchemeBuilder.Register(&SeedVolume{}, &SeedVolumeList{})
	SchemeBuilder.Register(&KVMDomain{}, &KVMDomainList{})
}
