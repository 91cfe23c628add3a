package v1alpha1

// Rules are the platform's rules for every Proxy: what a team may ask for, and what it may
// reach. Every field is optional; the function applies the default written on each field when
// it is missing (a step's input is not defaulted by the API server).
type Rules struct {
	// Limits are the most one Proxy may ask for.
	// +optional
	Limits *Limits `json:"limits,omitempty"`

	// ClientCIDRs are the networks a Proxy's allowedCIDRs (who may use it) must lie inside.
	// Missing: the private networks (RFC 1918 and IPv6 unique-local). An empty list refuses
	// every Proxy.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:default={"10.0.0.0/8","172.16.0.0/12","192.168.0.0/16","fc00::/7"}
	ClientCIDRs []string `json:"clientCIDRs,omitempty"`

	// AllowSquidDirectives says whether a Proxy may add squid directives
	// (spec.squidDirectives). They can only narrow what the proxy allows: they come after the
	// platform's deny rules and may not redefine its access lists. Default true.
	// +optional
	// +kubebuilder:default=true
	AllowSquidDirectives *bool `json:"allowSquidDirectives,omitempty"`

	// AllowSSHKeys says whether a Proxy may add SSH keys (spec.sshAuthorizedKeys) for the
	// image's default user. A team that can log in to its guest can change its squid
	// configuration, so destination rules bind it only while this is false. Default true.
	// +optional
	// +kubebuilder:default=true
	AllowSSHKeys *bool `json:"allowSSHKeys,omitempty"`

	// Probe is the readiness probe of a Proxy that sets none. Missing: such a Proxy is Ready
	// once its port accepts connections.
	// +optional
	Probe *Probe `json:"probe,omitempty"`

	// Destinations say where a Proxy's clients may go.
	// +optional
	Destinations *Destinations `json:"destinations,omitempty"`

	// Budgets are totals per namespace of vCPUs, memory and Proxies. Missing: none.
	// +optional
	Budgets *Budgets `json:"budgets,omitempty"`

	// Packages say where a guest gets squid and qemu-guest-agent when its image lacks them.
	// +optional
	Packages *Packages `json:"packages,omitempty"`
}

// Packages say where a Proxy's guest gets squid and qemu-guest-agent when its image lacks them
// (a stock cloud image): cloud-init installs them with apt at the guest's first boot. An image
// that has both installs nothing and needs no mirror.
type Packages struct {
	// AptSources are the apt sources the guest installs them from, in place of the image's
	// own: one-line style, one "deb [OPTIONS] URI SUITE [COMPONENT...]" per line, such as
	// "deb http://mirror.example.internal/debian bookworm main"; lines starting with # are
	// comments. They are written only when a package is missing, and from then on the guest's
	// apt uses them alone. Missing: the image's own sources (a stock Debian image names
	// deb.debian.org), which the guest network must then reach.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	AptSources string `json:"aptSources,omitempty"`
}

// Limits are the most one Proxy may ask for. A missing field has the default written on it.
type Limits struct {
	// MaxVCPU is the most virtual CPUs per Proxy. Default 4.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +kubebuilder:default=4
	MaxVCPU *int64 `json:"maxVCPU,omitempty"`

	// MaxMemoryMiB is the most memory per Proxy, in MiB. Default 4096.
	// +optional
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:default=4096
	MaxMemoryMiB *int64 `json:"maxMemoryMiB,omitempty"`

	// MaxDiskSizeGiB is the largest disk per Proxy, in GiB. Default 64.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=64
	MaxDiskSizeGiB *int64 `json:"maxDiskSizeGiB,omitempty"`

	// MaxReplicas is the most VMs (spec.replicas) per Proxy. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=3
	MaxReplicas *int64 `json:"maxReplicas,omitempty"`
}

// Probe is a readiness probe sent through the proxy.
type Probe struct {
	// URL is an http:// URL fetched through the proxy.
	// +kubebuilder:validation:Pattern=`^http://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// ExpectedStatus is the HTTP status that means Ready. Default 204.
	// +optional
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	// +kubebuilder:default=204
	ExpectedStatus *int64 `json:"expectedStatus,omitempty"`
}

