package kvmdomain

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

// observed is the name of the domain Observe looks at: the derived name, or for an allowed
// import the external name.
func (e *external) observed(cr *v1alpha1.KVMDomain, t target) (string, error) {
	n := meta.GetExternalName(cr)
	if n == "" || n == t.domain || meta.WasDeleted(cr) {
		// Deleting acts on what this resource derived, whatever the annotation says.
		return t.domain, nil
	}
	switch {
	case !e.observeOnly(cr):
		return "", errors.Errorf(errExternalName, n, t.domain, t.domain)
	case !e.importsAllowed:
		return "", errors.Errorf(errImportsOff, n, e.source)
	}
	return n, nil
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
	case o != nil && e.observeOnly(cr):
		return false, errors.Errorf(errImportForeign, d.Name, o.Namespace, o.Name, o.UID)
	case o != nil:
		return false, checkOwner(d, cr)
	case e.observeOnly(cr) && e.importsAllowed:
		return true, nil
	case e.observeOnly(cr):
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

// observeOnly is true when the resource may only be observed (an import). It is
// crossplane-runtime's own decision, so it agrees with the managed reconciler's: with
// management policies disabled (--enable-management-policies=false) nothing is observe-only.
func (e *external) observeOnly(cr *v1alpha1.KVMDomain) bool {
	return managed.NewManagementPoliciesResolver(e.policies, cr.GetManagementPolicies()).ShouldOnlyObserve()
}

func (e *external) Observe(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalObservation, error) {
	t := e.target(cr)
	deleting := meta.WasDeleted(cr)
	name, err := e.observed(cr, t)
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
		return e.observeAbsent(ctx, cr, t)
	}
	if err != nil {
		return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
	}
	if accessErr != nil {
		return managed.ExternalObservation{}, accessErr
	}

	if err := reportFound(cr, t, d, imported); err != nil {
		return managed.ExternalObservation{}, err
	}
	at := &cr.Status.AtProvider
	if deleting {
		e.forgetProbe(cr)
		return managed.ExternalObservation{ResourceExists: true}, nil
	}

	persistent, live, err := sizes(d)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	grow, paused, err := e.storageOf(ctx, cr, t, &d, imported)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	running := d.State == libvirt.StateRunning
	upToDate := upToDate(cr.Spec.ForProvider, d, persistent, grow) && e.seedCurrent(ctx, cr, d, running, imported)
	at.RestartPending = running && live != persistent

	e.inputsChanged(ctx, cr, d)

	if !running {
		e.forgetProbe(cr)
		observeNotRunning(cr, d.State, paused)
		setDomainConditions(cr, d, false)
		return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: upToDate}, nil
	}
	return e.observeRunning(ctx, cr, t, name, d, imported, upToDate), nil
}

// observeRunning is Observe's end for a running domain: the guest's address and readiness,
// the domain's conditions, the console's end for a guest that stays not Ready.
func (e *external) observeRunning(ctx context.Context, cr *v1alpha1.KVMDomain, t target, name string, d libvirt.DomainInfo, imported, upToDate bool) managed.ExternalObservation {
	agentAsked := e.observeGuest(ctx, cr, name, d)
	setDomainConditions(cr, d, agentAsked)
	if !imported {
		e.showConsoleTail(ctx, cr, t, d)
	}
	at := &cr.Status.AtProvider
	return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: upToDate, ConnectionDetails: managed.ConnectionDetails{
		ConnectionIPv4: []byte(at.IPv4), ConnectionMAC: []byte(at.MACAddress),
	}}
}

// storageOf is what Observe learns of d's storage: how many bytes its root disk must grow by,
// and, for a domain QEMU paused on an I/O error, why it stays paused (resumeAfterIOError
// resumes it, and marks d running, once its pool has room).
func (e *external) storageOf(ctx context.Context, cr *v1alpha1.KVMDomain, t target, d *libvirt.DomainInfo, imported bool) (uint64, string, error) {
	grow, err := e.growOf(ctx, cr, t, imported)
	if err != nil {
		return 0, "", err
	}
	paused, err := e.resumeAfterIOError(ctx, cr, t, d, imported)
	return grow, paused, err
}

