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
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/connection"
	"github.com/provider-kvm/provider-kvm/internal/controller/setup"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
	"github.com/provider-kvm/provider-kvm/internal/probe"
)

// shutdownGrace is how long a guest gets to shut down after the ACPI request before it is
// destroyed (on delete, or when powerState is Stopped).
const shutdownGrace = 90 * time.Second

const (
	errNoBase        = "spec.forProvider.baseImageName is not set (set it, or baseImageRef or baseImageSelector)"
	errGetBase       = "cannot get BaseImage %s"
	errBaseNotReady  = "waiting for BaseImage %s to be Ready"
	errGetSeed       = "cannot get SeedVolume %s"
	errSeedNotReady  = "waiting for SeedVolume %s to be Ready"
	errNotOurs       = "domain %s exists on the host but is not owned by this KVMDomain (%s): refusing to adopt, change or delete it; rename one of them, or import it with managementPolicies [Observe]"
	errLookup        = "cannot look up the domain"
	errOverlay       = "cannot create the root disk overlay"
	errXML           = "cannot build the domain definition"
	errDiskTooSmall  = "diskSizeGiB %d is smaller than the base image's virtual size (%d bytes)"
	errWaitShutdown  = "waiting up to %s for the guest to shut down before it is removed"
	errDeleteOverlay = "cannot delete the root disk overlay"
	errExternalName  = "the crossplane.io/external-name annotation %q is not this KVMDomain's domain name, %q: the provider derives the names of the domains it manages, so that no resource can act on another's; remove the annotation or set it to %q (to import an existing domain, use managementPolicies [Observe] on a host whose config allows imports)"
	errImportsOff    = "cannot import domain %s: imports are off on %s (the platform team allows them with spec.imports on that config)"
	errImportForeign = "cannot import domain %s: it belongs to %s/%s (UID %s), and a domain managed by another resource is never imported"
	errResizeOverlay = "cannot grow the root disk overlay"
	errNotABase      = "BaseImage %s reports volume %q, which is not a cached base image volume"

	// Connection detail keys: the guest's address, for a connection Secret.
	ConnectionIPv4 = "ipv4"
	ConnectionMAC  = "mac"

	reasonRestartPending = event.Reason("RestartPending")
	reasonInputsChanged  = event.Reason("InputsChanged")
	reasonForcedOff      = event.Reason("ForcedPowerOff")
	reasonDiskGrown      = event.Reason("DiskGrown")
	reasonLeft           = event.Reason("VolumeLeftAlone")
)

// Setup adds the KVMDomain controller; it starts once the KVMDomain CRD is established.
func Setup(mgr ctrl.Manager, o controller.Options, pool *host.Pool) error {
	shutdowns := &shutdowns{m: map[types.UID]time.Time{}}
	return setup.Gated(mgr, o, setup.Kind[*v1alpha1.KVMDomain]{
		GroupKind: v1alpha1.KVMDomainGroupKind,
		GVK:       v1alpha1.KVMDomainGroupVersionKind,
		Object:    &v1alpha1.KVMDomain{},
		List:      &v1alpha1.KVMDomainList{},
		ExternalName: func(mg resource.Managed) string {
			return names.Domain(mg.GetNamespace(), mg.GetName())
		},
		Connector: func(rec event.Recorder) managed.TypedExternalConnector[*v1alpha1.KVMDomain] {
			return &connector{
				kube: mgr.GetClient(), recorder: rec, shutdowns: shutdowns,
				conn:    connection.NewConnector(mgr.GetClient(), pool, rec),
				records: ownership.NewRecords(),
			}
		},
	})
}

// shutdowns remembers when a graceful shutdown was requested, per KVMDomain.
type shutdowns struct {
	mu sync.Mutex
	m  map[types.UID]time.Time
}

// since returns how long ago a shutdown of uid was first requested, starting the clock now
// if it was not.
func (s *shutdowns) since(uid types.UID) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[uid]
	if !ok {
		s.m[uid] = time.Now()
		return 0, false
	}
	return time.Since(t), true
}

func (s *shutdowns) done(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, uid)
}

