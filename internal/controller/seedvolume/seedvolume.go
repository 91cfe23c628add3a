// Package seedvolume reconciles SeedVolumes: it builds the NoCloud seed ISO in-process
// (internal/seed) and keeps a raw storage volume on the host byte-identical to it.
//
// The volume is rebuilt and re-uploaded whenever its content digest differs from what the
// spec (and the Secrets it names) produce, so a truncated or cancelled upload, or an edit of
// user-data, is repaired or applied by the next reconcile. user-data is never logged, put in
// an event or written to status: only its digest is.
package seedvolume

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

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
	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
	"github.com/provider-kvm/provider-kvm/internal/seed"
)

// Error messages.
const (
	errGetSecret    = "cannot read %s from Secret %s/%s"
	errNoSecretKey  = "cannot read %s: Secret %s/%s has no key %q"
	errBuild        = "cannot build the seed ISO"
	errLookup       = "cannot look up the seed volume"
	errDownload     = "cannot read the seed volume back to compare it"
	errCreate       = "cannot create the seed volume"
	errUpload       = "cannot upload the seed volume"
	errList         = "cannot list the volumes of the seed's pool"
	errAlteredInUse = "seed volume %s does not hold the content its name stands for, and it is never rewritten while a domain uses it: stop or delete that KVMDomain"
	msgPublishing   = "publishing the new content as volume %s; guests keep reading %s until it is verified"
	msgAltered      = "seed volume %s does not hold its content any more (altered on the host): publishing it again"
	errDelete       = "cannot delete the seed volume"
	errUsers        = "cannot check which domains use the seed volume"
	errInUse        = "seed volume %s is attached to domain %s: delete or change that KVMDomain first"
	errUnexpectedMG = "managed resource is not a SeedVolume"
	errExternalName = "the crossplane.io/external-name annotation %q is not the name of this SeedVolume's volume, %q: the provider derives the names of the volumes it manages, so that no resource can act on another's; remove the annotation or set it to %q"
)

// Event reasons.
const (
	reasonUploaded event.Reason = "SeedUploaded"
	reasonLeft     event.Reason = "VolumeLeftAlone"
	reasonRetired  event.Reason = "SeedRetired"
	reasonRetire   event.Reason = "CannotRetireSeed"
)

// Setup adds the SeedVolume controller; it starts once the SeedVolume CRD is established.
func Setup(mgr ctrl.Manager, o controller.Options, conns *host.Connections, shared *setup.Shared) error {
	return setup.Gated(mgr, o, setup.Kind[*v1alpha1.SeedVolume]{
		GroupKind: v1alpha1.SeedVolumeGroupKind,
		GVK:       v1alpha1.SeedVolumeGroupVersionKind,
		Object:    &v1alpha1.SeedVolume{},
		List:      &v1alpha1.SeedVolumeList{},
		// A seed's deletion is held while a domain uses it: go on when that KVMDomain is gone.
		Watches: []source.TypedSource[reconcile.Request]{setup.WhenDomainGone(mgr.GetCache(),
			func(d *v1alpha1.KVMDomain) *string { return d.Spec.ForProvider.SeedVolumeName }),
			// An earlier content is removed as soon as the KVMDomains using it switched.
			whenDomainMayHaveSwitched(mgr.GetCache())},
		ExternalName: func(mg resource.Managed) string {
			return names.SeedVolume(mg.GetNamespace(), mg.GetName(), string(mg.GetUID()))
		},
		Connector: func(rec event.Recorder) managed.TypedExternalConnector[*v1alpha1.SeedVolume] {
			return &connector{
				kube:     mgr.GetClient(),
				recorder: rec,
				conn:     connection.NewForManager(mgr, conns, rec, shared.Libvirt),
				records:  ownership.NewRecords(),
				checks:   newChecks(),
				cluster:  shared.ClusterID,
			}
		},
	})
}

