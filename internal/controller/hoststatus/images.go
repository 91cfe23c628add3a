package hoststatus

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

// Cached base images are shared by BaseImages of every namespace and carry one owner record
// per BaseImage (internal/imagecache); their orphans are not re-decided here: a
// ClusterProviderConfig with orphans: Delete runs the image cache's own Sweep on each pool it
// read, whose Liveness takes an owner for gone only once no BaseImage of its UID has existed,
// by the API server, for the grace period. Sweep deletes such owner records and removes a
// volume left without owners once nothing uses it, as a last owner's Remove would.

// ImageSweeper sweeps the cached base images of a pool; *imagecache.Cache is one.
type ImageSweeper interface {
	Sweep(ctx context.Context, pool string) (removed []string, kept map[string]error, err error)
}

// imageSweeps is what the image sweep remembers per config: when it last ran, and when each
// owner UID was first found gone.
type imageSweeps struct {
	mu   sync.Mutex
	last map[string]time.Time
	gone map[string]map[string]time.Time
}

// due tells whether config's image sweep is due at now (every min(grace, DefaultRecheck)),
// and marks it run.
func (s *imageSweeps) due(config string, now time.Time, grace time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.last[config]; ok && now.Sub(l) < min(grace, DefaultRecheck) {
		return false
	}
	s.last[config] = now
	return true
}

// GraceLiveness is the Liveness of one image sweep: a UID is alive when a BaseImage of that UID
// is in a list (from the API server; a UID in none of the lists so far is looked for in a
// fresh one, taken after its record was read, as the BaseImage controller's) or when it was
// first found gone less than grace before now. first holds the first sightings from the sweeps
// before and gets this sweep's; done returns the sightings to keep (the UIDs asked about).
func GraceLiveness(list func(ctx context.Context) (map[string]bool, error), first map[string]time.Time, now time.Time, grace time.Duration) (alive imagecache.Liveness, done func() map[string]time.Time) {
	var (
		mu    sync.Mutex
		uids  map[string]bool
		asked = map[string]time.Time{}
	)
	alive = func(ctx context.Context, uid string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if uids[uid] {
			return true, nil
		}
		// Not in the lists so far: a fresh list, taken after the record was read, decides.
		l, err := list(ctx)
		if err != nil {
			return false, err
		}
		if uids == nil {
			uids = map[string]bool{}
		}
		maps.Copy(uids, l)
		if uids[uid] {
			return true, nil
		}
		f, ok := first[uid]
		if !ok || f.After(now) {
			f = now
		}
		asked[uid] = f
		return now.Sub(f) < grace, nil
	}
	done = func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return asked
	}
	return alive, done
}

// apiBaseImageUIDs lists the UIDs of every BaseImage from r.
func apiBaseImageUIDs(r client.Reader) func(ctx context.Context) (map[string]bool, error) {
	return func(ctx context.Context) (map[string]bool, error) {
		l := &v1alpha1.BaseImageList{}
		if err := r.List(ctx, l); err != nil {
			return nil, errors.Wrap(err, "cannot list BaseImages")
		}
		uids := make(map[string]bool, len(l.Items))
		for i := range l.Items {
			uids[string(l.Items[i].GetUID())] = true
		}
		return uids, nil
	}
}

// sweepImages runs the image cache's Sweep on every active pool of rd for a
// ClusterProviderConfig with orphans: Delete, when due, and returns how many volumes it
// removed.
func (r *Reconciler) sweepImages(ctx context.Context, obj client.Object, cfg string, grace time.Duration, images func(imagecache.Liveness) ImageSweeper, rd Reading) int {
	now := r.memo.now()
	if images == nil || !r.memo.images.due(cfg, now, grace) {
		return 0
	}
	r.memo.images.mu.Lock()
	first := r.memo.images.gone[cfg]
	r.memo.images.mu.Unlock()
	alive, done := GraceLiveness(apiBaseImageUIDs(r.api), first, now, grace)
	c := images(alive)
	n := 0
	for _, p := range rd.Pools {
		if p.Missing || !p.Pool.Active {
			continue
		}
		removed, _, err := c.Sweep(ctx, p.Name)
		if err != nil {
			r.record.Event(obj, event.Warning(ReasonOrphanSweepErr, errors.Wrapf(err, "cannot sweep the cached base images of pool %s", p.Name)))
		}
		for _, v := range removed {
			r.record.Event(obj, event.Normal(ReasonOrphanRemoved, fmt.Sprintf("Removed cached base image %s/%s: no BaseImage that owned it exists any more", p.Name, v)))
		}
		n += len(removed)
	}
	r.memo.images.mu.Lock()
	r.memo.images.gone[cfg] = done()
	r.memo.images.mu.Unlock()
	return n
}