type connector struct {
	kube      client.Client
	recorder  event.Recorder
	conn      *connection.Connector
	shutdowns *shutdowns
	records   *ownership.Records
}

// Host is what the external client needs of a libvirt host; *libvirt.Client is one.
type Host interface {
	ownership.Storage
	Domain(ctx context.Context, name string) (libvirt.DomainInfo, error)
	DomainIPv4(ctx context.Context, name, mac, source string) (string, error)
	DefineDomain(ctx context.Context, xml string) error
	SetAutostart(ctx context.Context, name string, on bool) error
	StartDomain(ctx context.Context, name string) error
	ShutdownDomain(ctx context.Context, name string) error
	DestroyDomain(ctx context.Context, name string) error
	UndefineDomain(ctx context.Context, name string) error
	ResizeVolume(ctx context.Context, pool, name string, size uint64) error
	BlockResize(ctx context.Context, name, path string, size uint64) error
}

func (c *connector) Connect(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.TypedExternalClient[*v1alpha1.KVMDomain], error) {
	s, err := c.conn.Connect(ctx, cr)
	if err != nil {
		return nil, err
	}
	return &external{
		kube: c.kube, recorder: c.recorder, shutdowns: c.shutdowns, defaults: s.Defaults, source: s.Source,
		lv: libvirt.New(s, libvirt.WithSocket(s.Socket), libvirt.WithURI(s.URI)), dial: s.DialContext,
		records: c.records, host: s.Address(), importsAllowed: s.ImportsAllowed,
	}, nil
}

type external struct {
	kube      client.Reader
	recorder  event.Recorder
	shutdowns *shutdowns
	defaults  v1alpha1.HostDefaults
	source    string
	lv        Host
	dial      probe.DialFunc
	records   *ownership.Records
	host      string // the host's address, for the records' cache
	// importsAllowed: the config lets this resource import existing domains.
	importsAllowed bool
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
		owner:   ownership.Owner{Kind: v1alpha1.KVMDomainKind, UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName()},
	}
	if t.pool == "" {
		t.pool = e.defaults.Pool
	}
	return t
}

func (e *external) pool(cr *v1alpha1.KVMDomain) string { return e.target(cr).pool }

// observed is the name of the domain Observe looks at, and whether that is an import: the
// derived name, or for an allowed import the external name.
func (e *external) observed(cr *v1alpha1.KVMDomain, t target) (name string, importing bool, err error) {
	n := meta.GetExternalName(cr)
	if n == "" || n == t.domain {
		return t.domain, false, nil
	}
	switch {
	case !observeOnly(cr):
		return "", false, errors.Errorf(errExternalName, n, t.domain, t.domain)
	case !e.importsAllowed:
		return "", false, errors.Errorf(errImportsOff, n, e.source)
	}
	return n, true, nil
}

// access is nil when this resource may observe (and, unless observe-only, change) d: d carries
// this resource's ownership mark, or it carries none and this is an allowed observe-only
// import. A domain marked as another resource's is never touched.
func (e *external) access(d libvirt.DomainInfo, cr *v1alpha1.KVMDomain) (imported bool, err error) {
	o, err := domainxml.OwnerOf(d.InactiveXML)
	if err != nil {
		return false, errors.Wrap(err, errLookup)
	}
	switch {
	case o != nil && o.UID == string(cr.GetUID()):
		return false, nil
	case o != nil && observeOnly(cr):
		return false, errors.Errorf(errImportForeign, d.Name, o.Namespace, o.Name, o.UID)
	case o != nil:
		return false, checkOwner(d, cr)
	case observeOnly(cr) && e.importsAllowed:
		return true, nil
	case observeOnly(cr):
		return false, errors.Errorf(errImportsOff, d.Name, e.source)
	}
	return false, checkOwner(d, cr)
}

func mac(cr *v1alpha1.KVMDomain) string {
	if cr.Spec.ForProvider.MACAddress != "" {
		return cr.Spec.ForProvider.MACAddress
	}
	return domainxml.MAC(string(cr.GetUID()))
}