// Storage is what the external client needs of a host's storage; *libvirt.Client is one.
type Storage interface {
	Volume(ctx context.Context, pool, name string) (libvirt.Volume, error)
	VolumeInfo(ctx context.Context, pool, name string) (libvirt.VolumeInfo, error)
	CreateVolume(ctx context.Context, pool, xml string) (libvirt.Volume, error)
	Upload(ctx context.Context, pool, name string, r io.Reader, length uint64) error
	Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error
	DeleteVolume(ctx context.Context, pool, name string) error
	VolumeNames(ctx context.Context, pool string) ([]string, error)
	DomainDisks(ctx context.Context) ([]libvirt.DomainDisk, error)
}

type connector struct {
	kube     client.Client
	recorder event.Recorder
	conn     *connection.Connector
	records  *ownership.Records
	checks   *checks
	// cluster is the provider's --cluster-id, named in the ownership records.
	cluster string
}

func (c *connector) Connect(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.TypedExternalClient[*v1alpha1.SeedVolume], error) {
	// Admission bounds the name; one admitted before is refused before the host is asked
	// (nothing of it can be on the host, so its deletion goes on).
	if err := names.CheckLength(cr.GetNamespace(), cr.GetName()); err != nil && !meta.WasDeleted(cr) {
		return nil, err
	}
	s, err := c.conn.Connect(ctx, cr)
	if err != nil {
		return nil, err
	}
	return &external{
		kube: c.kube, recorder: c.recorder, defaults: s.Defaults, grant: s.Grant,
		storage: s.Libvirt(),
		records: c.records, checks: c.checks, host: s.Address(), cluster: c.cluster,
	}, nil
}

type external struct {
	kube     client.Reader
	recorder event.Recorder
	defaults v1alpha1.HostDefaults
	// grant is what the namespace may use of the host (its pools among them).
	grant   hostgrants.Grant
	storage Storage
	records *ownership.Records
	checks  *checks
	host    string // the host's address, for the records' cache
	cluster string // the provider's --cluster-id, named in the ownership records
}

// target is the volume a SeedVolume manages: its derived name, pool and owner.
type target struct {
	name, pool   string
	ns, res, uid string
	owner        ownership.Owner
}

// target derives the volume's name from the resource (never from the user-settable
// external-name annotation). The pool is the one recorded in status once the volume was
// made, so a changed host default does not orphan it.
func (e *external) target(cr *v1alpha1.SeedVolume) target {
	t := target{
		name: names.SeedVolume(cr.GetNamespace(), cr.GetName(), string(cr.GetUID())),
		ns:   cr.GetNamespace(), res: cr.GetName(), uid: string(cr.GetUID()),
		pool:  cr.Spec.ForProvider.Pool,
		owner: ownership.Owner{Kind: v1alpha1.SeedVolumeKind, UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName(), ClusterID: e.cluster},
	}
	switch {
	case t.pool != "":
	case cr.Status.AtProvider.Pool != "":
		t.pool = cr.Status.AtProvider.Pool
	default:
		t.pool = e.defaults.Pool
	}
	return t
}

// checkExternalName refuses an external name that is not the derived one.
func checkExternalName(cr *v1alpha1.SeedVolume, t target) error {
	if n := meta.GetExternalName(cr); n != "" && n != t.name {
		return errors.Errorf(errExternalName, n, t.name, t.name)
	}
	return nil
}

func (e *external) verify(ctx context.Context, t target, vol string) error {
	return e.records.Verify(ctx, e.storage, e.host, t.pool, vol, t.owner)
}

// verifyFresh reads the ownership record again: before a write or a delete.
func (e *external) verifyFresh(ctx context.Context, t target, vol string) error {
	return e.records.VerifyFresh(ctx, e.storage, e.host, t.pool, vol, t.owner)
}

func (e *external) checkKey(t target, vol string) string {
	return e.host + "\x00" + t.pool + "\x00" + vol
}

// content is the volume of the ISO whose sha256 is sum.
func (t target) content(sum string) string { return names.SeedContent(t.ns, t.res, t.uid, sum) }

// secretOrInline returns the inline value, or the Secret key's bytes, or nil.
func (e *external) secretOrInline(ctx context.Context, ns, what string, inline *string, ref *v1alpha1.LocalSecretKeySelector) ([]byte, error) {
	if inline != nil {
		return []byte(*inline), nil
	}
	if ref == nil {
		return nil, nil
	}
	s := &corev1.Secret{}
	if err := e.kube.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, s); err != nil {
		return nil, errors.Wrapf(err, errGetSecret, what, ns, ref.Name)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return nil, errors.Errorf(errNoSecretKey, what, ns, ref.Name, ref.Key)
	}
	return v, nil
}

