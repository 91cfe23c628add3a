// Package kvmdomain reconciles KVMDomains: a q35 guest on a qcow2 overlay of a BaseImage,
// with a SeedVolume as its cloud-init cdrom.
//
// Create reuses what an interrupted earlier attempt left (the overlay, the definition), so a
// provider killed between any two steps converges without duplicates or orphans. A domain with
// our name but without our ownership mark is never adopted, changed or deleted. Observe never
// waits for a guest: it reports state, IP and probe result, and the next poll looks again.
package kvmdomain

import (
	"context"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/feature"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/connection"
	"github.com/provider-kvm/provider-kvm/internal/controller/setup"
	"github.com/provider-kvm/provider-kvm/internal/domainevents"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
	"github.com/provider-kvm/provider-kvm/internal/probe"
)

// defaultShutdownGrace is how long a guest gets to shut down after the ACPI request before
// it is powered off, when its KVMDomain sets no shutdownGracePeriodSeconds.
const defaultShutdownGrace = 90 * time.Second

// shutdownGrace is cr's shutdown grace period.
func shutdownGrace(cr *v1alpha1.KVMDomain) time.Duration {
	if s := cr.Spec.ForProvider.ShutdownGracePeriodSeconds; s != nil && *s >= 0 {
		return time.Duration(*s) * time.Second
	}
	return defaultShutdownGrace
}

// Error messages.
const (
	errNoBase          = "spec.forProvider.baseImageName is not set (set it, or baseImageRef or baseImageSelector)"
	errGetBase         = "cannot get BaseImage %s"
	errBaseNotReady    = "waiting for BaseImage %s to be Ready"
	errGetSeed         = "cannot get SeedVolume %s"
	errSeedNotReady    = "waiting for SeedVolume %s to be Ready"
	errNotOurs         = "domain %s exists on the host but is not owned by this KVMDomain (%s): refusing to adopt, change or delete it; rename one of them, or import it with managementPolicies [Observe]"
	errLookup          = "cannot look up the domain"
	errOverlay         = "cannot create the root disk overlay"
	errXML             = "cannot build the domain definition"
	errDiskTooSmall    = "diskSizeGiB %d is smaller than the base image's virtual size (%d bytes)"
	errWaitShutdown    = "waiting up to %s for the guest to shut down before it is removed"
	errDeleteOverlay   = "cannot delete the root disk overlay"
	errExternalName    = "the crossplane.io/external-name annotation %q is not this KVMDomain's domain name, %q: the provider derives the names of the domains it manages, so that no resource can act on another's; remove the annotation or set it to %q (to import an existing domain, use managementPolicies [Observe] on a host whose config allows imports)"
	errImportsOff      = "cannot import domain %s: imports are off on %s (the platform team allows them with spec.imports on that config)"
	errImportForeign   = "cannot import domain %s: it belongs to %s/%s (UID %s), and a domain managed by another resource is never imported"
	errResizeOverlay   = "cannot grow the root disk overlay"
	errNotABase        = "BaseImage %s reports volume %q, which is not a cached base image volume"
	errMACCheck        = "cannot check that the MAC address is unique on the host"
	errMACTaken        = "macAddress %s is already used by another domain on this host: MAC addresses are unique per host (a guest with another's address takes its DHCP lease and its traffic); choose another, or leave macAddress unset for one derived from this resource"
	errMACDerivedTaken = "the MAC address derived from this resource, %s, is already used by another domain on this host: MAC addresses are unique per host; set macAddress to another one"
)

// Connection detail keys: the guest's address, for a connection Secret.
const (
	ConnectionIPv4 = "ipv4"
	ConnectionMAC  = "mac"
)

// Event reasons.
const (
	reasonRestartPending event.Reason = "RestartPending"
	reasonSeedSwitched   event.Reason = "SeedSwitched"
	reasonInputsChanged  event.Reason = "InputsChanged"
	reasonForcedOff      event.Reason = "ForcedPowerOff"
	reasonDiskGrown      event.Reason = "DiskGrown"
	reasonLeft           event.Reason = "VolumeLeftAlone"
	reasonAddressIgnored event.Reason = "AddressIgnored"
)

