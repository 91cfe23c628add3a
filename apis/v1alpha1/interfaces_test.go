package v1alpha1

import "github.com/crossplane/crossplane-runtime/v2/pkg/resource"

// Compile-time checks that our types satisfy crossplane-runtime's contracts. They live in a
// test file so that angryjet can load the package before it has generated the methods.
var (
	_ resource.ProviderConfig           = &ProviderConfig{}
	_ resource.ProviderConfig           = &ClusterProviderConfig{}
	_ resource.TypedProviderConfigUsage = &ProviderConfigUsage{}
	_ resource.ProviderConfigUsageList  = &ProviderConfigUsageList{}

	_ resource.ModernManaged = &BaseImage{}
	_ resource.ManagedList   = &BaseImageList{}
	_ resource.ModernManaged = &SeedVolume{}
	_ resource.ManagedList   = &SeedVolumeList{}
	_ resource.ModernManaged = &KVMDomain{}
	_ resource.ManagedList   = &KVMDomainList{}
)
