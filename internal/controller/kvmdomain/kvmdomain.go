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
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
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

	// Connection detail keys: the guest's address, for a connection Secret.
	ConnectionIPv4 = "ipv4"
	ConnectionMAC  = "mac"

	reasonRestartPending = event.Reason("RestartPending")
	reasonInputsChanged  = event.Reason("InputsChanged")
	reasonForcedOff      = event.Reason("ForcedPowerOff")
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
				conn: connection.NewConnector(mgr.GetClient(), pool, rec),
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
}

func (c *connector) Connect(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.TypedExternalClient[*v1alpha1.KVMDomain], error) {
	s, err := c.conn.Connect(ctx, cr)
	if err != nil {
		return nil, err
	}
	return &external{
		kube: c.kube, recorder: c.recorder, shutdowns: c.shutdowns, defaults: s.Defaults, source: s.Source,
		lv: libvirt.New(s, libvirt.WithSocket(s.Socket), libvirt.WithURI(s.URI)), dial: s.DialContext,
	}, nil
}

type external struct {
	kube      client.Reader
	recorder  event.Recorder
	shutdowns *shutdowns
	defaults  v1alpha1.HostDefaults
	source    string
	lv        *libvirt.Client
	dial      probe.DialFunc
}

func (e *external) pool(cr *v1alpha1.KVMDomain) string {
	if cr.Spec.ForProvider.Pool != "" {
		return cr.Spec.ForProvider.Pool
	}
	return e.defaults.Pool
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
	name := meta.GetExternalName(cr)
	d, err := e.lv.Domain(ctx, name)
	foreign := err == nil && !observeOnly(cr) && checkOwner(d, cr) != nil
	if libvirt.IsNotFound(err) || (foreign && meta.WasDeleted(cr)) {
		// A create that failed after the overlay was made leaves only the overlay; a domain of
		// our name that is not ours is never ours to delete. While deleting, report our
		// overlay if it exists, so that Delete removes it.
		if meta.WasDeleted(cr) && !observeOnly(cr) {
			_, verr := e.lv.Volume(ctx, e.pool(cr), names.Overlay(cr.GetNamespace(), cr.GetName(), string(cr.GetUID())))
			if verr != nil && !libvirt.IsNotFound(verr) {
				return managed.ExternalObservation{}, errors.Wrap(verr, errLookup)
			}
			return managed.ExternalObservation{ResourceExists: verr == nil}, nil
		}
		if err := e.waitForInputs(ctx, cr); err != nil {
			return managed.ExternalObservation{}, err
		}
		return managed.ExternalObservation{ResourceExists: false}, nil
	}
	if err != nil {
		return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
	}
	if !observeOnly(cr) {
		if err := checkOwner(d, cr); err != nil {
			return managed.ExternalObservation{}, err
		}
	}

	at := &cr.Status.AtProvider
	at.UUID, at.State = d.UUID, d.State
	at.WaitingFor = ""
	at.MACAddress = mac(cr)
	at.OverlayVolume = names.Overlay(cr.GetNamespace(), cr.GetName(), string(cr.GetUID()))
	if meta.WasDeleted(cr) {
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
		Name:      meta.GetExternalName(cr),
		UUID:      uuid,
		Type:      string(p.DomainType),
		VCPU:      uint(p.VCPU),
		MemoryMiB: uint(p.MemoryMiB),
		CPUMode:   string(p.CPUMode),
		Firmware:  string(p.Firmware),
		RootDisk:  domainxml.Volume{Pool: e.pool(cr), Name: names.Overlay(cr.GetNamespace(), cr.GetName(), string(cr.GetUID()))},
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
		s.Seed = &domainxml.Volume{Pool: in.seed.Status.AtProvider.Pool, Name: in.seed.Status.AtProvider.VolumeName}
		s.Owner.SeedSHA256 = in.seed.Status.AtProvider.ISOSHA256
	}
	x, err := domainxml.Domain(s)
	return x, errors.Wrap(err, errXML)
}

// overlay creates the root disk overlay unless an earlier attempt did.
func (e *external) overlay(ctx context.Context, cr *v1alpha1.KVMDomain, base *v1alpha1.BaseImage) error {
	pool, name := e.pool(cr), names.Overlay(cr.GetNamespace(), cr.GetName(), string(cr.GetUID()))
	if _, err := e.lv.Volume(ctx, pool, name); err == nil {
		return nil
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
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: name, Format: "qcow2", CapacityBytes: capacity,
		BackingStorePath: base.Status.AtProvider.Path, BackingStoreFormat: format})
	if err != nil {
		return errors.Wrap(err, errOverlay)
	}
	if _, err := e.lv.CreateVolume(ctx, pool, x); err != nil && !libvirt.IsExists(err) {
		return errors.Wrap(err, errOverlay)
	}
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
	if err := e.overlay(ctx, cr, in.base); err != nil {
		return managed.ExternalCreation{}, err
	}
	// Observe found no domain of this name; if one appeared since, DefineDomain of a domain
	// with another UUID fails and nothing of it is touched.
	if err := e.lv.DefineDomain(ctx, x); err != nil {
		return managed.ExternalCreation{}, err
	}
	name := meta.GetExternalName(cr)
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
	name := meta.GetExternalName(cr)
	d, err := e.lv.Domain(ctx, name)
	if err != nil {
		return managed.ExternalUpdate{}, errors.Wrap(err, errLookup)
	}
	want := cr.Spec.ForProvider

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
	name := meta.GetExternalName(cr)
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
	if err := e.lv.DeleteVolume(ctx, e.pool(cr), names.Overlay(cr.GetNamespace(), cr.GetName(), string(cr.GetUID()))); err != nil {
		return managed.ExternalDelete{}, errors.Wrap(err, errDeleteOverlay)
	}
	return managed.ExternalDelete{}, nil
}

func (e *external) Disconnect(context.Context) error { return nil }

func wantSize(cr *v1alpha1.KVMDomain) domainxml.Size {
	return domainxml.Size{VCPU: uint(cr.Spec.ForProvider.VCPU), MemoryMiB: uint(cr.Spec.ForProvider.MemoryMiB)}
}
