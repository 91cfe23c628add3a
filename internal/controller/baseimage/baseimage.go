// Package baseimage reconciles BaseImages: a cloud image streamed from its URL into a storage
// volume on the host, verified by sha256 and published atomically (internal/imagecache).
//
// An image is cached once per host and pool for every BaseImage, in any namespace, that asks
// for the same bytes (sha256): the first one publishes it, the others attach to it, and each
// is recorded on the host as an owner of the volume (internal/imagecache). Deleting a BaseImage
// removes its owner record; the volume goes with its last owner, once no overlay uses it.
//
// Uploads run in the background (see jobs.go) and report progress in status. Downloads are
// bounded by the imageSources of the host's config (internal/sourcepolicy): a refused
// destination or an image over maxImageSizeMiB is terminal like a digest mismatch: the
// resource shows it until the spec or the config's imageSources change. Any other failure (an
// HTTP 5xx, DNS, TLS, a missing pool, a cut connection to the host) is shown, Synced=False
// with the reason, and retried with backoff: 10 s after the first failure, doubling per
// failure in a row up to 10 min; a timeout (no response headers, a stalled download) waits at
// least a minute; a pool without room for the image (limits.minFreePoolMiB of the config, or
// ENOSPC during the upload, whose bytes are then removed) shows Ready=False with reason
// PoolFull and waits at least 5 min, and the next attempt uploads only if the pool has room. An edited source
// publishes a new volume; older volumes are kept while overlays use them and removed as soon
// as they do not. Deleting the last owner of a volume is held while overlays use it.
package baseimage

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	ctrlsource "sigs.k8s.io/controller-runtime/pkg/source"

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
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/publishqueue"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// uploadTimeout bounds one background upload.
const uploadTimeout = 6 * time.Hour

// sweepTimeout bounds the sweep of a pool at a BaseImage's deletion; what is left is swept at
// the next one.
const sweepTimeout = 30 * time.Second

// limitRetryDelay is how long a download that timed out (no response headers, a stall) is
// shown as failed before it is tried again, at least.
const limitRetryDelay = time.Minute

// Backoff of publish attempts that failed for a reason worth retrying (an HTTP 5xx, a DNS or
// TLS failure, a missing pool, a cut connection to the host): the first is tried again
// publishRetryInitial after it failed, each further one in a row twice as late, at most
// publishRetryMax.
const (
	publishRetryInitial = 10 * time.Second
	publishRetryMax     = 10 * time.Minute
)

// retryDelay is how long the attempt-th failed attempt in a row (1-based) with error err is
// shown before the next one starts.
func retryDelay(attempt int, err error) time.Duration {
	d := publishRetryInitial
	for i := 1; i < attempt && d < publishRetryMax; i++ {
		d *= 2
	}
	d = min(d, publishRetryMax)
	if imagecache.IsLimit(err) {
		d = max(d, limitRetryDelay)
	}
	if hostlimits.IsPoolFull(err) {
		d = max(d, poolFullRetryDelay)
	}
	return d
}

// poolFullRetryDelay is how long a publish that found its pool full (before the upload, or
// ENOSPC during it) waits before the next attempt, at least; that attempt uploads only if the
// pool has room by then. Retrying sooner would refill the pool with uploads bound to fail.
const poolFullRetryDelay = 5 * time.Minute

// ReasonPoolFull is the Ready condition's reason while the image's pool has no room for it.
const ReasonPoolFull xpv2.ConditionReason = "PoolFull"

// unavailable is the Ready condition of a publish that failed with err: PoolFull when the
// pool had no room, else Unavailable.
func unavailable(err error) xpv2.Condition {
	c := xpv2.Unavailable().WithMessage(err.Error())
	if hostlimits.IsPoolFull(err) {
		c.Reason = ReasonPoolFull
	}
	return c
}

// ReasonQueued is the Ready condition's reason while the publish job waits for its turn
// (--max-publish-jobs, --max-publish-jobs-per-host, --max-publish-jobs-per-namespace).
const ReasonQueued xpv2.ConditionReason = "Queued"

// msgQueued says where a BaseImage's publish job waits. It counts jobs, of any namespace,
// and names none (neither jobs nor namespaces).
const msgQueued = "waiting to publish: place %d of %d publish jobs waiting; namespaces take turns, the one with the fewest jobs publishing first (the provider publishes at most %s at once, at most %s per host, at most %s per namespace)"

