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
	"io"

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
	errResize       = "cannot resize the seed volume"
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
)

// Setup adds the SeedVolume controller; it starts once the SeedVolume CRD is established.
func Setup(mgr ctrl.Manager, o controller.Options, conns *host.Connections) error {
	return setup.Gated(mgr, o, setup.Kind[*v1alpha1.SeedVolume]{
		GroupKind: v1alpha1.SeedVolumeGroupKind,
		GVK:       v1alpha1.SeedVolumeGroupVersionKind,
		Object:    &v1alpha1.SeedVolume{},
		List:      &v1alpha1.SeedVolumeList{},
		// A seed's deletion is held while a domain uses it: go on when that KVMDomain is gone.
		Watches: []source.TypedSource[reconcile.Request]{setup.WhenDomainGone(mgr.GetCache(),
			func(d *v1alpha1.KVMDomain) *string { return d.Spec.ForProvider.SeedVolumeName })},
		ExternalName: func(mg resource.Managed) string {
			return names.SeedVolume(mg.GetNamespace(), mg.GetName(), string(mg.GetUID()))
		},
		Connector: func(rec event.Recorder) managed.TypedExternalConnector[*v1alpha1.SeedVolume] {
			return &connector{
				kube:     mgr.GetClient(),
				recorder: rec,
				conn:     connection.NewConnector(mgr.GetClient(), conns, rec),
				records:  ownership.NewRecords(),
				checks:   newChecks(),
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
	ResizeVolume(ctx context.Context, pool, name string, size uint64) error
	DomainDisks(ctx context.Context) ([]libvirt.DomainDisk, error)
}

type connector struct {
	kube     client.Client
	recorder event.Recorder
	conn     *connection.Connector
	records  *ownership.Records
	checks   *checks
}

func (c *connector) Connect(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.TypedExternalClient[*v1alpha1.SeedVolume], error) {
	s, err := c.conn.Connect(ctx, cr)
	if err != nil {
		return nil, err
	}
	return &external{
		kube: c.kube, recorder: c.recorder, defaults: s.Defaults,
		storage: s.Libvirt(),
		records: c.records, checks: c.checks, host: s.Address(),
	}, nil
}

type external struct {
	kube     client.Reader
	recorder event.Recorder
	defaults v1alpha1.HostDefaults
	storage  Storage
	records  *ownership.Records
	checks   *checks
	host     string // the host's address, for the records' cache
}

// target is the volume a SeedVolume manages: its derived name, pool and owner.
type target struct {
	name, pool string
	owner      ownership.Owner
}

// target derives the volume's name from the resource (never from the user-settable
// external-name annotation). The pool is the one recorded in status once the volume was
// made, so a changed host default does not orphan it.
func (e *external) target(cr *v1alpha1.SeedVolume) target {
	t := target{
		name:  names.SeedVolume(cr.GetNamespace(), cr.GetName(), string(cr.GetUID())),
		pool:  cr.Spec.ForProvider.Pool,
		owner: ownership.Owner{Kind: v1alpha1.SeedVolumeKind, UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName()},
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

func (e *external) verify(ctx context.Context, t target) error {
	return e.records.Verify(ctx, e.storage, e.host, t.pool, t.name, t.owner)
}

// verifyFresh reads the ownership record again: before a write or a delete.
func (e *external) verifyFresh(ctx context.Context, t target) error {
	return e.records.VerifyFresh(ctx, e.storage, e.host, t.pool, t.name, t.owner)
}

func (e *external) checkKey(t target) string { return e.host + "\x00" + t.pool + "\x00" + t.name }

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
	// One cheap call: the seed's fingerprint (capacity, allocation).
	fp, err := e.storage.VolumeInfo(ctx, t.pool, t.name)
	if libvirt.IsNotFound(err) {
		return managed.ExternalObservation{ResourceExists: false}, nil
	}
	if err != nil {
		return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
	}
	if err := e.verify(ctx, t); err != nil {
		return managed.ExternalObservation{}, err
	}
	want, err := e.build(ctx, cr)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	have, path := e.checks.get(e.checkKey(t), fp)
	if have == "" {
		// Not read since it last changed, or read longer ago than the recheck period. Seeds are
		// small (tens to hundreds of KiB): comparing the bytes on the host with the wanted ISO
		// catches truncation and corruption as well as edits.
		vol, err := e.storage.Volume(ctx, t.pool, t.name)
		if libvirt.IsNotFound(err) {
			return managed.ExternalObservation{ResourceExists: false}, nil
		}
		if err != nil {
			return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
		}
		path = vol.Path
		if vol.CapacityBytes == uint64(len(want.ISO)) {
			h := sha256.New()
			if err := e.storage.Download(ctx, t.pool, t.name, h, 0, vol.CapacityBytes); err != nil {
				return managed.ExternalObservation{}, errors.Wrap(err, errDownload)
			}
			have = hex.EncodeToString(h.Sum(nil))
			// Keyed by the fingerprint taken before the read: a change since shows as another.
			e.checks.put(e.checkKey(t), fp, have, path)
		}
	}

	cr.Status.AtProvider.VolumeName = t.name
	cr.Status.AtProvider.Pool = t.pool
	cr.Status.AtProvider.Path = path
	upToDate := have == want.SHA256
	if upToDate {
		cr.Status.AtProvider.ISOSHA256 = have
		cr.Status.AtProvider.SizeBytes = int64(fp.CapacityBytes)
		cr.SetConditions(xpv2.Available())
	}
	return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: upToDate}, nil
}

// observeDeleting reports whether anything of ours is left for Delete: the volume, or the
// ownership record a create cut short left. A volume that is not ours is never ours to delete:
// the resource goes, the volume stays.
func (e *external) observeDeleting(ctx context.Context, cr *v1alpha1.SeedVolume, t target) (managed.ExternalObservation, error) {
	_, err := e.storage.Volume(ctx, t.pool, t.name)
	if err != nil && !libvirt.IsNotFound(err) {
		return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
	}
	present := err == nil
	verr := e.verify(ctx, t)
	switch {
	case verr != nil && !ownership.IsNotOwned(verr):
		return managed.ExternalObservation{}, verr
	case verr != nil && present:
		e.recorder.Event(cr, event.Warning(reasonLeft, verr))
	}
	return managed.ExternalObservation{ResourceExists: verr == nil}, nil
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
	// The ownership record comes first, so the volume never exists without one.
	if err := e.records.Claim(ctx, e.storage, e.host, t.pool, t.name, t.owner); err != nil {
		return managed.ExternalCreation{}, errors.Wrap(err, errCreate)
	}
	faultpoint.Reach(faultpoint.SeedRecordWritten)
	xml, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: t.name, Format: "raw", CapacityBytes: uint64(len(s.ISO))})
	if err != nil {
		return managed.ExternalCreation{}, errors.Wrap(err, errCreate)
	}
	if _, err := e.storage.CreateVolume(ctx, t.pool, xml); err != nil && !libvirt.IsExists(err) {
		return managed.ExternalCreation{}, errors.Wrap(err, errCreate)
	}
	faultpoint.Reach(faultpoint.SeedVolumeCreated)
	return managed.ExternalCreation{}, e.upload(ctx, cr, t, s)
}

func (e *external) Update(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.ExternalUpdate, error) {
	t := e.target(cr)
	if err := checkExternalName(cr, t); err != nil {
		return managed.ExternalUpdate{}, err
	}
	s, err := e.build(ctx, cr)
	if err != nil {
		return managed.ExternalUpdate{}, err
	}
	vol, err := e.storage.Volume(ctx, t.pool, t.name)
	if err != nil {
		return managed.ExternalUpdate{}, errors.Wrap(err, errLookup)
	}
	if err := e.verifyFresh(ctx, t); err != nil {
		return managed.ExternalUpdate{}, err
	}
	// Rewrite in place: a running guest may hold the cdrom open, so the file is never
	// deleted under it.
	if vol.CapacityBytes != uint64(len(s.ISO)) {
		if err := e.storage.ResizeVolume(ctx, t.pool, t.name, uint64(len(s.ISO))); err != nil {
			return managed.ExternalUpdate{}, errors.Wrap(err, errResize)
		}
	}
	return managed.ExternalUpdate{}, e.upload(ctx, cr, t, s)
}

func (e *external) upload(ctx context.Context, cr *v1alpha1.SeedVolume, t target, s *seed.Seed) error {
	// Whatever the upload leaves, the next Observe reads it back.
	e.checks.forget(e.checkKey(t))
	if err := e.storage.Upload(ctx, t.pool, t.name, bytes.NewReader(s.ISO), uint64(len(s.ISO))); err != nil {
		return errors.Wrap(err, errUpload)
	}
	faultpoint.Reach(faultpoint.SeedUploaded)
	e.recorder.Event(cr, event.Normal(reasonUploaded, "Uploaded seed ISO "+t.name+" (sha256 "+s.SHA256+")"))
	return nil
}

func (e *external) Delete(ctx context.Context, cr *v1alpha1.SeedVolume) (managed.ExternalDelete, error) {
	cr.SetConditions(xpv2.Deleting())
	t := e.target(cr)
	vol, err := e.storage.Volume(ctx, t.pool, t.name)
	if libvirt.IsNotFound(err) {
		return managed.ExternalDelete{}, errors.Wrap(e.records.Release(ctx, e.storage, e.host, t.pool, t.name, t.owner), errDelete)
	}
	if err != nil {
		return managed.ExternalDelete{}, errors.Wrap(err, errLookup)
	}
	e.checks.forget(e.checkKey(t))
	if err := e.verifyFresh(ctx, t); err != nil {
		return managed.ExternalDelete{}, err
	}
	disks, err := e.storage.DomainDisks(ctx)
	if err != nil {
		return managed.ExternalDelete{}, errors.Wrap(err, errUsers)
	}
	for _, d := range disks {
		if d.Path == vol.Path {
			return managed.ExternalDelete{}, errors.Errorf(errInUse, t.name, d.Domain)
		}
	}
	if err := e.storage.DeleteVolume(ctx, t.pool, t.name); err != nil && !libvirt.IsNotFound(err) {
		return managed.ExternalDelete{}, errors.Wrap(err, errDelete)
	}
	faultpoint.Reach(faultpoint.SeedDeleteVolume)
	return managed.ExternalDelete{}, errors.Wrap(e.records.Release(ctx, e.storage, e.host, t.pool, t.name, t.owner), errDelete)
}

func (e *external) Disconnect(context.Context) error { return nil }