// observeOnly is true when the resource may only be observed (an import).
func observeOnly(cr *v1alpha1.KVMDomain) bool {
	p := cr.GetManagementPolicies()
	return len(p) == 1 && p[0] == xpv2.ManagementActionObserve
}

func (e *external) Observe(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalObservation, error) {
	t := e.target(cr)
	deleting := meta.WasDeleted(cr)
	name, _, err := e.observed(cr, t)
	if deleting {
		// Deleting acts on what this resource derived, whatever the annotation says.
		name, err = t.domain, nil
	}
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	d, err := e.lv.Domain(ctx, name)
	var imported bool
	var accessErr error
	if err == nil {
		imported, accessErr = e.access(d, cr)
	}
	if libvirt.IsNotFound(err) || (accessErr != nil && deleting) {
		// A create that failed after the overlay was made leaves only the overlay; a domain of
		// our name that is not ours is never ours to delete. While deleting, report our
		// overlay (or its record) if it exists, so that Delete removes it.
		if deleting && !observeOnly(cr) {
			verr := e.records.Verify(ctx, e.lv, e.host, t.pool, t.overlay, t.owner)
			if verr != nil && !ownership.IsNotOwned(verr) {
				return managed.ExternalObservation{}, errors.Wrap(verr, errLookup)
			}
			return managed.ExternalObservation{ResourceExists: verr == nil}, nil
		}
		if deleting {
			return managed.ExternalObservation{ResourceExists: false}, nil
		}
		if err := e.waitForInputs(ctx, cr); err != nil {
			return managed.ExternalObservation{}, err
		}
		return managed.ExternalObservation{ResourceExists: false}, nil
	}
	if err != nil {
		return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
	}
	if accessErr != nil {
		return managed.ExternalObservation{}, accessErr
	}

	at := &cr.Status.AtProvider
	at.UUID, at.State = d.UUID, d.State
	at.WaitingFor = ""
	at.MACAddress = mac(cr)
	at.OverlayVolume = t.overlay
	if imported {
		// An imported domain reports its own address and has no overlay of ours.
		if at.MACAddress, err = domainxml.MACOf(d.XML); err != nil {
			return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
		}
		at.OverlayVolume = ""
	}
	if deleting {
		return managed.ExternalObservation{ResourceExists: true}, nil
	}

	want := cr.Spec.ForProvider
	upToDate := d.Autostart == want.Autostart
	running := d.State == libvirt.StateRunning
	switch want.PowerState {
	case v1alpha1.PowerStateStopped:
		upToDate = upToDate && d.State == libvirt.StateShutOff
	default:
		upToDate = upToDate && running
	}
	persistent, err := domainxml.SizeOf(d.InactiveXML)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	upToDate = upToDate && persistent == wantSize(cr)
	if !imported && want.DiskSizeGiB != nil {
		grow, err := e.diskToGrow(ctx, cr, t)
		if err != nil {
			return managed.ExternalObservation{}, err
		}
		upToDate = upToDate && grow == 0
	}
	live, err := domainxml.SizeOf(d.XML)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	at.RestartPending = running && live != persistent

	e.inputsChanged(ctx, cr, d)

	if !running {
		at.IPv4, at.IPSource, at.GuestAgentConnected, at.Probe = "", "", false, ""
		cr.SetConditions(xpv2.Unavailable().WithMessage("domain is " + d.State))
		return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: upToDate}, nil
	}
	e.observeGuest(ctx, cr, name)
	return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: upToDate, ConnectionDetails: managed.ConnectionDetails{
		ConnectionIPv4: []byte(at.IPv4), ConnectionMAC: []byte(at.MACAddress),
	}}, nil
}

