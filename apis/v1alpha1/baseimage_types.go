package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// ImageFormat is the on-disk format of a cloud image.
// +kubebuilder:validation:Enum=qcow2;raw
type ImageFormat string

// Image formats.
const (
	ImageFormatQCOW2 ImageFormat = "qcow2"
	ImageFormatRaw   ImageFormat = "raw"
)

// Firmware is the boot firmware of a guest.
// +kubebuilder:validation:Enum=uefi;bios
type Firmware string

// Firmwares.
const (
	// FirmwareUEFI boots through OVMF; libvirt picks the firmware and manages the NVRAM.
	FirmwareUEFI Firmware = "uefi"
	// FirmwareBIOS boots through SeaBIOS.
	FirmwareBIOS Firmware = "bios"
)

// ImageSource says where a cloud image comes from and what it must hash to.
type ImageSource struct {
	// URL of the image, http or https. Redirects are followed. The image is streamed from
	// the provider into the host's storage pool; nothing is staged on the provider's disk.
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	URL string `json:"url"`

	// SHA256 is the expected sha256 digest of the image bytes, as 64 lower-case hex
	// characters. An image whose digest differs is never published. Without it the computed
	// digest is recorded and a warning event says the image is unverified.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256,omitempty"`
}

// BaseImageParameters are the configurable fields of a BaseImage.
// +kubebuilder:validation:XValidation:rule="has(self.pool) == has(oldSelf.pool) && (!has(self.pool) || self.pool == oldSelf.pool)",message="pool cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="has(self.format) == has(oldSelf.format) && (!has(self.format) || self.format == oldSelf.format)",message="format cannot change after creation (objects on the host were made with it): create a new resource instead"
type BaseImageParameters struct {
	// Source of the image. Changing it publishes a new volume for the new content; the old
	// one is removed once no domain's overlay uses it.
	Source ImageSource `json:"source"`

	// Format of the image bytes as downloaded.
	// +optional
	// +kubebuilder:default=qcow2
	Format ImageFormat `json:"format,omitempty"`

	// Pool is the libvirt storage pool that caches the image. Defaults to the
	// ProviderConfig's default pool.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Pool string `json:"pool,omitempty"`

	// Firmware the image boots with. KVMDomains on this image use it unless they override it.
	// +optional
	// +kubebuilder:default=uefi
	Firmware Firmware `json:"firmware,omitempty"`
}

// UploadProgress reports an upload in flight.
type UploadProgress struct {
	// BytesDone is the number of bytes written to the volume so far.
	BytesDone int64 `json:"bytesDone"`

	// BytesTotal is the size of the image, or 0 when the server sent no Content-Length.
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
}

// BaseImageObservation is the observed state of a BaseImage.
type BaseImageObservation struct {
	// VolumeName is the name of the published storage volume.
	// +optional
	VolumeName string `json:"volumeName,omitempty"`

	// Pool holding the volume.
	// +optional
	Pool string `json:"pool,omitempty"`

	// Path of the volume on the host.
	// +optional
	Path string `json:"path,omitempty"`

	// SHA256 is the digest of the published bytes, as computed while uploading.
	// +optional
	SHA256 string `json:"sha256,omitempty"`

	// Verified is true when SHA256 was checked against spec.forProvider.source.sha256.
	// +optional
	Verified bool `json:"verified,omitempty"`

	// SizeBytes is the size of the image file.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// VirtualSizeBytes is the disk size the image presents to a guest.
	// +optional
	VirtualSizeBytes int64 `json:"virtualSizeBytes,omitempty"`

	// SourceURL is the URL that the published volume was actually downloaded from.
	// +optional
	SourceURL string `json:"sourceURL,omitempty"`

	// RetainedVolumes are volumes of earlier sources of this BaseImage, as pool/volume, kept
	// because overlays still back onto them. Each is removed once nothing uses it.
	// +optional
	RetainedVolumes []string `json:"retainedVolumes,omitempty"`

	// Upload is the progress of an upload in flight.
	// +optional
	Upload *UploadProgress `json:"upload,omitempty"`
}

// A BaseImageSpec defines the desired state of a BaseImage.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerConfigRef) || (has(self.providerConfigRef) && self.providerConfigRef.kind == oldSelf.providerConfigRef.kind && self.providerConfigRef.name == oldSelf.providerConfigRef.name)",message="providerConfigRef cannot change after creation (the objects live on that host): create a new resource instead"
type BaseImageSpec struct {
	xpv2.ManagedResourceSpec `json:",inline"`

	// ForProvider holds the image's parameters.
	ForProvider BaseImageParameters `json:"forProvider"`
}

// A BaseImageStatus represents the observed state of a BaseImage.
type BaseImageStatus struct {
	xpv2.ManagedResourceStatus `json:",inline"`

	// AtProvider holds what the provider observed on the host.
	AtProvider BaseImageObservation `json:"atProvider,omitempty"`
}

// +kubebuilder:object:root=true

// A BaseImage is a cloud image cached once per host in a libvirt storage pool and verified
// by sha256. KVMDomains boot from copy-on-write overlays backed by it.
// +kubebuilder:printcolumn:name="READY",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="SYNCED",type="string",JSONPath=".status.conditions[?(@.type=='Synced')].status"
// +kubebuilder:printcolumn:name="HOST",type="string",JSONPath=".spec.providerConfigRef.name"
// +kubebuilder:printcolumn:name="EXTERNAL-NAME",type="string",JSONPath=".metadata.annotations.crossplane\\.io/external-name"
// +kubebuilder:printcolumn:name="VERIFIED",type="boolean",JSONPath=".status.atProvider.verified"
// +kubebuilder:printcolumn:name="SIZE",type="integer",JSONPath=".status.atProvider.sizeBytes",priority=1
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories={crossplane,managed,kvm},shortName=kvmimg
type BaseImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BaseImageSpec   `json:"spec"`
	Status BaseImageStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BaseImageList contains a list of BaseImages.
type BaseImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BaseImage `json:"items"`
}