// queuedCondition is the Ready condition of a job at place among waiting jobs in a queue with
// limits l.
func queuedCondition(place, waiting int, l publishqueue.Limits) xpv2.Condition {
	c := xpv2.Creating().WithMessage(fmt.Sprintf(msgQueued, place, waiting, limitText(l.Total), limitText(l.PerHost), limitText(l.PerNamespace)))
	c.Reason = ReasonQueued
	return c
}

// limitText is a limit as the queue's message says it.
func limitText(n int) string {
	if n <= 0 {
		return "any number"
	}
	return strconv.Itoa(n)
}

// Error messages.
const (
	errLookup     = "cannot look up the image on the host"
	errOwned      = "cannot list this BaseImage's volumes on the host"
	errRemove     = "cannot remove volume %s"
	errHeld       = "deletion is held: %s"
	errFailed     = "cannot publish the image"
	errOtherOwner = "the host holds a volume of this image's name that provider-kvm did not make, or that another BaseImage owns alone"
	errExtName    = "the crossplane.io/external-name annotation %q is not the name of this BaseImage's volume, %q: the provider derives volume names from the source, so that no resource can act on another's; remove the annotation or set it to %q"
	errLiveness   = "cannot list BaseImages to tell stale owner records from live ones"
	errPolicy     = "cannot use the imageSources of %s"
	errRetryLater = "cannot publish the image; it is tried again %s after this attempt failed (failed attempts in a row: %d)"
	errSHA256     = "spec.forProvider.source.sha256 is required by %s: pin the image to the sha256 its publisher gives; nothing was downloaded"
	msgRetrying   = "publishing the image, attempt %d; the one before failed: %v"
)

// jobsDoneBuffer is how many finished jobs may wait to be requeued; more are dropped (the
// poll still comes).
const jobsDoneBuffer = 256

// Event reasons.
const (
	reasonUpload   event.Reason = "ImagePublished"
	reasonUnverify event.Reason = "ImageUnverified"
	reasonFailed   event.Reason = "ImagePublishFailed"
	reasonRetained event.Reason = "OldImageRetained"
	reasonShared   event.Reason = "SharedImageKept"
	reasonLeft     event.Reason = "ImageLeftToSweep"
)

// msgLeft says that a BaseImage let go of a volume whose users could not be ruled out.
const msgLeft = "Let go of %s: nothing was seen to use it, but that cannot be ruled out (%s); the volume stays on the host without an owner, and the sweep at a later BaseImage deletion in its pool removes it once it can be checked"

// Setup adds the BaseImage controller; it starts once the BaseImage CRD is established.
// A finished publish job requeues its BaseImage at once (done), so it turns Ready the moment
// the image is verified, not at the next poll. shared is the process's state (setup.NewShared):
// its image cache state is shared with the KVMDomain controller.
func Setup(mgr ctrl.Manager, o controller.Options, conns *host.Connections, shared *setup.Shared) error {
	done := make(chan ctrlevent.TypedGenericEvent[client.Object], jobsDoneBuffer)
	js := newJobs(publishqueue.New(shared.PublishLimits), func(nn types.NamespacedName) {
		select {
		case done <- ctrlevent.TypedGenericEvent[client.Object]{Object: &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name}}}:
		default: // the poll still comes
		}
	})
	// Jobs of BaseImages removed without a Delete (finalizer removed, namespace force-deleted)
	// are cancelled; reconciles never see such a BaseImage again.
	if err := mgr.Add(manager.RunnableFunc(reaper(js, apiUID(mgr.GetAPIReader())))); err != nil {
		return errors.Wrap(err, "cannot add the BaseImage job reaper")
	}
	return setup.Gated(mgr, o, setup.Kind[*v1alpha1.BaseImage]{
		GroupKind: v1alpha1.BaseImageGroupKind,
		GVK:       v1alpha1.BaseImageGroupVersionKind,
		Object:    &v1alpha1.BaseImage{},
		List:      &v1alpha1.BaseImageList{},
		Watches: []ctrlsource.TypedSource[reconcile.Request]{
			ctrlsource.Channel(done, &handler.EnqueueRequestForObject{}),
			// A deletion held while overlays use the image goes on when their KVMDomain is gone.
			setup.WhenDomainGone(mgr.GetCache(), func(d *v1alpha1.KVMDomain) *string { return d.Spec.ForProvider.BaseImageName }),
		},
		ExternalName: func(mg resource.Managed) string {
			return imagecache.ExternalName(source(mg.(*v1alpha1.BaseImage)))
		},
		Connector: func(rec event.Recorder) managed.TypedExternalConnector[*v1alpha1.BaseImage] {
			return &connector{
				jobs: js, recorder: rec,
				conn:  connection.NewForManager(mgr, conns, rec, shared.Libvirt),
				alive: listUIDs(mgr.GetAPIReader()), images: shared.Images, platform: shared.Platform,
				overlayPools: overlayPools(mgr.GetClient()),
			}
		},
	})
}