// observeGuest finds the guest's address and runs the readiness probe. It never waits: what
// is not there yet is reported, and the next poll looks again.
func (e *external) observeGuest(ctx context.Context, cr *v1alpha1.KVMDomain, name string) {
	at := &cr.Status.AtProvider
	at.IPv4, at.IPSource = "", ""
	for _, src := range []string{libvirt.SourceLease, libvirt.SourceAgent, libvirt.SourceARP} {
		ip, err := e.lv.DomainIPv4(ctx, name, at.MACAddress, src)
		if src == libvirt.SourceAgent {
			at.GuestAgentConnected = err == nil
		}
		if err == nil && ip != "" {
			at.IPv4, at.IPSource = ip, src
			break
		}
	}
	if at.IPv4 == "" {
		cr.SetConditions(xpv2.Unavailable().WithMessage("running; waiting for the guest's IPv4 address"))
		return
	}
	p := cr.Spec.ForProvider.ReadinessProbe
	if p == nil {
		at.Probe = ""
		cr.SetConditions(xpv2.Available())
		return
	}
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	var err error
	switch {
	case p.TCP != nil:
		err = probe.TCP(ctx, e.dial, probe.Addr(at.IPv4, p.TCP.Port), timeout)
	case p.HTTPProxy != nil:
		err = probe.HTTPProxy(ctx, e.dial, probe.Addr(at.IPv4, p.HTTPProxy.Port), p.HTTPProxy.URL, int(p.HTTPProxy.ExpectedStatus), timeout)
	}
	if err != nil {
		at.Probe = "failing: " + err.Error()
		cr.SetConditions(xpv2.Unavailable().WithMessage("readiness probe " + at.Probe))
		return
	}
	at.Probe = "passing"
	cr.SetConditions(xpv2.Available())
}

// inputsChanged reports, in status and once as an event, a BaseImage or SeedVolume that
// changed since the domain was defined. Nothing is changed on the host: replacing a root disk
// or a seed under a guest is the user's decision.
func (e *external) inputsChanged(ctx context.Context, cr *v1alpha1.KVMDomain, d libvirt.DomainInfo) {
	o, err := domainxml.OwnerOf(d.InactiveXML)
	if err != nil || o == nil {
		return
	}
	var changed []string
	p := cr.Spec.ForProvider
	if p.BaseImageName != nil && o.BaseVolume != "" {
		base := &v1alpha1.BaseImage{}
		if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.BaseImageName}, base); err == nil &&
			base.Status.AtProvider.VolumeName != "" && base.Status.AtProvider.VolumeName != o.BaseVolume {
			changed = append(changed, fmt.Sprintf("BaseImage %s now publishes %s; this domain's overlay stays on %s until the KVMDomain is recreated",
				*p.BaseImageName, base.Status.AtProvider.VolumeName, o.BaseVolume))
		}
	}
	if p.SeedVolumeName != nil && o.SeedSHA256 != "" {
		seed := &v1alpha1.SeedVolume{}
		if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.SeedVolumeName}, seed); err == nil &&
			seed.Status.AtProvider.ISOSHA256 != "" && seed.Status.AtProvider.ISOSHA256 != o.SeedSHA256 {
			changed = append(changed, fmt.Sprintf("SeedVolume %s has new content since the domain was defined; the guest reads it at its next boot (cloud-init re-runs per-instance modules only for a new instance-id)",
				*p.SeedVolumeName))
		}
	}
	if len(changed) > 0 && len(cr.Status.AtProvider.InputsChanged) != len(changed) {
		for _, c := range changed {
			e.recorder.Event(cr, event.Normal(reasonInputsChanged, c))
		}
	}
	cr.Status.AtProvider.InputsChanged = changed
}

func checkOwner(d libvirt.DomainInfo, cr *v1alpha1.KVMDomain) error {
	o, err := domainxml.OwnerOf(d.InactiveXML)
	if err != nil {
		return errors.Wrap(err, errLookup)
	}
	if o == nil {
		return errors.Errorf(errNotOurs, d.Name, "it carries no provider-kvm ownership mark")
	}
	if o.UID != string(cr.GetUID()) {
		return errors.Errorf(errNotOurs, d.Name, fmt.Sprintf("it belongs to %s/%s, UID %s", o.Namespace, o.Name, o.UID))
	}
	return nil
}

// seedPool is the pool of a SeedVolume's volume, chosen as its controller chooses it.
func seedPool(sv *v1alpha1.SeedVolume, def string) string {
	switch {
	case sv.Spec.ForProvider.Pool != "":
		return sv.Spec.ForProvider.Pool
	case sv.Status.AtProvider.Pool != "":
		return sv.Status.AtProvider.Pool
	}
	return def
}

