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

	// DefaultAttachment is the network or bridge a Proxy's VM attaches to when the Proxy names
	// none (the Proxy API names none, so: every Proxy's). The host's ClusterProviderConfig must
	// grant it to the Proxy's namespace (spec.defaults or spec.attachments): placement skips the
	// hosts that do not; on a host named by spec.host that does not, the provider refuses the
	// Proxy's KVMDomain, naming what the host grants. Missing: the host config's own default
	// attachment (spec.defaults).
	// +optional
	DefaultAttachment *Attachment `json:"defaultAttachment,omitempty"`

	// Rules are what every Proxy must keep (rules.go).
	Rules `json:",inline"`
}
