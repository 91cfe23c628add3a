package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// SeedVolumeParameters are the configurable fields of a SeedVolume.
// +kubebuilder:validation:XValidation:rule="!(has(self.userData) && has(self.userDataSecretRef))",message="set userData or userDataSecretRef, not both"
// +kubebuilder:validation:XValidation:rule="!(has(self.networkConfig) && has(self.networkConfigSecretRef))",message="set networkConfig or networkConfigSecretRef, not both"
// +kubebuilder:validation:XValidation:rule="!(has(self.vendorData) && has(self.vendorDataSecretRef))",message="set vendorData or vendorDataSecretRef, not both"
// +kubebuilder:validation:XValidation:rule="has(self.pool) == has(oldSelf.pool) && (!has(self.pool) || self.pool == oldSelf.pool)",message="pool cannot change after creation (objects on the host were made with it): create a new resource instead"
type SeedVolumeParameters struct {
	// Pool is the libvirt storage pool for the seed volume. Defaults to the
	// ProviderConfig's default pool.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Pool string `json:"pool,omitempty"`

	// InstanceID is cloud-init's instance-id in meta-data. cloud-init runs its per-instance
	// modules again when it changes. Defaults to a value derived from the resource's UID, so
	// it is stable for the life of the resource.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`
	// +kubebuilder:validation:MaxLength=128
	InstanceID string `json:"instanceID,omitempty"`

	// Hostname is cloud-init's local-hostname in meta-data (an RFC 1123 host name).
	// Defaults to the resource's name.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	Hostname string `json:"hostname,omitempty"`

	// UserData is written to the seed byte for byte, in whatever format it is written
	// (#cloud-config, a script, a MIME archive, #include, a jinja template). It is never
	// parsed or re-encoded. Prefer userDataSecretRef when it holds secrets.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	UserData *string `json:"userData,omitempty"`

	// UserDataSecretRef selects a key of a Secret in the resource's namespace that holds the
	// user-data.
	// +optional
	UserDataSecretRef *LocalSecretKeySelector `json:"userDataSecretRef,omitempty"`

	// NetworkConfig is cloud-init's network-config (version 1 or 2), written byte for byte.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	NetworkConfig *string `json:"networkConfig,omitempty"`

	// NetworkConfigSecretRef selects a key of a Secret in the resource's namespace that holds
	// the network-config.
	// +optional
	NetworkConfigSecretRef *LocalSecretKeySelector `json:"networkConfigSecretRef,omitempty"`

	// VendorData is extra vendor-data. With installGuestAgent it travels next to the guest
	// agent script as a MIME multipart archive.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	VendorData *string `json:"vendorData,omitempty"`

	// VendorDataSecretRef selects a key of a Secret in the resource's namespace that holds
	// the vendor-data.
	// +optional
	VendorDataSecretRef *LocalSecretKeySelector `json:"vendorDataSecretRef,omitempty"`

	// InstallGuestAgent adds a vendor-data shell script that installs and starts
	// qemu-guest-agent when the image lacks it, so the provider can read the guest's
	// addresses through the agent.
	// +optional
	// +kubebuilder:default=true
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty"`
}

// SeedVolumeObservation is the observed state of a SeedVolume.
type SeedVolumeObservation struct {
	// VolumeName is the name of the seed volume in the pool that holds the current content,
	// verified on the host. Every content gets a volume of its own (the name ends with the
	// first 16 hex digits of its sha256): a changed seed is published as a new volume, and
	// KVMDomains switch their cdrom to it once it is verified.
	// +optional
	VolumeName string `json:"volumeName,omitempty"`

	// RetiredVolumes are volumes of earlier content, removed as soon as no domain uses them.
	// +optional
	RetiredVolumes []string `json:"retiredVolumes,omitempty"`

	// Pool holding the volume.
	// +optional
	Pool string `json:"pool,omitempty"`

	// Path of the volume on the host.
	// +optional
	Path string `json:"path,omitempty"`

	// ISOSHA256 is the sha256 digest of the seed ISO bytes that were uploaded.
	// +optional
	ISOSHA256 string `json:"isoSHA256,omitempty"`

	// SizeBytes is the size of the seed ISO.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// InstanceID is the instance-id written to meta-data.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`
}

// A SeedVolumeSpec defines the desired state of a SeedVolume.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerConfigRef) || (has(self.providerConfigRef) && self.providerConfigRef.kind == oldSelf.providerConfigRef.kind && self.providerConfigRef.name == oldSelf.providerConfigRef.name)",message="providerConfigRef cannot change after creation (the objects live on that host): create a new resource instead"
type SeedVolumeSpec struct {
	xpv2.ManagedResourceSpec `json:",inline"`

	// ForProvider holds the seed's parameters.
	ForProvider SeedVolumeParameters `json:"forProvider"`
}

// A SeedVolumeStatus represents the observed state of a SeedVolume.
type SeedVolumeStatus struct {
	xpv2.ManagedResourceStatus `json:",inline"`

	// AtProvider holds what the provider observed on the host.
	AtProvider SeedVolumeObservation `json:"atProvider,omitempty"`
}

// +kubebuilder:object:root=true

// A SeedVolume is a cloud-init NoCloud seed ISO (volume label cidata) built by the provider
// and uploaded to a storage pool as a raw volume. A KVMDomain attaches it as a cdrom.
// +kubebuilder:printcolumn:name="READY",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="SYNCED",type="string",JSONPath=".status.conditions[?(@.type=='Synced')].status"
// +kubebuilder:printcolumn:name="HOST",type="string",JSONPath=".spec.providerConfigRef.name"
// +kubebuilder:printcolumn:name="EXTERNAL-NAME",type="string",JSONPath=".metadata.annotations.crossplane\\.io/external-name"
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories={crossplane,managed,kvm},shortName=kvmseed
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 150",message="metadata.name must be at most 150 characters: the names of its files on the host are derived from namespace (up to 63) and name, and a file name has at most 255 bytes"
type SeedVolume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SeedVolumeSpec   `json:"spec"`
	Status SeedVolumeStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SeedVolumeList contains a list of SeedVolumes.
type SeedVolumeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SeedVolume `json:"items"`
}

// A LocalSecretKeySelector names one key of a Secret in the managed resource's namespace.
type LocalSecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Key within the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}