// inputs are the BaseImage and SeedVolume a domain is built from.
type inputs struct {
	base *v1alpha1.BaseImage
	seed *v1alpha1.SeedVolume
}

// waitForInputs is Observe's check, for a domain that does not exist yet, that its
// BaseImage and SeedVolume are Ready. One that is not is named in status.atProvider.waitingFor
// and returned as an error: the reconcile is then retried after a short backoff (not at the
// next poll), no create is attempted, and a composition can tell this wait from a failure by
// the field. It is done here, not in Create, because crossplane-runtime persists the status
// that Observe leaves on an error, while after a failed Create it re-reads the object to record
// its critical annotations and the status set by Create is lost. Other problems with the
// inputs (a missing SeedVolume, say) are left to Create, which reports them as failures.
func (e *external) waitForInputs(ctx context.Context, cr *v1alpha1.KVMDomain) error {
	cr.Status.AtProvider.WaitingFor = ""
	if observeOnly(cr) {
		return nil
	}
	var nr notReady
	if _, err := e.inputs(ctx, cr); errors.As(err, &nr) {
		cr.Status.AtProvider.WaitingFor = nr.what
		return nr
	}
	return nil
}

// notReady is the error of an input that exists but is not Ready yet.
type notReady struct {
	what string // kind and name, e.g. "SeedVolume web-seed"
	err  error
}

func (n notReady) Error() string { return n.err.Error() }

func (e *external) inputs(ctx context.Context, cr *v1alpha1.KVMDomain) (*inputs, error) {
	p := cr.Spec.ForProvider
	if p.BaseImageName == nil || *p.BaseImageName == "" {
		return nil, errors.New(errNoBase)
	}
	in := &inputs{base: &v1alpha1.BaseImage{}}
	if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.BaseImageName}, in.base); err != nil {
		return nil, errors.Wrapf(err, errGetBase, *p.BaseImageName)
	}
	if in.base.GetCondition(xpv2.TypeReady).Reason != xpv2.ReasonAvailable || in.base.Status.AtProvider.Path == "" {
		return nil, notReady{what: "BaseImage " + *p.BaseImageName, err: errors.Errorf(errBaseNotReady, *p.BaseImageName)}
	}
	if p.SeedVolumeName != nil && *p.SeedVolumeName != "" {
		in.seed = &v1alpha1.SeedVolume{}
		if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.SeedVolumeName}, in.seed); err != nil {
			return nil, errors.Wrapf(err, errGetSeed, *p.SeedVolumeName)
		}
		if in.seed.GetCondition(xpv2.TypeReady).Reason != xpv2.ReasonAvailable || in.seed.Status.AtProvider.VolumeName == "" {
			return nil, notReady{what: "SeedVolume " + *p.SeedVolumeName, err: errors.Errorf(errSeedNotReady, *p.SeedVolumeName)}
		}
	}
	return in, nil
}

// spec builds the domain definition of cr.
func (e *external) spec(cr *v1alpha1.KVMDomain, in *inputs, uuid string) (string, error) {
	p := cr.Spec.ForProvider
	s := domainxml.Spec{
		Name:      e.target(cr).domain,
		UUID:      uuid,
		Type:      string(p.DomainType),
		VCPU:      uint(p.VCPU),
		MemoryMiB: uint(p.MemoryMiB),
		CPUMode:   string(p.CPUMode),
		Firmware:  string(p.Firmware),
		RootDisk:  domainxml.Volume{Pool: e.pool(cr), Name: e.target(cr).overlay},
		Network:   p.Network,
		Bridge:    p.Bridge,
		MAC:       mac(cr),
		Owner: domainxml.Owner{UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName(), ProviderConfig: e.source,
			BaseVolume: in.base.Status.AtProvider.VolumeName},
	}
	s.ConsoleLog = "/var/log/libvirt/qemu/" + s.Name + "-console.log"
	if s.Type == "" {
		s.Type = string(e.defaults.DomainType)
	}
	if s.Firmware == "" {
		s.Firmware = string(in.base.Spec.ForProvider.Firmware)
	}
	if s.Network == "" && s.Bridge == "" {
		s.Network = e.defaults.Network
	}
	if in.seed != nil {
		// The seed's volume name is derived from the SeedVolume, never read from its status.
		s.Seed = &domainxml.Volume{Pool: seedPool(in.seed, e.defaults.Pool), Name: names.SeedVolume(in.seed.GetNamespace(), in.seed.GetName(), string(in.seed.GetUID()))}
		s.Owner.SeedSHA256 = in.seed.Status.AtProvider.ISOSHA256
	}
	x, err := domainxml.Domain(s)
	return x, errors.Wrap(err, errXML)
}

