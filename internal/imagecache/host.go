package imagecache

import (
	"context"
	"io"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/imagefetch"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// What downloads need is imagefetch's; these keep their names here for callers.
type (
	// Downloads says what a Cache may download and how much (imagefetch.Downloads).
	Downloads = imagefetch.Downloads
	// Resolver resolves image host names (imagefetch.Resolver).
	Resolver = imagefetch.Resolver
	// ProgressFunc reports an upload's progress (imagefetch.ProgressFunc).
	ProgressFunc = imagefetch.ProgressFunc
)

// Host is what a Cache needs of a libvirt host: exactly the calls the image protocol makes.
// *libvirt.Client is one; so is fakestorage.Storage, an in-memory host for tests.
type Host interface {
	// Address names the host; it keys what Shared remembers and locks.
	Address() string
	Volume(ctx context.Context, pool, name string) (libvirt.Volume, error)
	VolumeInfo(ctx context.Context, pool, name string) (libvirt.VolumeInfo, error)
	VolumePhysicalBytes(ctx context.Context, pool, name string) (uint64, error)
	VolumeNames(ctx context.Context, pool string) ([]string, error)
	Volumes(ctx context.Context, pool string) ([]libvirt.Volume, error)
	CreateVolume(ctx context.Context, pool, xml string) (libvirt.Volume, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	Upload(ctx context.Context, pool, name string, r io.Reader, length uint64) error
	Download(ctx context.Context, pool, name string, w io.Writer, offset, length uint64) error
	RefreshPool(ctx context.Context, pool string) error
	AllPools(ctx context.Context) ([]libvirt.Pool, error)
	Pool(ctx context.Context, name string) (libvirt.Pool, error)
	// DomainDiskSources lists every domain's disks without resolving volume sources (the
	// in-use scan resolves them from the pools' volumes it read).
	DomainDiskSources(ctx context.Context) ([]libvirt.DomainDisk, error)
}

var _ Host = (*libvirt.Client)(nil)

// Liveness tells whether the BaseImage with uid still exists in the cluster. Owner records
// of UIDs it denies are stale: Publish and Remove delete them. It must not deny a UID on
// stale knowledge (ask the API server, not a cache that may lag behind).
type Liveness func(ctx context.Context, uid string) (bool, error)

// Cache publishes, looks up and removes BaseImage volumes on one host. It lives for one
// reconcile; what outlives it (what Lookup remembers, the claim clock, the base locks) is
// on the Shared it was made with.
type Cache struct {
	lv     Host
	sh     *Shared
	fetch  *imagefetch.Fetcher
	now    func() time.Time
	alive  Liveness
	holder string
	// overlayPools scopes the in-use scan's doubts (WithOverlayPools); nil: every pool.
	overlayPools OverlayPools
	// namespace of the BaseImage acting (WithNamespace).
	namespace string
	// clusterID of the management cluster this provider serves (WithClusterID).
	clusterID string
	// limits of the host config: the free space a pool keeps (WithLimits).
	limits hostlimits.Limits
}

// An Option configures a Cache.
type Option func(*Cache)

// WithClock sets the clock used for record times and durations.
func WithClock(now func() time.Time) Option { return func(c *Cache) { c.now = now } }

// WithLiveness lets the Cache delete owner records of BaseImages that no longer exist.
// Without it, no other owner's record is ever deleted.
func WithLiveness(l Liveness) Option { return func(c *Cache) { c.alive = l } }

// WithLimits sets the host config's limits: an upload starts only when its pool has room for
// the image and limits.minFreePoolMiB besides. Without it, only room for the image.
func WithLimits(l hostlimits.Limits) Option { return func(c *Cache) { c.limits = l } }

// WithNamespace says which namespace the BaseImage acting through this Cache is in: in-use
// errors name that namespace's disks and count those of others (InUseError), and its Remove
// keeps its owner record while that namespace's disks use the volume. Without it, in-use
// errors name no disk.
func WithNamespace(ns string) Option { return func(c *Cache) { c.namespace = ns } }

// WithClusterID says which management cluster this provider serves (default: the Shared's,
// see InCluster): the
// owners Publish records name it, and only the owner records that name it, or name no cluster
// (written by a provider without one), are judged by the Liveness and counted by
// NamespaceImages. The records of another cluster's BaseImages sharing the host are left to
// that cluster's provider: its UIDs are unknown here, not gone. Without it (""), the records
// of every cluster that names none are judged, as when one cluster uses the host.
func WithClusterID(id string) Option { return func(c *Cache) { c.clusterID = id } }

// WithHolder sets the holder name written into claims (default: the Shared's, one per
// process).
func WithHolder(h string) Option { return func(c *Cache) { c.holder = h } }

// New returns a Cache that reaches the host through lv, remembers and locks through sh (one
// per process, see NewShared) and downloads what dl allows, within its limits: every URL,
// redirect and dialed address is checked against dl.Policy, no proxy is used, and the
// response headers, stalls and the image size are bounded.
func New(lv Host, sh *Shared, dl Downloads, opts ...Option) *Cache {
	c := &Cache{lv: lv, sh: sh, fetch: imagefetch.New(dl), now: time.Now, holder: sh.holder, clusterID: sh.clusterID}
	for _, o := range opts {
		o(c)
	}
	return c
}

// lock takes the base lock of pool (see Shared.CreateOverlay): within the process, no
// overlay appears between a removal's check for users and its delete.
func (c *Cache) lock(ctx context.Context, pool string) (func(), error) {
	return c.sh.bases.lock(ctx, c.lv.Address(), pool)
}

// memoKey is the key of what Shared remembers of a volume of this host.
func (c *Cache) memoKey(pool, name string) string {
	return c.lv.Address() + "\x00" + pool + "\x00" + name
}