// apiUID reads a BaseImage's UID from the API server, past the cache.
func apiUID(r client.Reader) currentUID {
	return func(ctx context.Context, nn types.NamespacedName) (types.UID, error) {
		bi := &v1alpha1.BaseImage{}
		err := r.Get(ctx, nn, bi)
		if kerrors.IsNotFound(err) {
			return "", nil
		}
		return bi.GetUID(), err
	}
}

// Cache is what the external client needs of the image cache; *imagecache.Cache is one.
type Cache interface {
	LookupVolume(ctx context.Context, pool, volume, ownerUID string) (imagecache.Image, error)
	Publish(ctx context.Context, pool string, src imagecache.Source, owner imagecache.Owner, progress imagecache.ProgressFunc) (imagecache.Result, error)
	Remove(ctx context.Context, pool, volume, ownerUID string) (imagecache.Removal, error)
	Owned(ctx context.Context, pool, ownerUID string) ([]imagecache.Image, error)
	Sweep(ctx context.Context, pool string) (removed []string, kept map[string]error, err error)
	NamespaceImages(ctx context.Context, pool, namespace, except string) (int, error)
}

type connector struct {
	jobs     *jobs
	recorder event.Recorder
	conn     *connection.Connector
	// alive lists the BaseImage UIDs that exist; nil deletes no stale owner record.
	alive uidLister
	// resolver resolves image hosts; nil is the system's. Tests point names at loopback.
	resolver imagecache.Resolver
	// images is the process's image cache state (imagecache.NewShared).
	images *imagecache.Shared
	// overlayPools scopes the in-use scan's doubts; nil: every pool counts.
	overlayPools imagecache.OverlayPools
	// platform is what the provider's flags set for every config: the policy namespaced
	// ProviderConfigs narrow, and whether every BaseImage must pin a sha256.
	platform sourcepolicy.Platform
}

// uidLister lists the UIDs of every BaseImage in the cluster.
type uidLister func(ctx context.Context) (map[string]bool, error)

// listUIDs lists BaseImage UIDs from the API server (never a cache that may not have seen a
// new BaseImage yet): an owner record is taken for stale only when its UID is in no BaseImage
// of a list taken after the record was read.
func listUIDs(r client.Reader) uidLister {
	if r == nil {
		return nil
	}
	return func(ctx context.Context) (map[string]bool, error) {
		l := &v1alpha1.BaseImageList{}
		if err := r.List(ctx, l); err != nil {
			return nil, errors.Wrap(err, errLiveness)
		}
		uids := make(map[string]bool, len(l.Items))
		for i := range l.Items {
			uids[string(l.Items[i].GetUID())] = true
		}
		return uids, nil
	}
}