// Setup adds the KVMDomain controller; it starts once the KVMDomain CRD is established. With
// events (from the watcher the host connections feed, see internal/domainevents), a domain's
// lifecycle and guest agent events reconcile its KVMDomain at once; nil means polls only. A
// BaseImage or SeedVolume turning Ready reconciles the KVMDomains that name it (inputwatch.go).
// shared is the process's state (setup.NewShared): overlays are created through its image cache
// state, shared with the BaseImage controller (imagecache.Shared.CreateOverlay).
func Setup(mgr ctrl.Manager, o controller.Options, conns *host.Connections, events *domainevents.Watcher, shared *setup.Shared) error {
	watches := inputWatches(mgr.GetCache(), mgr.GetClient())
	if events != nil {
		watches = append(watches, events.Source())
	}
	shutdowns := &shutdowns{m: map[types.UID]time.Time{}}
	// Readiness probes run in the background, bounded per host and per namespace; a changed
	// result wakes the KVMDomain (decision 48).
	var wake func(types.NamespacedName)
	if events != nil {
		wake = events.Wake
	}
	probes := probe.NewProber(probe.WithWake(wake))
	defines := newHostLocks()
	tails := newConsoleTails()
	policies := o.Features.Enabled(feature.EnableBetaManagementPolicies)
	return setup.Gated(mgr, o, setup.Kind[*v1alpha1.KVMDomain]{
		GroupKind: v1alpha1.KVMDomainGroupKind,
		GVK:       v1alpha1.KVMDomainGroupVersionKind,
		Object:    &v1alpha1.KVMDomain{},
		List:      &v1alpha1.KVMDomainList{},
		Watches:   watches,
		ExternalName: func(mg resource.Managed) string {
			return names.Domain(mg.GetNamespace(), mg.GetName())
		},
		Connector: func(rec event.Recorder) managed.TypedExternalConnector[*v1alpha1.KVMDomain] {
			return &connector{
				kube: mgr.GetClient(), recorder: rec, shutdowns: shutdowns, probes: probes, defines: defines,
				conn:    connection.NewForManager(mgr, conns, rec, shared.Libvirt),
				records: ownership.NewRecords(), images: shared.Images, policies: policies, events: events,
				tails: tails, consoleInPool: shared.ConsoleLogInPool, cluster: shared.ClusterID,
			}
		},
	})
}

type connector struct {
	kube      client.Client
	recorder  event.Recorder
	conn      *connection.Connector
	shutdowns *shutdowns
	probes    *probe.Prober
	defines   *hostLocks
	records   *ownership.Records
	images    *imagecache.Shared
	// policies: spec.managementPolicies are honoured (the provider's
	// --enable-management-policies, as the managed reconciler is told).
	policies bool
	// events learns which host each KVMDomain is on, so that only that host's domain events
	// requeue it (nil: no events).
	events *domainevents.Watcher
	// tails bounds the console tail events (console.go); consoleInPool logs new domains'
	// consoles in their pool, where the provider can read them (--console-log-in-pool).
	tails         *consoleTails
	consoleInPool bool
	// cluster is the provider's --cluster-id, named in the ownership records.
	cluster string
}

// Host is what the external client needs of a libvirt host; *libvirt.Client is one.
type Host interface {
	ownership.Storage
	imagecache.OverlayHost
	Domain(ctx context.Context, name string) (libvirt.DomainInfo, error)
	DomainIPv4(ctx context.Context, name, mac, source string) (string, error)
	DomainDefinitions(ctx context.Context) ([]string, error)
	NodeInfo(ctx context.Context) (libvirt.NodeInfo, error)
	NetworkRanges(ctx context.Context, name string) ([]netip.Prefix, error)
	DefineDomain(ctx context.Context, xml string) error
	SetAutostart(ctx context.Context, name string, on bool) error
	StartDomain(ctx context.Context, name string) error
	ShutdownDomain(ctx context.Context, name string) error
	DestroyDomain(ctx context.Context, name string) error
	UndefineDomain(ctx context.Context, name string) error
	ResizeVolume(ctx context.Context, pool, name string, size uint64) error
	BlockResize(ctx context.Context, name, path string, size uint64) error
	ChangeMedia(ctx context.Context, name, diskXML string) error
	ResumeDomain(ctx context.Context, name string) error
	Pool(ctx context.Context, name string) (libvirt.Pool, error)
	RefreshPool(ctx context.Context, pool string) error
	VolumeNames(ctx context.Context, pool string) ([]string, error)
}