// overlay creates the root disk overlay unless an earlier attempt did. Its ownership record
// comes first, so the overlay never exists without one; an overlay of our name that is not
// ours is never used.
func (e *external) overlay(ctx context.Context, cr *v1alpha1.KVMDomain, t target, base *v1alpha1.BaseImage) error {
	if _, err := e.lv.Volume(ctx, t.pool, t.overlay); err == nil {
		return errors.Wrap(e.records.Verify(ctx, e.lv, e.host, t.pool, t.overlay, t.owner), errOverlay)
	} else if !libvirt.IsNotFound(err) {
		return errors.Wrap(err, errOverlay)
	}
	capacity := uint64(base.Status.AtProvider.VirtualSizeBytes)
	if g := cr.Spec.ForProvider.DiskSizeGiB; g != nil {
		want := uint64(*g) << 30
		if want < capacity {
			return errors.Errorf(errDiskTooSmall, *g, capacity)
		}
		capacity = want
	}
	format := string(base.Spec.ForProvider.Format)
	if format == "" {
		format = string(v1alpha1.ImageFormatQCOW2)
	}
	// The backing file is looked up on the host by a base image volume name, never taken as a
	// path from status: an overlay can only ever back onto a cached base image.
	bv, bp := base.Status.AtProvider.VolumeName, base.Status.AtProvider.Pool
	if bp == "" {
		bp = t.pool
	}
	if !imagecache.IsVolumeName(bv) {
		return errors.Errorf(errNotABase, base.GetName(), bv)
	}
	bvol, err := e.lv.Volume(ctx, bp, bv)
	if err != nil {
		return errors.Wrap(err, errOverlay)
	}
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: t.overlay, Format: "qcow2", CapacityBytes: capacity,
		BackingStorePath: bvol.Path, BackingStoreFormat: format})
	if err != nil {
		return errors.Wrap(err, errOverlay)
	}
	if err := e.records.Claim(ctx, e.lv, e.host, t.pool, t.overlay, t.owner); err != nil {
		return errors.Wrap(err, errOverlay)
	}
	if _, err := e.lv.CreateVolume(ctx, t.pool, x); err != nil && !libvirt.IsExists(err) {
		return errors.Wrap(err, errOverlay)
	}
	return nil
}

// diskToGrow returns how many bytes the overlay lacks of diskSizeGiB (0: none).
func (e *external) diskToGrow(ctx context.Context, cr *v1alpha1.KVMDomain, t target) (uint64, error) {
	g := cr.Spec.ForProvider.DiskSizeGiB
	if g == nil {
		return 0, nil
	}
	v, err := e.lv.Volume(ctx, t.pool, t.overlay)
	if err != nil {
		return 0, errors.Wrap(err, errLookup)
	}
	if want := uint64(*g) << 30; want > v.CapacityBytes {
		return want - v.CapacityBytes, nil
	}
	return 0, nil
}