func (c *connector) Connect(ctx context.Context, cr *v1alpha1.BaseImage) (managed.TypedExternalClient[*v1alpha1.BaseImage], error) {
	s, err := c.conn.Connect(ctx, cr)
	if err != nil {
		return nil, err
	}
	namespaced := namespacedConfig(cr)
	dl, key, err := downloads(c.platform, s.Source, s.ImageSources, namespaced)
	if err != nil {
		return nil, err
	}
	dl.Resolver = c.resolver
	// The config's limits bound the image's virtual size and the free space its pool keeps;
	// a job that ran under other limits is not their verdict.
	dl.Limits.MaxVirtualBytes = s.Limits.MaxVirtualBytes()
	key += fmt.Sprintf("\x00limits %d %d", s.Limits.MaxVirtualSizeGiB, s.Limits.MinFreePoolMiB)
	return &external{
		jobs: c.jobs, recorder: c.recorder, defaults: s.Defaults, grant: s.Grant, policy: key, now: time.Now, limits: s.Limits,
		host:          s.Address(),
		requireSHA256: c.platform.SHA256Rule(s.ImageSources, namespaced, s.Source),
		cache: imagecache.New(s.Libvirt(), c.images, dl, imagecache.WithLiveness(rememberAlive(c.alive)),
			imagecache.WithOverlayPools(c.overlayPools), imagecache.WithNamespace(cr.GetNamespace()), imagecache.WithLimits(s.Limits)),
	}, nil
}

// namespacedConfig is true when cr uses a namespaced ProviderConfig: a team's own, whose
// imageSources only narrow the platform's (sourcepolicy.Namespaced).
func namespacedConfig(cr *v1alpha1.BaseImage) bool {
	ref := cr.GetProviderConfigReference()
	return ref != nil && ref.Kind == v1alpha1.ProviderConfigKind
}

// rememberAlive is the Liveness of one Cache's life (a reconcile, or a publish job and its
// waits): UIDs of the lists taken so far are alive; a UID in none of them is looked for in a
// fresh list before it is taken for gone.
func rememberAlive(list uidLister) imagecache.Liveness {
	if list == nil {
		return nil
	}
	var mu sync.Mutex
	known := map[string]bool{}
	return func(ctx context.Context, uid string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if known[uid] {
			return true, nil
		}
		uids, err := list(ctx)
		if err != nil {
			return false, err
		}
		maps.Copy(known, uids)
		return known[uid], nil
	}
}

// downloads compiles the imageSources of config (under the platform's policy when the config
// is namespaced) into what the image cache enforces, and a key that changes whenever they
// change.
func downloads(pl sourcepolicy.Platform, config string, p v1alpha1.ImageSourcePolicy, namespaced bool) (imagecache.Downloads, string, error) {
	pol, lim, err := pl.Compile(p, namespaced)
	if err != nil {
		return imagecache.Downloads{}, "", errors.Wrapf(err, errPolicy, config)
	}
	key, err := json.Marshal(p)
	if err != nil {
		return imagecache.Downloads{}, "", errors.Wrapf(err, errPolicy, config)
	}
	return imagecache.Downloads{Config: config, Policy: pol, Limits: lim}, string(key), nil
}

type external struct {
	jobs     *jobs
	recorder event.Recorder
	defaults v1alpha1.HostDefaults
	// grant is what the namespace may use of the host (its pools among them).
	grant hostgrants.Grant
	// limits of the host config: how many images a namespace may hold there.
	limits hostlimits.Limits
	// host names the host the config reaches: the publish queue's per-host limit counts by it.
	host string
	// policy identifies the imageSources the cache enforces: a job that ran under others
	// is not this policy's verdict.
	policy string
	// requireSHA256 names the rule that requires source.sha256 ("": none).
	requireSHA256 string
	now           func() time.Time
	cache         Cache
}

func source(cr *v1alpha1.BaseImage) imagecache.Source {
	p := cr.Spec.ForProvider
	f := imagecache.Format(p.Format)
	if f == "" {
		f = imagecache.FormatQCOW2
	}
	return imagecache.Source{URL: p.Source.URL, SHA256: p.Source.SHA256, Format: f}
}

func owner(cr *v1alpha1.BaseImage) imagecache.Owner {
	return imagecache.Owner{UID: string(cr.GetUID()), Namespace: cr.GetNamespace(), Name: cr.GetName()}
}

// checkExternalName refuses an external name that is neither the one derived from the current
// source nor the volume published before (Create then moves it to the current one). The
// volumes acted on come from the source and the owner records, never from the annotation.
func checkExternalName(cr *v1alpha1.BaseImage, src imagecache.Source) error {
	n, want := meta.GetExternalName(cr), imagecache.ExternalName(src)
	if n == "" || n == want || n == cr.Status.AtProvider.VolumeName {
		return nil
	}
	return errors.Errorf(errExtName, n, want, want)
}