// growOf is how many bytes the root disk must grow by; an imported domain's disk is not ours.
func (e *external) growOf(ctx context.Context, cr *v1alpha1.KVMDomain, t target, imported bool) (uint64, error) {
	if imported {
		return 0, nil
	}
	return e.diskToGrow(ctx, cr, t)
}

// sizes returns the vcpu and memory of d's persistent and live definitions.
func sizes(d libvirt.DomainInfo) (persistent, live domainxml.Size, err error) {
	if persistent, err = domainxml.SizeOf(d.InactiveXML); err != nil {
		return persistent, live, err
	}
	live, err = domainxml.SizeOf(d.XML)
	return persistent, live, err
}

// reportFound writes what was found of d into status. An imported domain reports its own MAC and
// has no overlay of ours.
func reportFound(cr *v1alpha1.KVMDomain, t target, d libvirt.DomainInfo, imported bool) error {
	at := &cr.Status.AtProvider
	at.UUID, at.State, at.WaitingFor = d.UUID, d.State, ""
	at.MACAddress, at.OverlayVolume = mac(cr), t.overlay
	if !imported {
		return nil
	}
	m, err := domainxml.MACOf(d.XML)
	if err != nil {
		return errors.Wrap(err, errLookup)
	}
	at.MACAddress, at.OverlayVolume = m, ""
	return nil
}

// observeAbsent observes a resource whose domain does not exist (or, while deleting, is not
// ours). A create that failed after the overlay was made leaves only the overlay; a domain of
// our name that is not ours is never ours to delete. While deleting, our overlay (or its
// record) exists if it is there, so that Delete removes it. Otherwise the inputs are checked
// before Create is asked for.
func (e *external) observeAbsent(ctx context.Context, cr *v1alpha1.KVMDomain, t target) (managed.ExternalObservation, error) {
	switch {
	case meta.WasDeleted(cr) && e.observeOnly(cr):
		e.letGo(cr)
		return managed.ExternalObservation{ResourceExists: false}, nil
	case meta.WasDeleted(cr):
		verr := e.records.Verify(ctx, e.lv, e.host, t.pool, t.overlay, t.owner)
		if verr != nil && !ownership.IsNotOwned(verr) {
			return managed.ExternalObservation{}, errors.Wrap(verr, errLookup)
		}
		if verr != nil {
			e.letGo(cr) // nothing of ours is left: the finalizer goes next
		}
		return managed.ExternalObservation{ResourceExists: verr == nil}, nil
	}
	if err := e.waitForInputs(ctx, cr); err != nil {
		return managed.ExternalObservation{}, err
	}
	return managed.ExternalObservation{ResourceExists: false}, nil
}

// letGo drops what the process keeps of a deleted resource whose domain and overlay are gone:
// its probe and its binding to its host's domain events.
func (e *external) letGo(cr *v1alpha1.KVMDomain) {
	e.forgetProbe(cr)
	if e.gone != nil {
		e.gone()
	}
}

// observeNotRunning reports a domain that does not run: nothing of the guest is known, and it
// is Ready only when shut off as powerState Stopped asks (the desired state is reached, so it
// is polled at --poll, not every few seconds like a domain that should run and does not).
// observeNotRunning reports a domain that is not running; why says why it is paused, when
// the provider knows (resumeAfterIOError).
func observeNotRunning(cr *v1alpha1.KVMDomain, state, why string) {
	at := &cr.Status.AtProvider
	at.IPv4, at.IPSource, at.GuestAgentConnected, at.Probe = "", "", false, ""
	if cr.Spec.ForProvider.PowerState == v1alpha1.PowerStateStopped && state == libvirt.StateShutOff {
		cr.SetConditions(xpv2.Available().WithMessage("shut off, as powerState Stopped asks"))
		return
	}
	msg := "domain is " + state
	if why != "" {
		msg = why
	}
	cr.SetConditions(xpv2.Unavailable().WithMessage(msg))
}

