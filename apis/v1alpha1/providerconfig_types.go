package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// Transport is how the provider reaches a host's libvirt daemon.
// +kubebuilder:validation:Enum=SSH;Unix
type Transport string

// Transports.
const (
	// TransportSSH carries libvirt's RPC over an SSH channel to the host's libvirt socket.
	TransportSSH Transport = "SSH"
	// TransportUnix dials the libvirt socket directly: the provider runs on the host itself.
	TransportUnix Transport = "Unix"
)

// DomainType is the libvirt domain type (hypervisor) a guest runs under.
// +kubebuilder:validation:Enum=kvm;qemu
type DomainType string

// Domain types.
const (
	// DomainTypeKVM runs guests with hardware virtualization. Use it on real hosts.
	DomainTypeKVM DomainType = "kvm"
	// DomainTypeQEMU runs guests under TCG software emulation, for hosts without usable KVM.
	DomainTypeQEMU DomainType = "qemu"
)

// A SecretKeySelector names one key of a Secret.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the Secret. Required in a ClusterProviderConfig. A ProviderConfig reads
	// Secrets from its own namespace only, so the field must be omitted there.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// Key within the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// SSHCredentials locate the SSH private key used to log in to the host.
type SSHCredentials struct {
	// SecretRef selects the key of a Secret that holds the private key in OpenSSH or PEM
	// form. Ed25519, RSA (signed with rsa-sha2-256/512) and ECDSA keys are supported.
	SecretRef SecretKeySelector `json:"secretRef"`

	// PassphraseSecretRef selects the key of a Secret that holds the passphrase of an
	// encrypted private key. Omit it for an unencrypted key.
	// +optional
	PassphraseSecretRef *SecretKeySelector `json:"passphraseSecretRef,omitempty"`
}

// KnownHosts locate the known_hosts data that pins the host's SSH host key.
type KnownHosts struct {
	// SecretRef selects the key of a Secret that holds known_hosts lines for the host, in
	// OpenSSH format: plain or hashed host names, and the [host]:port form for ports other
	// than 22. The host key the server presents must match one of them.
	SecretRef SecretKeySelector `json:"secretRef"`
}

// HostDefaults are used by managed resources on this host that do not set the field.
// +kubebuilder:validation:XValidation:rule="!(has(self.network) && has(self.bridge))",message="defaults.network and defaults.bridge are mutually exclusive: guests attach to a libvirt network or to a host bridge"
type HostDefaults struct {
	// DomainType is the libvirt domain type for KVMDomains: kvm (hardware virtualization)
	// or qemu (TCG software emulation, for hosts where KVM is missing or unusable).
	// +optional
	// +kubebuilder:default=kvm
	DomainType DomainType `json:"domainType,omitempty"`

	// Pool is the libvirt storage pool for BaseImages, SeedVolumes and domain overlays.
	// +optional
	// +kubebuilder:default=default
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Pool string `json:"pool,omitempty"`

	// Network is the libvirt network that KVMDomains (and so Proxies) attach to when they name
	// neither a network nor a bridge. When neither this nor bridge is set: libvirt's network
	// "default" (NAT, private to the host).
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:MaxLength=64
	Network string `json:"network,omitempty"`

	// Bridge is the host bridge device that KVMDomains (and so Proxies) attach to when they
	// name neither a network nor a bridge: guests then sit on the network the bridge is part
	// of (a LAN the cluster's nodes reach), with addresses from that network's DHCP server.
	// Mutually exclusive with network.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=15
	Bridge string `json:"bridge,omitempty"`

	// BridgeCIDRs are the IPv4 ranges guests on the default bridge take their addresses from
	// (the LAN's DHCP range or subnet). An address the guest agent or ARP reports for a guest
	// on that bridge is used (probed, published) only when it lies in one of them; with none
	// stated, no such address is used.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="bridgeCIDRs are IPv4 prefixes such as 192.168.50.0/24"
	// +listType=set
	BridgeCIDRs []string `json:"bridgeCIDRs,omitempty"`
}