// build renders the seed that cr asks for.
func (e *external) build(ctx context.Context, cr *v1alpha1.SeedVolume) (*seed.Seed, error) {
	p, ns := cr.Spec.ForProvider, cr.GetNamespace()
	in := seed.Input{
		InstanceID:        p.InstanceID,
		Hostname:          p.Hostname,
		InstallGuestAgent: p.InstallGuestAgent == nil || *p.InstallGuestAgent,
	}
	if in.InstanceID == "" {
		in.InstanceID = names.InstanceID(string(cr.GetUID()))
	}
	if in.Hostname == "" {
		in.Hostname = cr.GetName()
	}
	var err error
	if in.UserData, err = e.secretOrInline(ctx, ns, "user-data", p.UserData, p.UserDataSecretRef); err != nil {
		return nil, err
	}
	if in.NetworkConfig, err = e.secretOrInline(ctx, ns, "network-config", p.NetworkConfig, p.NetworkConfigSecretRef); err != nil {
		return nil, err
	}
	if in.VendorData, err = e.secretOrInline(ctx, ns, "vendor-data", p.VendorData, p.VendorDataSecretRef); err != nil {
		return nil, err
	}
	s, err := seed.Build(in)
	if err != nil {
		return nil, errors.Wrap(err, errBuild)
	}
	cr.Status.AtProvider.InstanceID = in.InstanceID
	return s, nil
}

func (e *external) Observe(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.ExternalObservation, error) {
	t := e.target(cr)
	deleting := meta.WasDeleted(cr)
	if err := checkExternalName(cr, t); err != nil && !deleting {
		return managed.ExternalObservation{}, err
	}
	if deleting {
		return e.observeDeleting(ctx, cr, t)
	}
	// A pool the namespace was not granted is not even looked at.
	if err := e.grant.CheckPool(t.pool); err != nil {
		return managed.ExternalObservation{}, err
	}
	want, err := e.build(ctx, cr)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	vol := t.content(want.SHA256)
	at := &cr.Status.AtProvider
	// One cheap call: the fingerprint (capacity, allocation) of the volume of this content.
	fp, err := e.storage.VolumeInfo(ctx, t.pool, vol)
	if libvirt.IsNotFound(err) {
		return e.observeUnpublished(ctx, cr, t, vol)
	}
	if err != nil {
		return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
	}
	if err := e.verify(ctx, t, vol); err != nil {
		return managed.ExternalObservation{}, err
	}
	have, path, err := e.readBack(ctx, t, vol, fp, int64(len(want.ISO)))
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	if have != want.SHA256 {
		// A cut upload of the new content, or a volume altered on the host: Update writes it
		// again, unless a guest reads it. Guests keep the earlier content meanwhile.
		if at.VolumeName == vol {
			cr.SetConditions(xpv2.Unavailable().WithMessage(fmt.Sprintf(msgAltered, vol)))
		} else {
			cr.SetConditions(xpv2.Creating().WithMessage(fmt.Sprintf(msgPublishing, vol, at.VolumeName)))
		}
		return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: false}, nil
	}
	return e.observeVerified(ctx, cr, t, vol, have, path, fp)
}

// observeVerified makes vol, read back and found to hold the wanted content, the seed; what
// served before is retired.
func (e *external) observeVerified(ctx context.Context, cr *v1alpha1.SeedVolume, t target, vol, have, path string, fp libvirt.VolumeInfo) (managed.ExternalObservation, error) {
	at := &cr.Status.AtProvider
	switch {
	case at.VolumeName == "":
		// A restart with empty status, or a release before one volume per content: find
		// the earlier volumes on the host, once.
		earlier, err := e.volumesOf(ctx, cr, t)
		if err != nil {
			return managed.ExternalObservation{}, err
		}
		for _, v := range earlier {
			if v != vol {
				at.RetiredVolumes = addName(at.RetiredVolumes, v)
			}
		}
	case at.VolumeName != vol:
		at.RetiredVolumes = addName(at.RetiredVolumes, at.VolumeName)
	}
	at.VolumeName, at.Pool, at.Path = vol, t.pool, path
	at.ISOSHA256, at.SizeBytes = have, int64(fp.CapacityBytes)
	at.RetiredVolumes = slices.DeleteFunc(at.RetiredVolumes, func(v string) bool { return v == vol })
	cr.SetConditions(xpv2.Available())
	e.retire(ctx, cr, t)
	return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, nil
}

