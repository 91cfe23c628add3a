package v1alpha1

// Placement says how a Proxy that names no host is placed among the hosts
// (ClusterProviderConfigs).
type Placement struct{}
