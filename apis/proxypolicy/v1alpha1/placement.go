package v1alpha1

// Placement says how a Proxy that names no host is placed among the hosts
// (ClusterProviderConfigs). How far a host may be committed is the host's own
// (ClusterProviderConfig spec.allocation), so that the provider refuses, at the same figures,
// a domain that does not fit.
type Placement struct {
	// HostSelector restricts placement to the ClusterProviderConfigs with all these labels, on
	// top of any hostSelector a Proxy gives. Empty: every ClusterProviderConfig.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	HostSelector map[string]string `json:"hostSelector,omitempty"`
}
