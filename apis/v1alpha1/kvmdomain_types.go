package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reference"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// PowerState is the desired power state of a domain.
// +kubebuilder:validation:Enum=Running;Stopped
type PowerState string

// Power states.
const (
	PowerStateRunning PowerState = "Running"
	PowerStateStopped PowerState = "Stopped"
)

// CPUMode is libvirt's guest CPU mode.
// +kubebuilder:validation:Enum=host-passthrough;host-model;maximum
type CPUMode string

// CPU modes.
const (
	CPUModeHostPassthrough CPUMode = "host-passthrough"
	CPUModeHostModel       CPUMode = "host-model"
	CPUModeMaximum         CPUMode = "maximum"
)

// ResourceName extracts the name of a referenced managed resource. KVMDomains refer to
// BaseImages and SeedVolumes by their Kubernetes name, in the KVMDomain's namespace.
func ResourceName() reference.ExtractValueFn {
	return func(mg resource.Managed) string { return mg.GetName() }
}

// TCPProbe succeeds when a TCP connection to the guest's port opens.
type TCPProbe struct {
	// Port on the guest.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// HTTPProxyProbe sends an HTTP request through an HTTP proxy listening on the guest and
// expects a given status, e.g. a squid that must fetch a URL answering 204.
type HTTPProxyProbe struct {
	// Port of the proxy on the guest.
	// +optional
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// URL requested through the proxy. It must be reachable from the guest.
	// +kubebuilder:validation:Pattern=`^http://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// ExpectedStatus is the HTTP status the request must answer.
	// +optional
	// +kubebuilder:default=204
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	ExpectedStatus int32 `json:"expectedStatus,omitempty"`
}

// ReadinessProbe decides when a running domain with an IP is Ready. The provider dials it
// from the host, through its SSH connection, so the cluster needs no route to the guests.
// +kubebuilder:validation:XValidation:rule="has(self.tcp) != has(self.httpProxy)",message="set exactly one of tcp or httpProxy"
type ReadinessProbe struct {
	// TCP probes a TCP port on the guest.
	// +optional
	TCP *TCPProbe `json:"tcp,omitempty"`

	// HTTPProxy sends an HTTP request through a proxy on the guest.
	// +optional
	HTTPProxy *HTTPProxyProbe `json:"httpProxy,omitempty"`

	// TimeoutSeconds bounds one probe attempt.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// KVMDomainParameters are the configurable fields of a KVMDomain.
// +kubebuilder:validation:XValidation:rule="!has(self.baseImageRef) || !has(self.baseImageRef.__namespace__)",message="baseImageRef must not name a namespace: a KVMDomain uses BaseImages in its own namespace"
// +kubebuilder:validation:XValidation:rule="!has(self.baseImageSelector) || !has(self.baseImageSelector.__namespace__)",message="baseImageSelector must not name a namespace: a KVMDomain uses BaseImages in its own namespace"
// +kubebuilder:validation:XValidation:rule="!has(self.seedVolumeRef) || !has(self.seedVolumeRef.__namespace__)",message="seedVolumeRef must not name a namespace: a KVMDomain uses SeedVolumes in its own namespace"
// +kubebuilder:validation:XValidation:rule="!has(self.seedVolumeSelector) || !has(self.seedVolumeSelector.__namespace__)",message="seedVolumeSelector must not name a namespace: a KVMDomain uses SeedVolumes in its own namespace"
// +kubebuilder:validation:XValidation:rule="!(has(self.network) && has(self.bridge))",message="set network or bridge, not both"
// +kubebuilder:validation:XValidation:rule="has(self.pool) == has(oldSelf.pool) && (!has(self.pool) || self.pool == oldSelf.pool)",message="pool cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="has(self.network) == has(oldSelf.network) && (!has(self.network) || self.network == oldSelf.network)",message="network cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="has(self.bridge) == has(oldSelf.bridge) && (!has(self.bridge) || self.bridge == oldSelf.bridge)",message="bridge cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="has(self.macAddress) == has(oldSelf.macAddress) && (!has(self.macAddress) || self.macAddress == oldSelf.macAddress)",message="macAddress cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="has(self.firmware) == has(oldSelf.firmware) && (!has(self.firmware) || self.firmware == oldSelf.firmware)",message="firmware cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="has(self.domainType) == has(oldSelf.domainType) && (!has(self.domainType) || self.domainType == oldSelf.domainType)",message="domainType cannot change after creation (objects on the host were made with it): create a new resource instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.diskSizeGiB) || (has(self.diskSizeGiB) && self.diskSizeGiB >= oldSelf.diskSizeGiB)",message="diskSizeGiB can grow but never shrink: create a new resource for a smaller disk"
type KVMDomainParameters struct {
	// VCPU is the number of virtual CPUs. A change takes effect at the next restart.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	VCPU int32 `json:"vcpu,omitempty"`

	// MemoryMiB is the guest memory in MiB. A change takes effect at the next restart.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:validation:Maximum=4194304
	MemoryMiB int32 `json:"memoryMiB,omitempty"`

	// DomainType overrides the ProviderConfig's default domain type: kvm, or qemu (TCG
	// software emulation) on hosts without usable KVM.
	// +optional
	DomainType DomainType `json:"domainType,omitempty"`

	// Firmware overrides the BaseImage's firmware.
	// +optional
	Firmware Firmware `json:"firmware,omitempty"`

	// CPUMode is libvirt's CPU mode. Defaults to host-passthrough for kvm and to
	// libvirt's default for qemu.
	// +optional
	CPUMode CPUMode `json:"cpuMode,omitempty"`

	// BaseImageName is the name of the BaseImage, in this namespace, whose volume backs the
	// domain's root disk overlay. Set it, or let baseImageRef or baseImageSelector fill it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +crossplane:generate:reference:type=BaseImage
	// +crossplane:generate:reference:extractor=ResourceName()
	// +crossplane:generate:reference:refFieldName=BaseImageRef
	// +crossplane:generate:reference:selectorFieldName=BaseImageSelector
	BaseImageName *string `json:"baseImageName,omitempty"`

	// BaseImageRef references a BaseImage in this namespace to fill baseImageName.
	// +optional
	BaseImageRef *xpv2.NamespacedReference `json:"baseImageRef,omitempty"`

	// BaseImageSelector selects a BaseImage in this namespace to fill baseImageName.
	// +optional
	BaseImageSelector *xpv2.NamespacedSelector `json:"baseImageSelector,omitempty"`

	// SeedVolumeName is the name of the SeedVolume, in this namespace, attached as the
	// cloud-init cdrom. Set it, or let seedVolumeRef or seedVolumeSelector fill it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +crossplane:generate:reference:type=SeedVolume
	// +crossplane:generate:reference:extractor=ResourceName()
	// +crossplane:generate:reference:refFieldName=SeedVolumeRef
	// +crossplane:generate:reference:selectorFieldName=SeedVolumeSelector
	SeedVolumeName *string `json:"seedVolumeName,omitempty"`

	// SeedVolumeRef references a SeedVolume in this namespace to fill seedVolumeName.
	// +optional
	SeedVolumeRef *xpv2.NamespacedReference `json:"seedVolumeRef,omitempty"`

	// SeedVolumeSelector selects a SeedVolume in this namespace to fill seedVolumeName.
	// +optional
	SeedVolumeSelector *xpv2.NamespacedSelector `json:"seedVolumeSelector,omitempty"`

	// DiskSizeGiB is the virtual size of the root disk overlay. It is never smaller than the
	// base image's virtual size; by default it equals it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	DiskSizeGiB *int32 `json:"diskSizeGiB,omitempty"`

	// Pool is the libvirt storage pool for the domain's overlay. Defaults to the
	// ProviderConfig's default pool.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Pool string `json:"pool,omitempty"`

	// Network is the libvirt network the domain's interface attaches to. Defaults to the
	// ProviderConfig's default network unless bridge is set.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Network string `json:"network,omitempty"`

	// Bridge is a host bridge device the domain's interface attaches to, instead of a
	// libvirt network.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=15
	Bridge string `json:"bridge,omitempty"`

	// MACAddress of the domain's interface, as six lower-case hex pairs. Defaults to a
	// stable locally administered address derived from the resource's UID.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$`
	MACAddress string `json:"macAddress,omitempty"`

	// Autostart starts the domain when the host's libvirt daemon starts.
	// +optional
	Autostart bool `json:"autostart,omitempty"`

	// PowerState is the desired power state. Stopped shuts the guest down gracefully first.
	// +optional
	// +kubebuilder:default=Running
	PowerState PowerState `json:"powerState,omitempty"`

	// ShutdownGracePeriodSeconds is how long a guest gets to shut down after it is asked to
	// (powerState Stopped, or the KVMDomain's deletion) before it is powered off. The request
	// is repeated every 15 seconds meanwhile, so a guest still booting when it came also acts
	// on it. 0 powers the guest off at once.
	// +optional
	// +kubebuilder:default=90
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	ShutdownGracePeriodSeconds *int32 `json:"shutdownGracePeriodSeconds,omitempty"`

	// ReadinessProbe must pass before the domain is Ready. Without it, Ready means running
	// with a known IPv4 address.
	// +optional
	ReadinessProbe *ReadinessProbe `json:"readinessProbe,omitempty"`
}

// KVMDomainObservation is the observed state of a KVMDomain.
type KVMDomainObservation struct {
	// UUID of the libvirt domain.
	// +optional
	UUID string `json:"uuid,omitempty"`

	// State of the domain as libvirt reports it: Running, Paused, ShutOff, Crashed,
	// Suspended, ShuttingDown, Blocked or NoState.
	// +optional
	State string `json:"state,omitempty"`

	// IPv4 is the first routable IPv4 address of the guest.
	// +optional
	IPv4 string `json:"ipv4,omitempty"`

	// IPSource says where IPv4 came from: lease, agent or arp.
	// +optional
	IPSource string `json:"ipSource,omitempty"`

	// MACAddress of the domain's interface.
	// +optional
	MACAddress string `json:"macAddress,omitempty"`

	// OverlayVolume is the name of the root disk overlay volume.
	// +optional
	OverlayVolume string `json:"overlayVolume,omitempty"`

	// GuestAgentConnected is true when the qemu guest agent answers.
	// +optional
	GuestAgentConnected bool `json:"guestAgentConnected,omitempty"`

	// RestartPending is true when the persistent definition differs from the running guest
	// (vcpu, memory) and the change waits for the next restart.
	// +optional
	RestartPending bool `json:"restartPending,omitempty"`

	// InputsChanged lists what changed since the domain was defined: a BaseImage that now
	// publishes another volume (the domain keeps its overlay on the old one; recreate the
	// KVMDomain to move to the new image), or a SeedVolume with new content (the guest reads it
	// at its next boot; cloud-init re-runs per-instance modules only for a new instance-id).
	// +optional
	InputsChanged []string `json:"inputsChanged,omitempty"`

	// WaitingFor names the input (a BaseImage or SeedVolume of this namespace) that must be
	// Ready before the domain can be created, e.g. "SeedVolume web-seed". It is set while a
	// create waits (the resource is then Synced=False with the same message, and is retried
	// shortly) and cleared once the domain is defined.
	// +optional
	WaitingFor string `json:"waitingFor,omitempty"`

	// Probe is the outcome of the last readiness probe.
	// +optional
	Probe string `json:"probe,omitempty"`
}

// A KVMDomainSpec defines the desired state of a KVMDomain.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerConfigRef) || (has(self.providerConfigRef) && self.providerConfigRef.kind == oldSelf.providerConfigRef.kind && self.providerConfigRef.name == oldSelf.providerConfigRef.name)",message="providerConfigRef cannot change after creation (the objects live on that host): create a new resource instead"
type KVMDomainSpec struct {
	xpv2.ManagedResourceSpec `json:",inline"`

	// ForProvider holds the domain's parameters.
	ForProvider KVMDomainParameters `json:"forProvider"`
}

// A KVMDomainStatus represents the observed state of a KVMDomain.
type KVMDomainStatus struct {
	xpv2.ManagedResourceStatus `json:",inline"`

	// AtProvider holds what the provider observed on the host.
	AtProvider KVMDomainObservation `json:"atProvider,omitempty"`
}

// +kubebuilder:object:root=true

// A KVMDomain is a q35 virtual machine on a libvirt host. Its root disk is a qcow2 overlay of
// a BaseImage, and a SeedVolume is attached as a cdrom for cloud-init.
// +kubebuilder:printcolumn:name="READY",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="SYNCED",type="string",JSONPath=".status.conditions[?(@.type=='Synced')].status"
// +kubebuilder:printcolumn:name="HOST",type="string",JSONPath=".spec.providerConfigRef.name"
// +kubebuilder:printcolumn:name="EXTERNAL-NAME",type="string",JSONPath=".metadata.annotations.crossplane\\.io/external-name"
// +kubebuilder:printcolumn:name="STATE",type="string",JSONPath=".status.atProvider.state"
// +kubebuilder:printcolumn:name="IP",type="string",JSONPath=".status.atProvider.ipv4"
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories={crossplane,managed,kvm},shortName=kvmd
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 150",message="metadata.name must be at most 150 characters: the names of its files on the host are derived from namespace (up to 63) and name, and a file name has at most 255 bytes"
type KVMDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KVMDomainSpec   `json:"spec"`
	Status KVMDomainStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// KVMDomainList contains a list of KVMDomains.
type KVMDomainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVMDomain `json:"items"`
}