// DestinationMode says what happens to a request for a denied destination.
// +kubebuilder:validation:Enum=Enforce;Report
type DestinationMode string

// Destination modes.
const (
	// DestinationEnforce denies it with squid's 403 naming the rule.
	DestinationEnforce DestinationMode = "Enforce"
	// DestinationReport lets it through and logs it as a would-be denial in the guest
	// (/var/log/squid/would-deny.log).
	DestinationReport DestinationMode = "Report"
)

// RangeClass names a class of addresses squid refuses to connect to by default.
// +kubebuilder:validation:Enum=loopback;link-local;private;cgnat;unique-local
type RangeClass string

// Range classes.
const (
	RangeLoopback    RangeClass = "loopback"     // 127.0.0.0/8, 0.0.0.0/8, ::1, ::
	RangeLinkLocal   RangeClass = "link-local"   // 169.254.0.0/16 (the metadata address), fe80::/10
	RangePrivate     RangeClass = "private"      // RFC 1918: 10/8, 172.16/12, 192.168/16
	RangeCGNAT       RangeClass = "cgnat"        // RFC 6598: 100.64.0.0/10
	RangeUniqueLocal RangeClass = "unique-local" // IPv6 ULA: fc00::/7
)

// Destinations say where a Proxy's clients may go.
type Destinations struct {
	// Mode is Enforce (deny) or Report (allow, and log would-be denials in the guest).
	// Default Enforce.
	// +optional
	// +kubebuilder:default=Enforce
	Mode DestinationMode `json:"mode,omitempty"`

	// DeniedRanges are the classes of addresses squid refuses after resolving a request's
	// host. Missing: all of them. An empty list denies none.
	// +optional
	// +listType=set
	// +kubebuilder:default={"loopback","link-local","private","cgnat","unique-local"}
	DeniedRanges []RangeClass `json:"deniedRanges,omitempty"`

	// AllowedRanges are named networks inside the denied ranges that Proxies may reach all
	// the same (an origin on the LAN). They win over DeniedRanges, never over a Proxy's
	// allowedDomains.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	AllowedRanges []NamedRange `json:"allowedRanges,omitempty"`

	// DefaultAllowedDomains are the allowedDomains of a Proxy that sets none. Missing or
	// empty: such a Proxy may reach any domain (outside the denied ranges).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	DefaultAllowedDomains []string `json:"defaultAllowedDomains,omitempty"`
}

// NamedRange is a network with a name that squid's messages and logs use.
type NamedRange struct {
	// Name is a lower-case name such as lab-lan.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$`
	Name string `json:"name"`

	// CIDR is the network, such as 10.77.0.0/24.
	// +kubebuilder:validation:MaxLength=64
	CIDR string `json:"cidr"`
}

// Budgets are totals a namespace's Proxies may hold together.
type Budgets struct {
	// Default is the budget of every namespace not listed in Namespaces. Missing: such
	// namespaces have no budget.
	// +optional
	Default *Budget `json:"default,omitempty"`

	// Namespaces have budgets of their own.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	// +listType=map
	// +listMapKey=namespace
	Namespaces []NamespaceBudget `json:"namespaces,omitempty"`
}

// Budget is what a namespace's Proxies may hold together. A missing field is no limit.
type Budget struct {
	// MaxVCPU is the most vCPUs of all the namespace's Proxies together.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxVCPU *int64 `json:"maxVCPU,omitempty"`

	// MaxMemoryMiB is the most memory of all the namespace's Proxies together, in MiB.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxMemoryMiB *int64 `json:"maxMemoryMiB,omitempty"`

	// MaxProxies is the most Proxies (and ProxyClaims) in the namespace.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxProxies *int64 `json:"maxProxies,omitempty"`
}

// NamespaceBudget is the budget of one namespace.
type NamespaceBudget struct {
	// Namespace is the namespace's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	Budget `json:",inline"`
}