func (c *connector) Connect(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.TypedExternalClient[*v1alpha1.KVMDomain], error) {
	// Admission bounds the name; one admitted before is refused before the host is asked
	// (nothing of it can be on the host, so its deletion goes on).
	if err := names.CheckLength(cr.GetNamespace(), cr.GetName()); err != nil && !meta.WasDeleted(cr) {
		return nil, err
	}
	s, err := c.conn.Connect(ctx, cr)
	if err != nil {
		return nil, err
	}
	nn := types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}
	gone := func() {}
	if c.events != nil {
		c.events.Bind(nn, s.Address())
		gone = func() { c.events.Unbind(nn) }
	}
	return &external{
		gone: gone,
		kube: c.kube, recorder: c.recorder, shutdowns: c.shutdowns, probes: c.probes, defaults: s.Defaults, source: s.Source, grant: s.Grant, defines: c.defines,
		lv: s.Libvirt(), dial: s.DialContext,
		records: c.records, images: c.images, host: s.Address(), importsAllowed: s.ImportsAllowed,
		policies: c.policies, unschedulable: s.Unschedulable, allocation: s.Allocation, limits: s.Limits,
		tails: c.tails, consoleInPool: c.consoleInPool, cluster: c.cluster,
	}, nil
}

type external struct {
	kube      client.Reader
	recorder  event.Recorder
	shutdowns *shutdowns
	defaults  v1alpha1.HostDefaults
	source    string
	// grant is what the namespace may use of the host: pools, networks, bridges and their ranges.
	grant hostgrants.Grant
	// defines serializes, per host, the MAC check and the definition of new domains.
	defines *hostLocks
	lv      Host
	dial    probe.DialFunc
	probes  *probe.Prober // nil: no probe runs, and a probed guest stays pending
	records *ownership.Records
	images  *imagecache.Shared
	host    string // the host's address, for the records' cache
	// importsAllowed: the config lets this resource import existing domains.
	importsAllowed bool
	// policies: spec.managementPolicies are honoured (see observeOnly).
	policies bool
	// unschedulable: the host is cordoned, no new domain is created (cordon.go).
	unschedulable bool
	// allocation: the config's allocation ratios; a new domain that does not fit is refused
	// (room.go).
	allocation *v1alpha1.AllocationRatios
	// limits cap a new domain's size, its namespace's domains on the host, and the free
	// space its overlay's pool keeps (limits.go).
	limits hostlimits.Limits
	// gone is called once the resource's deletion found nothing left on the host: what the
	// process keeps of it (its domain events' binding, its probe) is let go.
	gone func()
	// tails bounds the console tail events; consoleInPool logs a new domain's console in its
	// pool (console.go).
	tails         *consoleTails
	consoleInPool bool
	// cluster is the provider's --cluster-id, named in the ownership records of the domain
	// and its overlay.
	cluster string
}

// target is what a KVMDomain manages, all derived from the resource (never from the
// user-settable external-name annotation): its domain, its overlay and the overlay's owner.
type target struct {
	domain, overlay, pool string
	owner                 ownership.Owner
}

func (e *external) target(cr *v1alpha1.KVMDomain) target {
	t := target{
		domain:  names.Domain(cr.GetNamespace(), cr.GetName()),
		overlay: names.Overlay(cr.GetNamespace(), cr.GetName(), string(cr.GetUID())),
		pool:    cr.Spec.ForProvider.Pool,
		owner:   ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName(), ClusterID: e.cluster},
	}
	if t.pool == "" {
		t.pool = e.defaults.Pool
	}
	return t
}

func (e *external) Disconnect(context.Context) error { return nil }