// A NamespaceSelection picks namespaces by name or by label: a namespace is selected when it
// is listed in names or matches the selector.
// +kubebuilder:validation:XValidation:rule="has(self.names) || has(self.selector)",message="name namespaces or select them by label"
type NamespaceSelection struct {
	// Names of namespaces.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Names []string `json:"names,omitempty"`

	// Selector selects namespaces by their labels. An empty selector selects every namespace.
	// The provider reads the resource's Namespace to match it (it needs get on namespaces).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// A HostBridge is a host bridge device guests may attach to, and the IPv4 ranges they take
// their addresses from on it.
type HostBridge struct {
	// Name of the bridge device on the host.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=15
	Name string `json:"name"`

	// CIDRs are the IPv4 ranges guests on this bridge take their addresses from. An address
	// the guest agent or ARP reports outside them is never used (probed, published).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="cidrs are IPv4 prefixes such as 192.168.50.0/24"
	// +listType=set
	CIDRs []string `json:"cidrs,omitempty"`
}

// An AttachmentGrant lets namespaces use libvirt networks, host bridges and storage pools of
// this host beyond the config's defaults.
// +kubebuilder:validation:XValidation:rule="has(self.networks) || has(self.bridges) || has(self.pools)",message="a grant names at least one network, bridge or pool"
type AttachmentGrant struct {
	// Namespaces the grant applies to. Unset: every namespace that may use this config.
	// A ProviderConfig serves its own namespace only and must leave it unset.
	// +optional
	Namespaces *NamespaceSelection `json:"namespaces,omitempty"`

	// Networks are libvirt networks KVMDomains may attach to.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=set
	Networks []string `json:"networks,omitempty"`

	// Bridges are host bridges KVMDomains may attach to, with their address ranges.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Bridges []HostBridge `json:"bridges,omitempty"`

	// Pools are storage pools BaseImages, SeedVolumes and KVMDomain overlays may use.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=set
	Pools []string `json:"pools,omitempty"`
}

// DefaultNetwork is the libvirt network guests attach to when neither the resource nor its
// ProviderConfig's defaults name a network or a bridge.
const DefaultNetwork = "default"

// Attachment returns the network or bridge guests attach to by default: the bridge when set,
// else the network, else DefaultNetwork.
func (d HostDefaults) Attachment() (network, bridge string) {
	switch {
	case d.Bridge != "":
		return "", d.Bridge
	case d.Network != "":
		return d.Network, ""
	}
	return DefaultNetwork, ""
}

// ImportPolicy says whether managed resources may import existing libvirt objects: a KVMDomain
// with managementPolicies [Observe] and a crossplane.io/external-name that differs from the
// name the provider derives. Imports are a privilege of the platform team: off by default, and
// never of an object that carries another resource's ownership mark.
type ImportPolicy struct {
	// Allowed turns imports on for this host.
	// +optional
	Allowed bool `json:"allowed,omitempty"`

	// Namespaces that may import. Empty means every namespace that may use this config (for a
	// ProviderConfig that is its own namespace only).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`
}

// An ImageSourceRule matches a BaseImage download. Every field that is set must match; a rule
// must set at least one of cidr, host or urlPrefix.
// +kubebuilder:validation:XValidation:rule="has(self.cidr) || has(self.host) || has(self.urlPrefix)",message="a rule sets at least one of cidr, host or urlPrefix"
type ImageSourceRule struct {
	// CIDR matches the IP address the provider actually connects to (after DNS resolution),
	// e.g. 10.0.0.0/8 or 192.0.2.10/32.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidr must be an IP prefix such as 10.0.0.0/8"
	CIDR string `json:"cidr,omitempty"`

	// Host matches the URL's host name, exactly or, with a leading "*.", any subdomain.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`
	Host string `json:"host,omitempty"`

	// Ports the rule applies to; empty means any port.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=set
	Ports []int32 `json:"ports,omitempty"`

	// URLPrefix matches URLs that start with it, e.g. https://cloud.debian.org/images/.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	URLPrefix string `json:"urlPrefix,omitempty"`
}

// ImageSourcePolicy bounds what BaseImages on this host may download. Deny rules win; then
// allow rules; then the built-in denial of loopback, link-local (cloud metadata among them),
// unspecified and multicast addresses; then, when allow rules exist, anything they do not
// match is refused. Redirects are checked again, and a redirect from https to http is refused.
// A namespaced ProviderConfig's policy only narrows the platform's policy for namespaced
// configs (the provider's --namespaced-image-sources), which also refuses private (RFC 1918),
// CGNAT, IPv6 ULA and NAT64 addresses; its allow rules lift no built-in denial.
type ImageSourcePolicy struct {
	// Allow lists the sources BaseImages may download from. Empty allows any source that no
	// deny rule and no built-in denial refuses. An allow rule naming a loopback or link-local
	// address lifts the built-in denial for that address only.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Allow []ImageSourceRule `json:"allow,omitempty"`

	// Deny lists sources that are always refused.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Deny []ImageSourceRule `json:"deny,omitempty"`

	// MaxImageSizeMiB bounds the size of a downloaded image, counted on the stream.
	// +optional
	// +kubebuilder:default=20480
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4194304
	MaxImageSizeMiB int64 `json:"maxImageSizeMiB,omitempty"`

	// HeaderTimeoutSeconds bounds the wait for the server's response headers.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	HeaderTimeoutSeconds int32 `json:"headerTimeoutSeconds,omitempty"`

	// StallTimeoutSeconds bounds how long a download may go without receiving a byte.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	StallTimeoutSeconds int32 `json:"stallTimeoutSeconds,omitempty"`

	// RequireSHA256 refuses every BaseImage on this host that does not pin
	// spec.forProvider.source.sha256. The provider's --require-image-sha256 flag requires it
	// on every host; a namespaced ProviderConfig can turn it on for itself, never off.
	// +optional
	RequireSHA256 bool `json:"requireSHA256,omitempty"`
}

// AllocationRatios are how far the provider's domains may commit a host's CPUs and memory.
type AllocationRatios struct {
	// CPU is the ratio of vCPUs to the host's logical CPUs, e.g. "16" or "4".
	// +optional
	// +kubebuilder:default="16"
	CPU *resource.Quantity `json:"cpu,omitempty"`

	// Memory is the ratio of guest memory to the host's memory, e.g. "1.5", or "1" for no
	// overcommit.
	// +optional
	// +kubebuilder:default="1.5"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// Default allocation ratios, as OpenStack Nova's cpu_allocation_ratio and
// ram_allocation_ratio.
const (
	DefaultCPUAllocationRatio    = "16"
	DefaultMemoryAllocationRatio = "1.5"
)

// HostLimits are caps the platform sets on what managed resources may ask of this host. A
// request over a cap is refused before anything is made on the host (Synced=False, with a
// message naming the cap and the config, and a warning event); what exists already is left
// alone. The size caps and the pool margin take their defaults when unset: values above any
// real guest, so that a typo (64 TiB for 64 GiB) is refused; the counts are unlimited when
// unset, since how many guests a host holds depends on the host: set them where namespaces
// share it.
type HostLimits struct {
	// MaxVirtualSizeGiB bounds the disk size a BaseImage's qcow2 header gives (its virtual
	// size), which every overlay made from it has at least. A larger image is refused once its
	// header is read, and what was uploaded of it is removed.
	// +optional
	// +kubebuilder:default=2048
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxVirtualSizeGiB int64 `json:"maxVirtualSizeGiB,omitempty"`

	// MaxDiskSizeGiB bounds a KVMDomain's root disk: its diskSizeGiB, or the virtual size of
	// its BaseImage when that is larger.
	// +optional
	// +kubebuilder:default=2048
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxDiskSizeGiB int64 `json:"maxDiskSizeGiB,omitempty"`

	// MaxMemoryMiB bounds a KVMDomain's memoryMiB.
	// +optional
	// +kubebuilder:default=262144
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:validation:Maximum=4194304
	MaxMemoryMiB int64 `json:"maxMemoryMiB,omitempty"`

	// MaxVCPU bounds a KVMDomain's vcpu.
	// +optional
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	MaxVCPU int32 `json:"maxVCPU,omitempty"`

	// MaxDomainsPerNamespace bounds how many domains the managed resources of one namespace
	// have on this host, counted from the ownership marks of the domains the host holds.
	// Unset: no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxDomainsPerNamespace int32 `json:"maxDomainsPerNamespace,omitempty"`

	// MaxImagesPerNamespace bounds how many BaseImages of one namespace hold an image on this
	// host (published, or being published), counted from the owner records in the pool.
	// Unset: no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxImagesPerNamespace int32 `json:"maxImagesPerNamespace,omitempty"`

	// MinFreePoolMiB is the free space a storage pool must keep: an upload is started only
	// when the pool has room for the image (its announced size) and this much besides, and a
	// new domain's overlay only when the pool has this much free.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	MinFreePoolMiB int64 `json:"minFreePoolMiB,omitempty"`
}

// A ProviderConfigSpec describes one libvirt host and how to reach it.
// +kubebuilder:validation:XValidation:rule="self.transport != 'SSH' || (has(self.host) && has(self.credentials))",message="transport SSH needs host and credentials"
// +kubebuilder:validation:XValidation:rule="self.transport != 'SSH' || has(self.knownHosts) || self.insecureSkipHostKeyVerification",message="transport SSH needs knownHosts to pin the host key; set insecureSkipHostKeyVerification: true only if you accept any host key"
// +kubebuilder:validation:XValidation:rule="!has(self.evacuate) || !self.evacuate || (has(self.unschedulable) && self.unschedulable)",message="evacuate needs unschedulable: true (cordon the host to evacuate it)"
type ProviderConfigSpec struct {
	// Transport is how the provider reaches libvirt: SSH (default) opens an SSH connection to
	// host:port and forwards libvirt's RPC to libvirtSocket on the host; Unix dials
	// libvirtSocket directly, for a provider that runs on the host itself.
	// +optional
	// +kubebuilder:default=SSH
	Transport Transport `json:"transport,omitempty"`

	// Host is the DNS name or IP address of the host's SSH server.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9:.\[\]-]+$`
	Host string `json:"host,omitempty"`

	// Port of the host's SSH server.
	// +optional
	// +kubebuilder:default=22
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// User to log in as. It must be allowed to open the libvirt socket (root, or a member
	// of the libvirt group).
	// +optional
	// +kubebuilder:default=root
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_.-]*[$]?$`
	// +kubebuilder:validation:MaxLength=32
	User string `json:"user,omitempty"`

	// Credentials hold the SSH private key. Required for transport SSH.
	// +optional
	Credentials *SSHCredentials `json:"credentials,omitempty"`

	// KnownHosts pin the host's SSH host key. Required for transport SSH unless
	// insecureSkipHostKeyVerification is true. There is no trust-on-first-use.
	// +optional
	KnownHosts *KnownHosts `json:"knownHosts,omitempty"`

	// InsecureSkipHostKeyVerification accepts any SSH host key. Anyone who can intercept the
	// connection can then impersonate the host. The provider raises a warning event each time
	// it opens such a connection. Meant for throw-away test hosts only.
	// +optional
	InsecureSkipHostKeyVerification bool `json:"insecureSkipHostKeyVerification,omitempty"`

	// LibvirtSocket is the path of libvirt's read-write unix socket on the host.
	// +optional
	// +kubebuilder:default=/var/run/libvirt/libvirt-sock
	// +kubebuilder:validation:Pattern=`^/[^\x00]*$`
	// +kubebuilder:validation:MaxLength=107
	LibvirtSocket string `json:"libvirtSocket,omitempty"`

	// URI is the libvirt connection URI opened on the host's daemon.
	// +optional
	// +kubebuilder:default="qemu:///system"
	// +kubebuilder:validation:Pattern=`^[a-z0-9+]+://`
	URI string `json:"uri,omitempty"`

	// Defaults for managed resources on this host that do not set these fields.
	// +optional
	// +kubebuilder:default={}
	Defaults HostDefaults `json:"defaults,omitempty"`

	// Unschedulable cordons the host: new KVMDomains (those whose domain does not exist on the
	// host yet) that reference this config are refused; domains already there keep running and
	// are still observed, updated and deleted. As Kubernetes' Node spec.unschedulable.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`

	// Evacuate, on a cordoned ClusterProviderConfig, moves the Proxies placed on this host
	// to other hosts: each replica placed here gets a new VM on another host, which takes over
	// only once Ready (as an edit's does), and then its VM here is deleted. A replica pinned
	// here by the Proxy's spec.host, or that no other host fits, stays and its Proxy's Placed
	// condition says why. Managed resources not composed by the Proxy function are not moved.
	// +optional
	Evacuate bool `json:"evacuate,omitempty"`

	// Orphans says what the host status controller does with orphans on this host: domains
	// and volumes that carry the provider's ownership record but whose managed resource no
	// longer exists (by UID; e.g. deleted after its finalizer was removed by hand). Report
	// (the default) lists them in status.host.orphans; Delete also removes each once it has
	// been an orphan for orphanGracePeriod, unless a domain still uses it (a volume) or a
	// managed resource of the same kind, namespace and name exists. Objects without the
	// provider's record are never touched. A ProviderConfig sees and removes only orphans of
	// its own namespace; a ClusterProviderConfig those of every namespace, and also sweeps
	// cached base images whose BaseImages are all gone.
	// +optional
	// +kubebuilder:validation:Enum=Report;Delete
	// +kubebuilder:default=Report
	Orphans OrphanPolicy `json:"orphans,omitempty"`

	// OrphanGracePeriod is how long an object must have been seen an orphan, on consecutive
	// reads by this provider process, before orphans: Delete removes it. A provider restart
	// starts every grace period again.
	// +optional
	// +kubebuilder:default="1h"
	OrphanGracePeriod *metav1.Duration `json:"orphanGracePeriod,omitempty"`
	// Allocation bounds what the provider's domains may take of this host: a new KVMDomain is
	// refused when its vCPUs or memory, added to those of the domains the provider already
	// defined there, exceed the host's CPUs or memory times these ratios. Proxies that name no
	// host are placed by the same figures. Unset: the defaults of each ratio.
	// +optional
	Allocation *AllocationRatios `json:"allocation,omitempty"`

	// Imports says whether managed resources may import existing libvirt objects on this
	// host. Off by default.
	// +optional
	Imports *ImportPolicy `json:"imports,omitempty"`

	// ImageSources bounds where BaseImages on this host may download from, and how much.
	// +optional
	// +kubebuilder:default={}
	ImageSources ImageSourcePolicy `json:"imageSources,omitempty"`

	// Attachments grant networks, bridges and pools of this host to namespaces. Every
	// namespace that may use the config may use its defaults (pool, and network or bridge);
	// anything else a resource names must be granted here, else it is refused before anything
	// is made on the host. Empty: the defaults only.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Attachments []AttachmentGrant `json:"attachments,omitempty"`

	// Limits cap what managed resources may ask of this host: sizes, and how many domains and
	// images one namespace may have on it. A namespaced ProviderConfig's limits bind its own
	// namespace only.
	// +optional
	// +kubebuilder:default={}
	Limits HostLimits `json:"limits,omitempty"`

	// AllowedNamespaces are the namespaces whose managed resources may use this
	// ClusterProviderConfig. Unset: every namespace. A ProviderConfig serves its own namespace
	// only and must leave it unset.
	// +optional
	AllowedNamespaces *NamespaceSelection `json:"allowedNamespaces,omitempty"`
}

// OrphanPolicy says what is done with orphans on a host.
type OrphanPolicy string

// Orphan policies.
const (
	// OrphansReport lists orphans in the host status only.
	OrphansReport OrphanPolicy = "Report"
	// OrphansDelete also removes them after the grace period.
	OrphansDelete OrphanPolicy = "Delete"
)

// DefaultOrphanGracePeriod is the orphanGracePeriod of a config that sets none.
const DefaultOrphanGracePeriod = time.Hour

// OrphanGrace is the config's orphanGracePeriod, or DefaultOrphanGracePeriod.
func (s *ProviderConfigSpec) OrphanGrace() time.Duration {
	if s.OrphanGracePeriod == nil || s.OrphanGracePeriod.Duration < 0 {
		return DefaultOrphanGracePeriod
	}
	return s.OrphanGracePeriod.Duration
}

// A ProviderConfigStatus reflects the observed state of a ProviderConfig.
type ProviderConfigStatus struct {
	xpv2.ProviderConfigStatus `json:",inline"`

	// Unschedulable is spec.unschedulable as the host status controller last recorded it.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`

	// Host is what the provider last read of the host: versions, capacity, pools and what
	// the provider's own objects take. The Ready condition says whether it could be read.
	// +optional
	Host *HostStatus `json:"host,omitempty"`
}

// +kubebuilder:object:root=true

// A ProviderConfig describes one libvirt host, reached over SSH, for managed resources in its
// own namespace. Its Secrets must live in the same namespace.
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="READY",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="HOST",type="string",JSONPath=".spec.host"
// +kubebuilder:printcolumn:name="UNSCHEDULABLE",type="boolean",JSONPath=".spec.unschedulable"
// +kubebuilder:printcolumn:name="FREE-MEM",type="string",JSONPath=".status.host.memoryFree"
// +kubebuilder:printcolumn:name="DOMAINS",type="integer",JSONPath=".status.host.managed.domains"
// +kubebuilder:printcolumn:name="TRANSPORT",type="string",JSONPath=".spec.transport",priority=1
// +kubebuilder:printcolumn:name="USERS",type="integer",JSONPath=".status.users",priority=1
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:resource:scope=Namespaced,categories={crossplane,provider,kvm}
// +kubebuilder:validation:XValidation:rule="!has(self.spec.credentials) || (!has(self.spec.credentials.secretRef.__namespace__) && (!has(self.spec.credentials.passphraseSecretRef) || !has(self.spec.credentials.passphraseSecretRef.__namespace__)))",message="a ProviderConfig reads Secrets from its own namespace: omit credentials secretRef namespace"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.knownHosts) || !has(self.spec.knownHosts.secretRef.__namespace__)",message="a ProviderConfig reads Secrets from its own namespace: omit knownHosts secretRef namespace"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.transport) || self.spec.transport != 'Unix'",message="a ProviderConfig cannot use transport Unix: only a ClusterProviderConfig may reach the libvirt socket of the provider's own host"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.imports) || !has(self.spec.imports.namespaces)",message="a ProviderConfig allows imports in its own namespace only: omit imports.namespaces"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.allowedNamespaces)",message="a ProviderConfig serves its own namespace only: omit allowedNamespaces (a ClusterProviderConfig's field)"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.attachments) || self.spec.attachments.all(g, !has(g.namespaces))",message="a ProviderConfig serves its own namespace only: omit attachments[].namespaces"
type ProviderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProviderConfigSpec   `json:"spec"`
	Status ProviderConfigStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ProviderConfigList contains a list of ProviderConfigs.
type ProviderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderConfig `json:"items"`
}