// growDisk grows the overlay to diskSizeGiB: through QEMU while the guest runs (it holds the
// image open), else on the volume. The guest's partition and filesystem are its own to grow.
func (e *external) growDisk(ctx context.Context, cr *v1alpha1.KVMDomain, t target, d libvirt.DomainInfo) error {
	grow, err := e.diskToGrow(ctx, cr, t)
	if err != nil || grow == 0 {
		return err
	}
	if err := e.records.Verify(ctx, e.lv, e.host, t.pool, t.overlay, t.owner); err != nil {
		return errors.Wrap(err, errResizeOverlay)
	}
	want := uint64(*cr.Spec.ForProvider.DiskSizeGiB) << 30
	v, err := e.lv.Volume(ctx, t.pool, t.overlay)
	if err != nil {
		return errors.Wrap(err, errResizeOverlay)
	}
	if d.State == libvirt.StateRunning || d.State == libvirt.StatePaused {
		err = e.lv.BlockResize(ctx, d.Name, v.Path, want)
	} else {
		err = e.lv.ResizeVolume(ctx, t.pool, t.overlay, want)
	}
	if err != nil {
		return errors.Wrap(err, errResizeOverlay)
	}
	e.recorder.Event(cr, event.Normal(reasonDiskGrown, fmt.Sprintf(
		"root disk grown to %d GiB: the guest must grow its partition and filesystem (cloud-init's growpart does so at boot)", *cr.Spec.ForProvider.DiskSizeGiB)))
	return nil
}

func (e *external) Create(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalCreation, error) {
	cr.SetConditions(xpv2.Creating())
	in, err := e.inputs(ctx, cr)
	if err != nil {
		return managed.ExternalCreation{}, err
	}
	x, err := e.spec(cr, in, "")
	if err != nil {
		return managed.ExternalCreation{}, err
	}
	t := e.target(cr)
	if _, _, err := e.observed(cr, t); err != nil {
		return managed.ExternalCreation{}, err
	}
	if err := e.overlay(ctx, cr, t, in.base); err != nil {
		return managed.ExternalCreation{}, err
	}
	// Observe found no domain of this name; if one appeared since, DefineDomain of a domain
	// with another UUID fails and nothing of it is touched.
	if err := e.lv.DefineDomain(ctx, x); err != nil {
		return managed.ExternalCreation{}, err
	}
	name := t.domain
	if cr.Spec.ForProvider.Autostart {
		if err := e.lv.SetAutostart(ctx, name, true); err != nil {
			return managed.ExternalCreation{}, err
		}
	}
	if cr.Spec.ForProvider.PowerState != v1alpha1.PowerStateStopped {
		if err := e.lv.StartDomain(ctx, name); err != nil {
			return managed.ExternalCreation{}, err
		}
	}
	return managed.ExternalCreation{}, nil
}

func (e *external) Update(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalUpdate, error) {
	t := e.target(cr)
	name := t.domain
	if _, _, err := e.observed(cr, t); err != nil {
		return managed.ExternalUpdate{}, err
	}
	d, err := e.lv.Domain(ctx, name)
	if err != nil {
		return managed.ExternalUpdate{}, errors.Wrap(err, errLookup)
	}
	if err := checkOwner(d, cr); err != nil {
		return managed.ExternalUpdate{}, err
	}
	want := cr.Spec.ForProvider
	if err := e.growDisk(ctx, cr, t, d); err != nil {
		return managed.ExternalUpdate{}, err
	}

	// vcpu and memory go into the persistent definition; a running guest sees them at its
	// next boot, and status.atProvider.restartPending says so.
	persistent, err := domainxml.SizeOf(d.InactiveXML)
	if err != nil {
		return managed.ExternalUpdate{}, err
	}
	if persistent != wantSize(cr) {
		in, err := e.inputs(ctx, cr)
		if err != nil {
			return managed.ExternalUpdate{}, err
		}
		x, err := e.spec(cr, in, d.UUID)
		if err != nil {
			return managed.ExternalUpdate{}, err
		}
		if err := e.lv.DefineDomain(ctx, x); err != nil {
			return managed.ExternalUpdate{}, err
		}
		if d.State == libvirt.StateRunning {
			e.recorder.Event(cr, event.Normal(reasonRestartPending, "vcpu/memory changed: the new values apply at the guest's next restart"))
		}
	}
	if d.Autostart != want.Autostart {
		if err := e.lv.SetAutostart(ctx, name, want.Autostart); err != nil {
			return managed.ExternalUpdate{}, err
		}
	}

	switch {
	case want.PowerState == v1alpha1.PowerStateStopped && d.State != libvirt.StateShutOff:
		return managed.ExternalUpdate{}, e.powerOff(ctx, cr, name, d.State)
	case want.PowerState != v1alpha1.PowerStateStopped && d.State == libvirt.StateShutOff:
		e.shutdowns.done(cr.GetUID())
		return managed.ExternalUpdate{}, e.lv.StartDomain(ctx, name)
	}
	return managed.ExternalUpdate{}, nil
}

