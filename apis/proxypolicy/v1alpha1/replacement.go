package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultReadyWithin is how long a new generation of a Proxy may take to become Ready when
// the policy does not say.
const DefaultReadyWithin = "15m"

// Replacement says how a Proxy's VM is replaced when what defines it changes (its image,
// size, port, host or squid configuration): a new generation is composed beside the serving
// one and takes over only once Ready.
type Replacement struct {
	// ReadyWithin is how long a new generation may take to become Ready (its readiness probe
	// passing through squid), counted from the creation of its KVMDomain. A generation not
	// Ready by then is removed, the serving one stays, and the same generation is not tried
	// again until the Proxy's spec changes. Default 15m.
	// +optional
	// +kubebuilder:default="15m"
	ReadyWithin *metav1.Duration `json:"readyWithin,omitempty"`
}

// ReadyWithinOr is the bound Replacement r sets, or def when r (or its field) is missing.
func (r *Replacement) ReadyWithinOr(def metav1.Duration) metav1.Duration {
	if r == nil || r.ReadyWithin == nil {
		return def
	}
	return *r.ReadyWithin
}