func (e *external) pool(cr *v1alpha1.BaseImage) string {
	if cr.Spec.ForProvider.Pool != "" {
		return cr.Spec.ForProvider.Pool
	}
	return e.defaults.Pool
}

// attached is true when img is published and this BaseImage is recorded among its owners for
// its current source.
func attached(img imagecache.Image, src imagecache.Source) bool {
	o := img.Own
	return img.State == imagecache.StatePublished && o != nil &&
		o.SourceURL == redact(src.URL) && o.ExpectedSHA256 == src.SHA256 && o.Format == src.Format &&
		(src.SHA256 == "" || img.Marker.SHA256 == src.SHA256)
}

// volumeFor is the volume to observe for src: the digest's for a pinned source; for an
// unpinned one, the volume the last publish job for this source found, else the one in
// status (whose owner record tells whether it was published for this source), else the one
// whose owner record names this BaseImage and source (status was lost; searched only when no
// job for the source is known, as after a restart). "" when there is none.
func (e *external) volumeFor(ctx context.Context, cr *v1alpha1.BaseImage, pool string, src imagecache.Source, j *job) (string, error) {
	if v := imagecache.VolumeName(src); v != "" {
		return v, nil
	}
	if j != nil && j.finished() && j.err == nil && j.result.Image.Volume != "" {
		return j.result.Image.Volume, nil
	}
	if at := cr.Status.AtProvider; at.VolumeName != "" && at.Pool == pool && imagecache.IsVolumeName(at.VolumeName) {
		return at.VolumeName, nil
	}
	if j != nil {
		return "", nil // a job for this source runs or failed: it tells, not a search of the pool
	}
	owned, err := e.cache.Owned(ctx, pool, string(cr.GetUID()))
	if err != nil {
		return "", errors.Wrap(err, errOwned)
	}
	for _, img := range owned {
		if attached(img, src) {
			return img.Volume, nil
		}
	}
	return "", nil
}

// refuse is what the platform refuses a BaseImage before anything is looked at or downloaded:
// a pool its namespace was not granted, or an image without a sha256 where the platform
// requires one (a volume attached before the rule stays).
func (e *external) refuse(cr *v1alpha1.BaseImage, pool string, src imagecache.Source) error {
	if err := e.grant.CheckPool(pool); err != nil {
		return err
	}
	if e.requireSHA256 != "" && src.SHA256 == "" {
		msg := fmt.Sprintf(errSHA256, e.requireSHA256)
		cr.SetConditions(xpv2.Unavailable().WithMessage(msg))
		return errors.New(msg)
	}
	return nil
}

func (e *external) Observe(ctx context.Context, cr *v1alpha1.BaseImage) (managed.ExternalObservation, error) {
	pool, src, uid := e.pool(cr), source(cr), string(cr.GetUID())
	if err := checkExternalName(cr, src); err != nil && !meta.WasDeleted(cr) {
		return managed.ExternalObservation{}, err
	}
	if meta.WasDeleted(cr) {
		return e.observeDeleting(ctx, cr, pool)
	}
	if err := e.refuse(cr, pool, src); err != nil {
		return managed.ExternalObservation{}, err
	}

	j := e.jobs.get(cr.GetUID())
	if j != nil && (j.src != src || j.policy != e.policy) {
		j = nil // a job for an earlier source or imageSources; Create replaces it
	}
	vol, err := e.volumeFor(ctx, cr, pool, src, j)
	if err != nil {
		return managed.ExternalObservation{}, err
	}
	if vol != "" {
		img, err := e.cache.LookupVolume(ctx, pool, vol, uid)
		if err != nil {
			return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
		}
		if attached(img, src) {
			if j != nil && j.finished() {
				e.announce(cr, j)
				e.jobs.forget(cr.GetUID())
			}
			e.published(cr, pool, src, img)
			return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: len(cr.Status.AtProvider.RetainedVolumes) == 0}, nil
		}
	}
	return e.observeJob(cr, j)
}