// observeUnpublished observes a SeedVolume whose current content has no volume yet: a new
// resource (nothing to observe), or an edit whose content Update publishes as a new volume
// while guests keep reading the earlier one.
func (e *external) observeUnpublished(ctx context.Context, cr *v1alpha1.SeedVolume, t target, vol string) (managed.ExternalObservation, error) {
	at := &cr.Status.AtProvider
	earlier := at.VolumeName
	if earlier == "" {
		vols, err := e.volumesOf(ctx, cr, t)
		if err != nil {
			return managed.ExternalObservation{}, err
		}
		if len(vols) == 0 {
			return managed.ExternalObservation{ResourceExists: false}, nil
		}
		earlier = vols[0]
	}
	cr.SetConditions(xpv2.Creating().WithMessage(fmt.Sprintf(msgPublishing, vol, earlier)))
	return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: false}, nil
}

// readBack returns the sha256 and path of vol, from what was read back before with the same
// fingerprint, or by reading it (seeds are tens to hundreds of KiB: comparing the bytes on
// the host with the wanted ISO catches truncation and corruption). A volume of another size
// than the ISO is not read: its digest is "".
func (e *external) readBack(ctx context.Context, t target, vol string, fp libvirt.VolumeInfo, size int64) (sha, path string, err error) {
	if sha, path = e.checks.get(e.checkKey(t, vol), fp); sha != "" {
		return sha, path, nil
	}
	v, err := e.storage.Volume(ctx, t.pool, vol)
	if err != nil {
		return "", "", errors.Wrap(err, errLookup)
	}
	if v.CapacityBytes != uint64(size) {
		return "", v.Path, nil
	}
	h := sha256.New()
	if err := e.storage.Download(ctx, t.pool, vol, h, 0, v.CapacityBytes); err != nil {
		return "", "", errors.Wrap(err, errDownload)
	}
	sha = hex.EncodeToString(h.Sum(nil))
	// Keyed by the fingerprint taken before the read: a change since shows as another.
	e.checks.put(e.checkKey(t, vol), fp, sha, v.Path)
	return sha, v.Path, nil
}

// addName appends v to names unless it is there.
func addName(names []string, v string) []string {
	if v == "" || slices.Contains(names, v) {
		return names
	}
	return append(names, v)
}

// volumesOf lists the volumes on the host that are this SeedVolume's by name (every content's,
// and the one of releases before), sorted; ownership is checked before any is touched.
func (e *external) volumesOf(ctx context.Context, cr *v1alpha1.SeedVolume, t target) ([]string, error) {
	all, err := e.storage.VolumeNames(ctx, t.pool)
	if err != nil {
		return nil, errors.Wrap(err, errList)
	}
	return ownNames(all, cr, false), nil
}