// +kubebuilder:object:root=true

// A ClusterProviderConfig describes one libvirt host, reached over SSH, for managed resources
// in any namespace. Its Secret references must name their namespace.
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="READY",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="HOST",type="string",JSONPath=".spec.host"
// +kubebuilder:printcolumn:name="UNSCHEDULABLE",type="boolean",JSONPath=".spec.unschedulable"
// +kubebuilder:printcolumn:name="FREE-MEM",type="string",JSONPath=".status.host.memoryFree"
// +kubebuilder:printcolumn:name="DOMAINS",type="integer",JSONPath=".status.host.managed.domains"
// +kubebuilder:printcolumn:name="TRANSPORT",type="string",JSONPath=".spec.transport",priority=1
// +kubebuilder:printcolumn:name="USERS",type="integer",JSONPath=".status.users",priority=1
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:resource:scope=Cluster,categories={crossplane,provider,kvm}
// +kubebuilder:validation:XValidation:rule="!has(self.spec.credentials) || (has(self.spec.credentials.secretRef.__namespace__) && (!has(self.spec.credentials.passphraseSecretRef) || has(self.spec.credentials.passphraseSecretRef.__namespace__)))",message="a ClusterProviderConfig must name the namespace of its credentials Secrets"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.knownHosts) || has(self.spec.knownHosts.secretRef.__namespace__)",message="a ClusterProviderConfig must name the namespace of its knownHosts Secret"
type ClusterProviderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProviderConfigSpec   `json:"spec"`
	Status ProviderConfigStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterProviderConfigList contains a list of ClusterProviderConfigs.
type ClusterProviderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProviderConfig `json:"items"`
}

// +kubebuilder:object:root=true

// A ProviderConfigUsage records that a managed resource uses a ProviderConfig or a
// ClusterProviderConfig. It lives in the managed resource's namespace; while any exists, the
// config it names cannot be deleted.
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="CONFIG-KIND",type="string",JSONPath=".providerConfigRef.kind"
// +kubebuilder:printcolumn:name="CONFIG-NAME",type="string",JSONPath=".providerConfigRef.name"
// +kubebuilder:printcolumn:name="RESOURCE-KIND",type="string",JSONPath=".resourceRef.kind"
// +kubebuilder:printcolumn:name="RESOURCE-NAME",type="string",JSONPath=".resourceRef.name"
// +kubebuilder:resource:scope=Namespaced,categories={crossplane,provider,kvm}
type ProviderConfigUsage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	xpv2.TypedProviderConfigUsage `json:",inline"`
}

// +kubebuilder:object:root=true

// ProviderConfigUsageList contains a list of ProviderConfigUsages.
type ProviderConfigUsageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderConfigUsage `json:"items"`
}