// observeDeleting reports whether any volume of this BaseImage is left for Delete: those it
// owns, and those it retained after a source change.
func (e *external) observeDeleting(ctx context.Context, cr *v1alpha1.BaseImage, pool string) (managed.ExternalObservation, error) {
	uid := string(cr.GetUID())
	owned, err := e.cache.Owned(ctx, pool, uid)
	if err != nil {
		return managed.ExternalObservation{}, errors.Wrap(err, errOwned)
	}
	exists := len(owned) > 0
	for _, pv := range cr.Status.AtProvider.RetainedVolumes {
		p, vol, _ := strings.Cut(pv, "/")
		if !imagecache.IsVolumeName(vol) {
			continue // not a base image volume: never ours to remove (Remove refuses it too)
		}
		img, err := e.cache.LookupVolume(ctx, p, vol, uid)
		if err != nil {
			return managed.ExternalObservation{}, errors.Wrap(err, errLookup)
		}
		exists = exists || img.HasOwn || (img.State != imagecache.StateAbsent && img.Owner.UID == uid)
	}
	return managed.ExternalObservation{ResourceExists: exists}, nil
}

// observeJob observes an image this BaseImage is not attached to: its publish job is running
// (uploading, or waiting for another BaseImage's upload of the same bytes), has failed, or
// must (re)start.
func (e *external) observeJob(cr *v1alpha1.BaseImage, j *job) (managed.ExternalObservation, error) {
	switch {
	case j == nil:
		return managed.ExternalObservation{ResourceExists: false}, nil
	case !j.finished():
		if q, place, waiting := j.queued(); q {
			cr.Status.AtProvider.Upload = nil
			cr.SetConditions(queuedCondition(place, waiting, e.jobs.queue.Limits()))
			return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, nil
		}
		cr.Status.AtProvider.Upload = &v1alpha1.UploadProgress{BytesDone: j.bytesDone.Load(), BytesTotal: j.bytesTotal.Load()}
		creating := xpv2.Creating()
		if j.lastErr != nil {
			// A retry: the reason of the failure before it stays on the resource.
			creating = creating.WithMessage(fmt.Sprintf(msgRetrying, j.attempt, j.lastErr))
		}
		cr.SetConditions(creating)
		return managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, nil
	case j.err != nil && imagecache.IsOwnedByOther(j.err):
		cr.Status.AtProvider.Upload = nil
		cr.SetConditions(xpv2.Unavailable().WithMessage(errOtherOwner))
		e.jobs.forget(cr.GetUID())
		return managed.ExternalObservation{}, errors.Wrap(j.err, errOtherOwner)
	case j.err != nil && imagecache.IsTerminal(j.err):
		// Retrying the same source (under the same imageSources) cannot help: show why until
		// the spec or the config's imageSources change.
		cr.Status.AtProvider.Upload = nil
		cr.SetConditions(xpv2.Unavailable().WithMessage(j.err.Error()))
		return managed.ExternalObservation{}, errors.Wrap(j.err, errFailed)
	case j.err != nil && e.now().Sub(j.finishedAt) < retryDelay(j.attempt, j.err):
		// Worth retrying, but not right away: show why (Synced=False with the reason, Ready=False)
		// until the backoff has passed; the requeue of the error brings the resource back.
		d := retryDelay(j.attempt, j.err)
		cr.Status.AtProvider.Upload = nil
		cr.SetConditions(unavailable(j.err))
		return managed.ExternalObservation{}, errors.Wrapf(j.err, errRetryLater, d, j.attempt)
	default:
		// A failed upload whose backoff has passed, or a volume that went away: start again.
		// A failed job is kept: Create's job counts as its next attempt.
		if j.err != nil {
			e.recorder.Event(cr, event.Warning(reasonFailed, errors.Wrap(j.err, errFailed)))
		} else {
			e.jobs.forget(cr.GetUID())
		}
		return managed.ExternalObservation{ResourceExists: false}, nil
	}
}

