package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostStatus is what the provider last read of a ProviderConfig's or ClusterProviderConfig's
// host, on the host status controller's own poll. It never holds a secret.
type HostStatus struct {
	// Address is the host as the provider reaches it: user@host:port, or unix:SOCKET.
	// +optional
	Address string `json:"address,omitempty"`

	// LastSeen is when the host last answered every call of a status read.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`

	// LibvirtVersion of the host's libvirt daemon, e.g. 9.0.0.
	// +optional
	LibvirtVersion string `json:"libvirtVersion,omitempty"`

	// QEMUVersion is the hypervisor's version as libvirt reports it, e.g. 7.2.0.
	// +optional
	QEMUVersion string `json:"qemuVersion,omitempty"`

	// CPUs of the host (logical CPUs, libvirt's nodeinfo).
	// +optional
	CPUs int32 `json:"cpus,omitempty"`

	// MemoryTotal of the host (libvirt's nodeinfo).
	// +optional
	MemoryTotal *resource.Quantity `json:"memoryTotal,omitempty"`

	// MemoryFree on the host (libvirt's freecell over all NUMA cells).
	// +optional
	MemoryFree *resource.Quantity `json:"memoryFree,omitempty"`

	// Pools the provider's objects on this host use: the config's default pool and every
	// pool a managed resource using this config names.
	// +optional
	// +listType=map
	// +listMapKey=name
	Pools []HostPool `json:"pools,omitempty"`

	// Managed is what the provider's own objects take on this host: domains that carry the
	// provider's ownership record and volumes named as the provider names them.
	// +optional
	Managed HostUsage `json:"managed,omitempty"`

	// Orphans are the provider's objects on this host whose managed resource no longer
	// exists (spec.orphans). Unset until a read could compare the host with the cluster; kept
	// from the last such read while a list of managed resources cannot be read.
	// +optional
	Orphans *HostOrphans `json:"orphans,omitempty"`
}

// MaxOrphanNames bounds HostOrphans.Names.
const MaxOrphanNames = 10

// HostOrphans are the orphans found on a host.
type HostOrphans struct {
	// Count of orphans: domains and volumes (a volume's ownership record counted with it).
	Count int32 `json:"count"`

	// Names of the first orphans in name order, at most 10: "domain NAME" or
	// "volume POOL/NAME".
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Names []string `json:"names,omitempty"`

	// Deleted is how many orphans the provider removed through this config
	// (spec.orphans: Delete), in all.
	// +optional
	Deleted int32 `json:"deleted,omitempty"`
}

// HostPool is one storage pool of a host.
type HostPool struct {
	// Name of the pool.
	Name string `json:"name"`

	// Active is false for a pool that is defined but not started; its figures are then zero.
	// +optional
	Active bool `json:"active,omitempty"`

	// Missing is true when the host has no pool of this name.
	// +optional
	Missing bool `json:"missing,omitempty"`

	// Capacity of the pool.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	// Allocation of the pool: what its volumes take.
	// +optional
	Allocation *resource.Quantity `json:"allocation,omitempty"`

	// Available space left in the pool.
	// +optional
	Available *resource.Quantity `json:"available,omitempty"`
}

// HostUsage is what the provider's own objects take on a host.
type HostUsage struct {
	// Domains that carry the provider's ownership record, running or defined.
	// +optional
	Domains int32 `json:"domains"`

	// RunningDomains of them that are active (running, paused, shutting down).
	// +optional
	RunningDomains int32 `json:"runningDomains"`

	// VCPUs the definitions of those domains give their guests.
	// +optional
	VCPUs int32 `json:"vcpus"`

	// Memory the definitions of those domains give their guests (their maximum).
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`

	// Volumes in the listed pools named as the provider names its volumes (base images and
	// their records, seeds, overlays and their ownership records).
	// +optional
	Volumes int32 `json:"volumes"`

	// VolumeBytes those volumes take on disk (their allocation).
	// +optional
	VolumeBytes *resource.Quantity `json:"volumeBytes,omitempty"`
}
