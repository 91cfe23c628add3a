package kvmdomain

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
)

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

// seedOf is the volume of the SeedVolume's current, verified content. Its status names it;
// the name is used only when it is one of the names the SeedVolume's own namespace, name and
// UID derive (so a status edited to name another resource's volume is never followed), else
// the one name of releases before.
func seedOf(sv *v1alpha1.SeedVolume, defPool string) *domainxml.Volume {
	v := sv.Status.AtProvider.VolumeName
	if !names.IsSeedVolumeOf(v, sv.GetNamespace(), sv.GetName(), string(sv.GetUID())) {
		v = names.SeedVolume(sv.GetNamespace(), sv.GetName(), string(sv.GetUID()))
	}
	return &domainxml.Volume{Pool: seedPool(sv, defPool), Name: v}
}

// inputs are the BaseImage and SeedVolume a domain is built from.
type inputs struct {
	base *v1alpha1.BaseImage
	seed *v1alpha1.SeedVolume
	// consoleLog is the file the serial console is logged to: an existing domain's own
	// (respec), a new one's from consoleLogFor; "": libvirt's log directory.
	consoleLog string
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
	if e.observeOnly(cr) {
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
	p, t := cr.Spec.ForProvider, e.target(cr)
	s := domainxml.Spec{
		Name:      t.domain,
		UUID:      uuid,
		Type:      string(p.DomainType),
		VCPU:      uint(p.VCPU),
		MemoryMiB: uint(p.MemoryMiB),
		CPUMode:   string(p.CPUMode),
		Firmware:  string(p.Firmware),
		RootDisk:  domainxml.Volume{Pool: t.pool, Name: t.overlay},
		MAC:       mac(cr),
		Owner: domainxml.Owner{UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName(), ProviderConfig: e.source, ClusterID: e.cluster,
			BaseVolume: in.base.Status.AtProvider.VolumeName},
	}
	s.ConsoleLog = in.consoleLog
	if s.ConsoleLog == "" {
		s.ConsoleLog = consoleLogFor(false, libvirt.Pool{}, s.Name)
	}
	if s.Type == "" {
		s.Type = string(e.defaults.DomainType)
	}
	if s.Firmware == "" {
		s.Firmware = string(in.base.Spec.ForProvider.Firmware)
	}
	s.Network, s.Bridge = e.attachment(cr)
	if in.seed != nil {
		s.Seed = seedOf(in.seed, e.defaults.Pool)
		s.Owner.SeedSHA256 = in.seed.Status.AtProvider.ISOSHA256
	}
	x, err := domainxml.Domain(s)
	return x, errors.Wrap(err, errXML)
}

// attachment is the libvirt network or the host bridge (one of the two) cr's guest attaches
// to: its own, else the host's default.
func (e *external) attachment(cr *v1alpha1.KVMDomain) (network, bridge string) {
	if p := cr.Spec.ForProvider; p.Network != "" || p.Bridge != "" {
		if p.Bridge != "" {
			return "", p.Bridge
		}
		return p.Network, ""
	}
	return e.defaults.Attachment()
}

// checkGrants refuses, before anything is made on the host, a pool or an attachment that the
// namespace was not granted (internal/hostgrants), and a MAC address another domain on the
// host has.
func (e *external) checkGrants(ctx context.Context, cr *v1alpha1.KVMDomain, t target) error {
	if err := e.grant.CheckPool(t.pool); err != nil {
		return err
	}
	if err := e.grant.CheckAttachment(e.attachment(cr)); err != nil {
		return err
	}
	return e.checkMAC(ctx, cr)
}

// checkMAC refuses a MAC address that another domain on the host has (ours or not): a guest
// with another's address takes its DHCP lease and its traffic. The message names no other
// domain, namespace or resource. On the same reading of the host's domains, it refuses a
// domain over its namespace's limits.maxDomainsPerNamespace (checkCount).
func (e *external) checkMAC(ctx context.Context, cr *v1alpha1.KVMDomain) error {
	defs, err := e.lv.DomainDefinitions(ctx)
	if err != nil {
		return errors.Wrap(err, errMACCheck)
	}
	return e.checkMACIn(cr, defs)
}

// checkMACIn is checkMAC on the host's domain definitions defs, already read.
func (e *external) checkMACIn(cr *v1alpha1.KVMDomain, defs []string) error {
	if err := e.checkCount(cr, defs); err != nil {
		return err
	}
	m := mac(cr)
	taken, err := domainxml.MACTaken(defs, m, string(cr.GetUID()))
	switch {
	case err != nil:
		return errors.Wrap(err, errMACCheck)
	case taken && cr.Spec.ForProvider.MACAddress != "":
		return errors.Errorf(errMACTaken, m)
	case taken:
		return errors.Errorf(errMACDerivedTaken, m)
	}
	return nil
}
