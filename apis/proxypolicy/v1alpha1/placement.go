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

	// AntiAffinity says how the replicas of one Proxy (spec.replicas) spread over hosts.
	// Preferred: each replica goes to a host without another replica of the Proxy when one
	// fits, else to a fitting host holding the fewest. Strict: never two replicas of a Proxy on
	// one host; a replica without such a host is not placed, and the Proxy's Placed condition
	// says why. Default Preferred.
	// +optional
	// +kubebuilder:validation:Enum=Preferred;Strict
	// +kubebuilder:default=Preferred
	AntiAffinity AntiAffinity `json:"antiAffinity,omitempty"`
}

// AntiAffinity is how the replicas of one Proxy spread over hosts.
type AntiAffinity string

// Anti-affinity modes.
const (
	AntiAffinityPreferred AntiAffinity = "Preferred"
	AntiAffinityStrict    AntiAffinity = "Strict"
)