// ownNames are the names in all of cr's volumes, sorted and once each; with records, an
// ownership record volume stands for the volume it is the record of (which may be gone).
func ownNames(all []string, cr *v1alpha1.SeedVolume, records bool) []string {
	var out []string
	for _, n := range all {
		if records {
			n = strings.TrimSuffix(n, ownership.Suffix)
		}
		if names.IsSeedVolumeOf(n, cr.GetNamespace(), cr.GetName(), string(cr.GetUID())) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// retire removes the retired volumes that no domain uses, each after its ownership record
// was read again; one in use stays listed for the next poll. Failures are events: the seed
// itself is Ready.
func (e *external) retire(ctx context.Context, cr *v1alpha1.SeedVolume, t target) {
	at := &cr.Status.AtProvider
	if len(at.RetiredVolumes) == 0 {
		return
	}
	disks, err := e.storage.DomainDisks(ctx)
	if err != nil {
		e.recorder.Event(cr, event.Warning(reasonRetire, errors.Wrap(err, errUsers)))
		return
	}
	var keep []string
	for _, v := range at.RetiredVolumes {
		if !names.IsSeedVolumeOf(v, cr.GetNamespace(), cr.GetName(), string(cr.GetUID())) {
			continue // not a name of ours: never acted on
		}
		if err := e.remove(ctx, t, v, disks); err != nil {
			if !isInUse(err) {
				e.recorder.Event(cr, event.Warning(reasonRetire, err))
			}
			keep = append(keep, v)
			continue
		}
		e.recorder.Event(cr, event.Normal(reasonRetired, "Removed "+v+", which held earlier content of this seed"))
	}
	at.RetiredVolumes = keep
}

// remove deletes vol and its ownership record, unless a domain's disk uses it; a volume
// already gone only has its record released. A volume whose record does not name this
// SeedVolume is left alone (a NotOwnedError).
func (e *external) remove(ctx context.Context, t target, vol string, disks []libvirt.DomainDisk) error {
	v, err := e.storage.Volume(ctx, t.pool, vol)
	if libvirt.IsNotFound(err) {
		return errors.Wrap(e.records.Release(ctx, e.storage, e.host, t.pool, vol, t.owner), errDelete)
	}
	if err != nil {
		return errors.Wrap(err, errLookup)
	}
	e.checks.forget(e.checkKey(t, vol))
	if err := e.verifyFresh(ctx, t, vol); err != nil {
		return err
	}
	for _, d := range disks {
		if d.Path == v.Path {
			return &inUseError{volume: vol, domain: d.Domain}
		}
	}
	if err := e.storage.DeleteVolume(ctx, t.pool, vol); err != nil && !libvirt.IsNotFound(err) {
		return errors.Wrap(err, errDelete)
	}
	faultpoint.Reach(faultpoint.SeedDeleteVolume)
	return errors.Wrap(e.records.Release(ctx, e.storage, e.host, t.pool, vol, t.owner), errDelete)
}

// inUseError says that a domain's disk uses a seed volume.
type inUseError struct{ volume, domain string }

func (e *inUseError) Error() string { return fmt.Sprintf(errInUse, e.volume, e.domain) }

func isInUse(err error) bool {
	var u *inUseError
	return errors.As(err, &u)
}

// observeDeleting reports whether anything of ours is left for Delete: a volume of any content,
// or the ownership record a create cut short left. A volume that is not ours is never ours to
// delete: the resource goes, the volume stays.
func (e *external) observeDeleting(ctx context.Context, cr *v1alpha1.SeedVolume, t target) (managed.ExternalObservation, error) {
	left, err := e.leftovers(ctx, cr, t)
	return managed.ExternalObservation{ResourceExists: len(left) > 0}, err
}

// leftovers are the volumes of this SeedVolume (by name) whose record names it, and the names
// of volumes whose record is left without them.
func (e *external) leftovers(ctx context.Context, cr *v1alpha1.SeedVolume, t target) ([]string, error) {
	all, err := e.storage.VolumeNames(ctx, t.pool)
	if err != nil {
		return nil, errors.Wrap(err, errList)
	}
	present := map[string]bool{}
	for _, n := range all {
		present[n] = true
	}
	var out []string
	for _, vol := range ownNames(all, cr, true) {
		verr := e.verify(ctx, t, vol)
		switch {
		case verr == nil:
			out = append(out, vol)
		case ownership.IsNotOwned(verr):
			if present[vol] {
				e.recorder.Event(cr, event.Warning(reasonLeft, verr))
			}
		default:
			return nil, verr
		}
	}
	return out, nil
}

func (e *external) Create(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.ExternalCreation, error) {
	cr.SetConditions(xpv2.Creating())
	t := e.target(cr)
	if err := checkExternalName(cr, t); err != nil {
		return managed.ExternalCreation{}, err
	}
	s, err := e.build(ctx, cr)
	if err != nil {
		return managed.ExternalCreation{}, err
	}
	return managed.ExternalCreation{}, e.publish(ctx, cr, t, s)
}

// publish writes the seed s into the volume of its content: its ownership record first, so
// the volume never exists without one, then the volume, then the bytes. The next Observe reads
// them back and only then makes it the seed guests get.
func (e *external) publish(ctx context.Context, cr *v1alpha1.SeedVolume, t target, s *seed.Seed) error {
	vol := t.content(s.SHA256)
	// A pool the namespace was not granted is refused before anything is made.
	if err := e.grant.CheckPool(t.pool); err != nil {
		return err
	}
	if err := e.records.Claim(ctx, e.storage, e.host, t.pool, vol, t.owner); err != nil {
		return errors.Wrap(err, errCreate)
	}
	faultpoint.Reach(faultpoint.SeedRecordWritten)
	xml, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: "raw", CapacityBytes: uint64(len(s.ISO))})
	if err != nil {
		return errors.Wrap(err, errCreate)
	}
	if _, err := e.storage.CreateVolume(ctx, t.pool, xml); err != nil && !libvirt.IsExists(err) {
		return errors.Wrap(err, errCreate)
	}
	faultpoint.Reach(faultpoint.SeedVolumeCreated)
	return e.upload(ctx, cr, t, vol, s)
}