// addressSources is the order in which the guest's address is asked for: the source that gave
// it last time first (a guest on a bridge has no lease, so a steady-state Observe asks the
// agent once instead of the lease first), then lease, agent, ARP.
func addressSources(last string) []string {
	out := []string{libvirt.SourceLease, libvirt.SourceAgent, libvirt.SourceARP}
	for i, s := range out {
		if s == last && i > 0 {
			return append([]string{s}, append(append([]string{}, out[:i]...), out[i+1:]...)...)
		}
	}
	return out
}

// findAddress asks the address sources in turn and sets status.atProvider's ipv4 and ipSource
// to the first address that may be used; a guest-reported address outside its network is never
// used (addressCheck). It returns the last address not used, why it was ignored, and whether
// the guest agent was asked.
func (e *external) findAddress(ctx context.Context, cr *v1alpha1.KVMDomain, name string, d libvirt.DomainInfo) (ignoredIP string, agentAsked bool, ignored error) {
	at := &cr.Status.AtProvider
	last := at.IPSource
	at.IPv4, at.IPSource = "", ""
	addrs := e.addresses(d, at.MACAddress)
	for _, src := range addressSources(last) {
		ip, err := e.lv.DomainIPv4(ctx, name, at.MACAddress, src)
		if src == libvirt.SourceAgent {
			at.GuestAgentConnected, agentAsked = err == nil, true
		}
		if err != nil || ip == "" {
			continue
		}
		if why := addrs.accept(ctx, src, ip); why != nil {
			ignored, ignoredIP = why, ip
			continue
		}
		at.IPv4, at.IPSource = ip, src
		return "", agentAsked, nil
	}
	return ignoredIP, agentAsked, ignored
}

// observeGuest finds the guest's address and runs the readiness probe. It never waits: what
// is not there yet is reported, and the next poll looks again. It says whether the guest
// agent was asked.
func (e *external) observeGuest(ctx context.Context, cr *v1alpha1.KVMDomain, name string, d libvirt.DomainInfo) (agentAsked bool) {
	at := &cr.Status.AtProvider
	ignoredIP, agentAsked, ignored := e.findAddress(ctx, cr, name, d)
	if at.IPv4 == "" {
		at.Probe = "" // no address, no probe: an earlier result is not this one's
		msg := "running; waiting for the guest's IPv4 address"
		if ignored != nil {
			// The address itself goes into the event only, never into status.
			msg += "; ignored: " + ignored.Error()
			if cr.GetCondition(xpv2.TypeReady).Message != msg {
				e.recorder.Event(cr, event.Warning(reasonAddressIgnored, errors.Wrapf(ignored, "ignored %s", ignoredIP)))
			}
		}
		cr.SetConditions(xpv2.Unavailable().WithMessage(msg))
		return
	}
	p := cr.Spec.ForProvider.ReadinessProbe
	if p == nil {
		at.Probe = ""
		cr.SetConditions(xpv2.Available())
		return
	}
	e.observeProbe(cr, p) //nolint:contextcheck // the probe runs in the background, beyond this reconcile's context
	return agentAsked
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
	for _, c := range []string{e.baseChanged(ctx, cr, o), e.seedChanged(ctx, cr, o)} {
		if c != "" {
			changed = append(changed, c)
		}
	}
	if len(changed) > 0 && len(cr.Status.AtProvider.InputsChanged) != len(changed) {
		for _, c := range changed {
			e.recorder.Event(cr, event.Normal(reasonInputsChanged, c))
		}
	}
	cr.Status.AtProvider.InputsChanged = changed
}

// baseChanged says so when the BaseImage publishes another volume than the overlay backs onto.
func (e *external) baseChanged(ctx context.Context, cr *v1alpha1.KVMDomain, o *domainxml.Owner) string {
	p := cr.Spec.ForProvider
	if p.BaseImageName == nil || o.BaseVolume == "" {
		return ""
	}
	base := &v1alpha1.BaseImage{}
	if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.BaseImageName}, base); err != nil ||
		base.Status.AtProvider.VolumeName == "" || base.Status.AtProvider.VolumeName == o.BaseVolume {
		return ""
	}
	return fmt.Sprintf("BaseImage %s now publishes %s; this domain's overlay stays on %s until the KVMDomain is recreated",
		*p.BaseImageName, base.Status.AtProvider.VolumeName, o.BaseVolume)
}

