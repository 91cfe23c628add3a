package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group, version and kind of the function input, as a Composition's step names them.
const (
	Group   = "proxy.fn.kvm.crossplane.io"
	Version = "v1alpha1"
	Kind    = "ProxyPolicy"
)

// ProxyPolicy is the input of function-kvm-proxy's pipeline step: the platform team's say over
// every Proxy the Composition serves. A step without input gets the defaults of every field.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:categories=crossplane
type ProxyPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Placement says how a Proxy that names no host is placed (placement.go).
	// +optional
	Placement *Placement `json:"placement,omitempty"`

	// Replacement says how a Proxy's VM is replaced when what defines it changes.
	// +optional
	Replacement *Replacement `json:"replacement,omitempty"`

	// Rules are what every Proxy must keep (rules.go).
	Rules `json:",inline"`
}