// Update publishes the content the spec asks for. Its volume is new unless an earlier
// attempt left it torn: that one is written again, never while a domain uses it (a guest
// never reads a volume being rewritten, and the volume a guest reads is never rewritten).
func (e *external) Update(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.ExternalUpdate, error) {
	t := e.target(cr)
	if err := checkExternalName(cr, t); err != nil {
		return managed.ExternalUpdate{}, err
	}
	s, err := e.build(ctx, cr)
	if err != nil {
		return managed.ExternalUpdate{}, err
	}
	vol := t.content(s.SHA256)
	_, err = e.storage.Volume(ctx, t.pool, vol)
	if libvirt.IsNotFound(err) {
		return managed.ExternalUpdate{}, e.publish(ctx, cr, t, s)
	}
	if err != nil {
		return managed.ExternalUpdate{}, errors.Wrap(err, errLookup)
	}
	disks, err := e.storage.DomainDisks(ctx)
	if err != nil {
		return managed.ExternalUpdate{}, errors.Wrap(err, errUsers)
	}
	// Torn or altered: remove it (refused while a domain uses it), then publish it again.
	if err := e.remove(ctx, t, vol, disks); err != nil {
		if isInUse(err) {
			return managed.ExternalUpdate{}, errors.Wrapf(err, errAlteredInUse, vol)
		}
		return managed.ExternalUpdate{}, err
	}
	return managed.ExternalUpdate{}, e.publish(ctx, cr, t, s)
}

func (e *external) upload(ctx context.Context, cr *v1alpha1.SeedVolume, t target, vol string, s *seed.Seed) error {
	// Whatever the upload leaves, the next Observe reads it back.
	e.checks.forget(e.checkKey(t, vol))
	if err := e.storage.Upload(ctx, t.pool, vol, bytes.NewReader(s.ISO), uint64(len(s.ISO))); err != nil {
		return errors.Wrap(err, errUpload)
	}
	faultpoint.Reach(faultpoint.SeedUploaded)
	e.recorder.Event(cr, event.Normal(reasonUploaded, "Uploaded seed ISO "+vol+" (sha256 "+s.SHA256+")"))
	return nil
}

// Delete removes every volume of this SeedVolume (each content's) and their records; it is
// refused while a domain uses any of them.
func (e *external) Delete(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.ExternalDelete, error) {
	cr.SetConditions(xpv2.Deleting())
	t := e.target(cr)
	left, err := e.leftovers(ctx, cr, t)
	if err != nil || len(left) == 0 {
		return managed.ExternalDelete{}, err
	}
	disks, err := e.storage.DomainDisks(ctx)
	if err != nil {
		return managed.ExternalDelete{}, errors.Wrap(err, errUsers)
	}
	for _, v := range left {
		if err := e.remove(ctx, t, v, disks); err != nil {
			return managed.ExternalDelete{}, err
		}
	}
	return managed.ExternalDelete{}, nil
}

func (e *external) Disconnect(context.Context) error { return nil }