// published records a published image in status and remembers the volume it replaces. What it
// shows comes from the image's bytes (digest, sizes) and from this BaseImage's own records;
// never where another owner, maybe of another namespace, downloaded it from.
func (e *external) published(cr *v1alpha1.BaseImage, pool string, src imagecache.Source, img imagecache.Image) {
	at := &cr.Status.AtProvider
	if at.VolumeName != "" && (at.VolumeName != img.Volume || at.Pool != pool) {
		old := at.Pool + "/" + at.VolumeName
		if !slices.Contains(at.RetainedVolumes, old) {
			at.RetainedVolumes = append(at.RetainedVolumes, old)
		}
	}
	at.VolumeName, at.Pool, at.Path, at.Upload = img.Volume, pool, img.Path, nil
	if r := img.Marker; r != nil {
		at.SHA256, at.SizeBytes, at.VirtualSizeBytes = r.SHA256, r.SizeBytes, r.VirtualSizeBytes
		at.Verified = src.SHA256 != "" && r.SHA256 == src.SHA256
	}
	at.SourceURL = img.Own.SourceURL
	if m := img.Marker; m != nil && m.Owner.UID == string(cr.GetUID()) && m.FinalURL != "" {
		at.SourceURL = m.FinalURL // this BaseImage downloaded the bytes: where they came from
	}
	cr.SetConditions(xpv2.Available())
}

// redact is the URL as records hold it: without password and query.
func redact(s string) string { return imagecache.RedactURL(s) }

// announce emits the events of a finished publish: throughput of an upload, that the image
// was attached to a volume already cached, and a warning when it was not verified against an
// expected digest.
func (e *external) announce(cr *v1alpha1.BaseImage, j *job) {
	if j.err != nil {
		return
	}
	r := j.result
	if r.Reused {
		// Its own URL was downloaded and hashed; whether another BaseImage had cached the bytes
		// is not this namespace's to know.
		e.recorder.Event(cr, event.Normal(reasonUpload, fmt.Sprintf("Published %s: downloaded from its URL and verified, sha256 %s", r.Image.Volume, sha(r.Image))))
	} else {
		e.recorder.Event(cr, event.Normal(reasonUpload, fmt.Sprintf("Published %s: %d bytes in %s (%.1f MiB/s), sha256 %s",
			r.Image.Volume, r.Bytes, r.Duration.Round(time.Millisecond), r.BytesPerSecond()/(1<<20), sha(r.Image))))
	}
	if cr.Spec.ForProvider.Source.SHA256 == "" {
		e.recorder.Event(cr, event.Warning(reasonUnverify, errors.Errorf(
			"the image is unverified: spec.forProvider.source.sha256 is not set; pin it to %s if that is the image you expect", sha(r.Image))))
	}
}

func sha(img imagecache.Image) string {
	if img.Marker != nil {
		return img.Marker.SHA256
	}
	return ""
}

func (e *external) Create(ctx context.Context, cr *v1alpha1.BaseImage) (managed.ExternalCreation, error) {
	pool, src, own := e.pool(cr), source(cr), owner(cr)
	// A pool the namespace was not granted is refused before anything is fetched or made.
	if err := e.grant.CheckPool(pool); err != nil {
		return managed.ExternalCreation{}, err
	}
	// So is an image over the namespace's limits.maxImagesPerNamespace.
	if err := e.checkImageCount(ctx, cr, pool); err != nil {
		return managed.ExternalCreation{}, err
	}
	// The external name follows the current source.
	meta.SetExternalName(cr, imagecache.ExternalName(src))
	// The publish job outlives this reconcile, so it runs on a context of its own (jobs.start).
	e.jobs.start(cr.GetUID(), types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}, e.host, src, e.policy, func(ctx context.Context, progress imagecache.ProgressFunc) (imagecache.Result, error) { //nolint:contextcheck // see above
		return e.cache.Publish(ctx, pool, src, own, progress)
	})
	cr.SetConditions(xpv2.Creating())
	return managed.ExternalCreation{}, nil
}

// Update detaches from volumes of earlier sources, which are removed once no owner is left
// and no overlay uses them.
func (e *external) Update(ctx context.Context, cr *v1alpha1.BaseImage) (managed.ExternalUpdate, error) {
	at := &cr.Status.AtProvider
	var keep []string
	for _, pv := range at.RetainedVolumes {
		pool, vol, _ := strings.Cut(pv, "/")
		if pool == at.Pool && vol == at.VolumeName {
			continue // the source went back to it
		}
		r, err := e.cache.Remove(ctx, pool, vol, string(cr.GetUID()))
		switch {
		case imagecache.IsInUse(err):
			keep = append(keep, pv)
		case err == nil && len(r.Doubts) > 0:
			e.recorder.Event(cr, event.Warning(reasonLeft, errors.Errorf(msgLeft, pv, strings.Join(r.Doubts, "; "))))
		case err != nil && !imagecache.IsOwnedByOther(err):
			return managed.ExternalUpdate{}, errors.Wrapf(err, errRemove, pv)
		}
	}
	if len(keep) > 0 {
		e.recorder.Event(cr, event.Normal(reasonRetained, "Keeping "+strings.Join(keep, ", ")+": overlays still use it (or that cannot be ruled out); it is removed once they are gone"))
	}
	at.RetainedVolumes = keep
	return managed.ExternalUpdate{}, nil
}