// seedChanged says so when the SeedVolume's content differs from the one the domain was defined with.
func (e *external) seedChanged(ctx context.Context, cr *v1alpha1.KVMDomain, o *domainxml.Owner) string {
	if o.SeedSHA256 == "" {
		return ""
	}
	seed := e.seedVolume(ctx, cr)
	if seed == nil || seed.Status.AtProvider.ISOSHA256 == "" || seed.Status.AtProvider.ISOSHA256 == o.SeedSHA256 {
		return ""
	}
	p := cr.Spec.ForProvider
	return fmt.Sprintf("SeedVolume %s has new content since the domain was defined; the domain's cdrom is switched to it once it is verified, and the guest reads it at its next boot (cloud-init re-runs per-instance modules only for a new instance-id)",
		*p.SeedVolumeName)
}

// seedWanted is the seed volume the domain's cdrom should read: the SeedVolume's current
// content, once it is Ready; nil when there is no seed or it is not Ready (nothing to switch
// to yet).
func (e *external) seedWanted(ctx context.Context, cr *v1alpha1.KVMDomain) *domainxml.Volume {
	seed := e.seedVolume(ctx, cr)
	if seed == nil || seed.GetCondition(xpv2.TypeReady).Reason != xpv2.ReasonAvailable || seed.Status.AtProvider.VolumeName == "" {
		return nil
	}
	return seedOf(seed, e.defaults.Pool)
}

// seedVolume is the SeedVolume cr's spec names, in cr's namespace, as the cache holds it; nil
// when it names none or it cannot be read (the callers then have nothing to compare with).
func (e *external) seedVolume(ctx context.Context, cr *v1alpha1.KVMDomain) *v1alpha1.SeedVolume {
	p := cr.Spec.ForProvider
	if p.SeedVolumeName == nil || *p.SeedVolumeName == "" {
		return nil
	}
	seed := &v1alpha1.SeedVolume{}
	if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.SeedVolumeName}, seed); err != nil {
		return nil
	}
	return seed
}

// seedCurrent is false when the domain's seed cdrom reads another volume than the
// SeedVolume's current one: in its definition, or (running) in the live domain. An imported
// domain's seed is not ours to change.
func (e *external) seedCurrent(ctx context.Context, cr *v1alpha1.KVMDomain, d libvirt.DomainInfo, running, imported bool) bool {
	if imported {
		return true
	}
	want := e.seedWanted(ctx, cr)
	if want == nil {
		return true
	}
	def, live := seedSwitches(d, *want, running)
	return !def && !live
}

// seedSwitches tells whether the definition and the live medium of d must switch to want.
func seedSwitches(d libvirt.DomainInfo, want domainxml.Volume, running bool) (def, live bool) {
	return seedDiffers(d.InactiveXML, want), running && seedDiffers(d.XML, want)
}

// seedDiffers is true when the domain XML has a seed cdrom reading another volume than want.
func seedDiffers(x string, want domainxml.Volume) bool {
	have, err := domainxml.SeedOf(x)
	return err == nil && have != nil && *have != want
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

// upToDate is true when the domain as found matches what the spec asks for: autostart, power
// state, the persistent vcpu/memory, and a root disk that needs no growing (grow bytes).
func upToDate(want v1alpha1.KVMDomainParameters, d libvirt.DomainInfo, persistent domainxml.Size, grow uint64) bool {
	power := d.State == libvirt.StateRunning
	if want.PowerState == v1alpha1.PowerStateStopped {
		power = d.State == libvirt.StateShutOff
	}
	return d.Autostart == want.Autostart && power && grow == 0 &&
		persistent == (domainxml.Size{VCPU: uint(want.VCPU), MemoryMiB: uint(want.MemoryMiB)})
}

func wantSize(cr *v1alpha1.KVMDomain) domainxml.Size {
	return domainxml.Size{VCPU: uint(cr.Spec.ForProvider.VCPU), MemoryMiB: uint(cr.Spec.ForProvider.MemoryMiB)}
}
