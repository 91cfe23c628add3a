package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MinFailoverAfter is the shortest FailoverAfter the function accepts: a libvirtd restart or
// a host's reboot must not move Proxies.
const MinFailoverAfter = "1m"

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

	// FailoverAfter is how long a host may stay not Ready (its ClusterProviderConfig's Ready
	// condition False: the provider cannot reach it, or libvirt there does not answer) before
	// the Proxy replicas placed on it are placed anew on other hosts. Each moves as an
	// evacuation does: a new VM on another host takes over once Ready, and the one left
	// behind is deleted when its host answers again. Meanwhile, and while no other host fits,
	// a replica stays where it is, out of the Service once another replica is Ready. Proxies
	// that name their host (spec.host) never move. Unset: replicas wait for their host,
	// however long. At least 1m.
	// +optional
	FailoverAfter *metav1.Duration `json:"failoverAfter,omitempty"`

	// MaxMovesPerHost bounds how many Proxy replicas move off one host at once, over every
	// namespace: when a host evacuates or fails over, a replica whose new VM is not created
	// yet waits for its turn while this many new VMs elsewhere are still coming up for
	// replicas leaving that host, so the other hosts do not boot them all at once. Replicas
	// that decide in the same moment may pass it by a few. Unset: no bound.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxMovesPerHost *int32 `json:"maxMovesPerHost,omitempty"`
}

// AntiAffinity is how the replicas of one Proxy spread over hosts.
type AntiAffinity string

// Anti-affinity modes.
const (
	AntiAffinityPreferred AntiAffinity = "Preferred"
	AntiAffinityStrict    AntiAffinity = "Strict"
)