// powerOff asks the guest to shut down, and destroys it once shutdownGrace has passed.
func (e *external) powerOff(ctx context.Context, cr *v1alpha1.KVMDomain, name, state string) error {
	if state == libvirt.StateShutOff {
		e.shutdowns.done(cr.GetUID())
		return nil
	}
	waited, asked := e.shutdowns.since(cr.GetUID())
	if asked && waited > shutdownGrace {
		e.recorder.Event(cr, event.Warning(reasonForcedOff, errors.Errorf("the guest did not shut down within %s: powered off", shutdownGrace)))
		return e.lv.DestroyDomain(ctx, name)
	}
	if state == libvirt.StateRunning {
		if err := e.lv.ShutdownDomain(ctx, name); err != nil {
			return err
		}
	} else if state == libvirt.StatePaused || state == libvirt.StateCrashed || state == libvirt.StateSuspended {
		return e.lv.DestroyDomain(ctx, name)
	}
	return nil
}

func (e *external) Delete(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalDelete, error) {
	cr.SetConditions(xpv2.Deleting())
	t := e.target(cr)
	name := t.domain
	d, err := e.lv.Domain(ctx, name)
	switch {
	case libvirt.IsNotFound(err):
	case err != nil:
		return managed.ExternalDelete{}, errors.Wrap(err, errLookup)
	case checkOwner(d, cr) != nil:
		// Not ours: leave the domain alone; only our own overlay goes.
	default:
		if d.State != libvirt.StateShutOff {
			if err := e.powerOff(ctx, cr, name, d.State); err != nil {
				return managed.ExternalDelete{}, err
			}
			return managed.ExternalDelete{}, errors.Errorf(errWaitShutdown, shutdownGrace)
		}
		if err := e.lv.UndefineDomain(ctx, name); err != nil && !libvirt.IsNotFound(err) {
			return managed.ExternalDelete{}, err
		}
	}
	e.shutdowns.done(cr.GetUID())
	return managed.ExternalDelete{}, e.deleteOverlay(ctx, cr, t)
}

// deleteOverlay removes our overlay and then its ownership record. An overlay without our
// record is left where it is, and said so.
func (e *external) deleteOverlay(ctx context.Context, cr *v1alpha1.KVMDomain, t target) error {
	_, err := e.lv.Volume(ctx, t.pool, t.overlay)
	switch {
	case libvirt.IsNotFound(err):
	case err != nil:
		return errors.Wrap(err, errDeleteOverlay)
	default:
		verr := e.records.Verify(ctx, e.lv, e.host, t.pool, t.overlay, t.owner)
		if ownership.IsNotOwned(verr) {
			e.recorder.Event(cr, event.Warning(reasonLeft, verr))
			return nil
		}
		if verr != nil {
			return errors.Wrap(verr, errDeleteOverlay)
		}
		if err := e.lv.DeleteVolume(ctx, t.pool, t.overlay); err != nil && !libvirt.IsNotFound(err) {
			return errors.Wrap(err, errDeleteOverlay)
		}
	}
	return errors.Wrap(e.records.Release(ctx, e.lv, e.host, t.pool, t.overlay, t.owner), errDeleteOverlay)
}

func (e *external) Disconnect(context.Context) error { return nil }

func wantSize(cr *v1alpha1.KVMDomain) domainxml.Size {
	return domainxml.Size{VCPU: uint(cr.Spec.ForProvider.VCPU), MemoryMiB: uint(cr.Spec.ForProvider.MemoryMiB)}
}
