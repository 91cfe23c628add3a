package v1alpha1

// Attachment is the libvirt network or the host bridge a Proxy's VM attaches to: exactly one.
// +kubebuilder:validation:XValidation:rule="has(self.network) != has(self.bridge)",message="set exactly one of network and bridge"
type Attachment struct {
	// Network is a libvirt network of the host, such as default.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Network string `json:"network,omitempty"`

	// Bridge is a bridge device of the host, such as br0.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=15
	Bridge string `json:"bridge,omitempty"`
}