// Delete detaches this BaseImage from every volume it owns; a volume it was the last owner of
// is removed, and the deletion is held while an overlay uses such a volume (or that cannot be
// ruled out). Volumes other BaseImages own are kept for them.
func (e *external) Delete(ctx context.Context, cr *v1alpha1.BaseImage) (managed.ExternalDelete, error) {
	cr.SetConditions(xpv2.Deleting())
	e.jobs.forget(cr.GetUID())
	uid := string(cr.GetUID())
	targets := map[string]bool{}
	for _, pv := range cr.Status.AtProvider.RetainedVolumes {
		targets[pv] = true
	}
	pool := e.pool(cr)
	owned, err := e.cache.Owned(ctx, pool, uid)
	if err != nil {
		return managed.ExternalDelete{}, errors.Wrap(err, errOwned)
	}
	for _, img := range owned {
		targets[pool+"/"+img.Volume] = true
	}
	var held []string
	for pv := range targets {
		p, vol, _ := strings.Cut(pv, "/")
		r, err := e.cache.Remove(ctx, p, vol, uid)
		var inUse *imagecache.InUseError
		switch {
		case errors.As(err, &inUse):
			held = append(held, inUse.Error())
		case err != nil && !imagecache.IsOwnedByOther(err):
			return managed.ExternalDelete{}, errors.Wrapf(err, errRemove, pv)
		case r.Kept:
			e.recorder.Event(cr, event.Normal(reasonShared, fmt.Sprintf("Detached from %s; it stays cached for %d other BaseImage(s)", pv, r.Owners)))
		case len(r.Doubts) > 0:
			e.recorder.Event(cr, event.Warning(reasonLeft, errors.Errorf(msgLeft, pv, strings.Join(r.Doubts, "; "))))
		case r.Left:
			e.recorder.Event(cr, event.Normal(reasonShared, fmt.Sprintf("Detached from %s, which %d disk(s) of other namespaces still use; it is removed once unused", pv, r.OtherUsers)))
		}
	}
	if len(held) > 0 {
		return managed.ExternalDelete{}, errors.Errorf(errHeld, strings.Join(held, "; "))
	}
	e.sweep(ctx, cr, pool)
	return managed.ExternalDelete{}, nil
}

// sweep cleans the pool of owner records of BaseImages gone from the cluster, and of volumes
// they leave without owners and unused, so that nothing waits for a BaseImage that will never
// be deleted (lost with its cluster, or deleted without its finalizer). It is best effort: a
// deletion does not wait for it, and what it cannot do is tried at the next one.
func (e *external) sweep(ctx context.Context, cr *v1alpha1.BaseImage, pool string) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	removed, _, err := e.cache.Sweep(ctx, pool)
	if err != nil {
		e.recorder.Event(cr, event.Warning(reasonShared, errors.Wrapf(err, "cannot clean up stale owner records in pool %s", pool)))
	}
	if len(removed) > 0 {
		e.recorder.Event(cr, event.Normal(reasonShared, fmt.Sprintf("Removed %d cached image volume(s) of pool %s that no BaseImage owns any more", len(removed), pool)))
	}
}

func (e *external) Disconnect(context.Context) error { return nil }

// checkImageCount refuses a BaseImage whose namespace's BaseImages hold
// limits.maxImagesPerNamespace images in its pool already (this one's own records left out:
// a retry, or a new source, is not one more), before anything is downloaded or written.
func (e *external) checkImageCount(ctx context.Context, cr *v1alpha1.BaseImage, pool string) error {
	if e.limits.MaxImagesPerNamespace <= 0 {
		return nil
	}
	n, err := e.cache.NamespaceImages(ctx, pool, cr.GetNamespace(), string(cr.GetUID()))
	if err != nil {
		return err
	}
	return e.limits.ImageCount(n)
}
