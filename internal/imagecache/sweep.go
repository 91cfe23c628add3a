package imagecache

import (
	"context"
	"maps"
	"slices"
)

// Sweep deletes the stale owner records (see WithLiveness) of every shared volume of pool, and
// removes each volume left without an owner once nothing uses it, as its last owner's Remove
// would: a volume whose owners all vanished without a Remove (deleted without their finalizer,
// or a cluster restored from a backup whose BaseImages were not recreated) does not stay
// forever. It returns the volumes it removed and, per volume it kept, why. Without a Liveness
// it does nothing.
func (c *Cache) Sweep(ctx context.Context, pool string) (removed []string, kept map[string]error, err error) {
	if c.alive == nil {
		return nil, nil, nil
	}
	vols, err := c.digestVolumes(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	keep := func(v string, err error) {
		if kept == nil {
			kept = map[string]error{}
		}
		kept[v] = err
	}
	for _, v := range vols {
		// Stale records go first, without the lock (no BaseImage that is gone adds its record
		// again); only a volume left without live owners is worth a removal.
		others, err := c.otherOwners(ctx, pool, v, "")
		if err != nil {
			if ctx.Err() != nil {
				return removed, kept, err
			}
			keep(v, err)
			continue
		}
		if len(others) > 0 {
			continue
		}
		r, err := c.Remove(ctx, pool, v, "")
		switch {
		case err != nil && ctx.Err() != nil:
			return removed, kept, err
		case err != nil:
			keep(v, err)
		case !r.Kept:
			removed = append(removed, v)
		}
	}
	return removed, kept, nil
}

// digestVolumes are the digest-named data volumes of the pool (those any of its volumes belong
// to), sorted.
func (c *Cache) digestVolumes(ctx context.Context, pool string) ([]string, error) {
	names, err := c.lv.VolumeNames(ctx, pool)
	if err != nil {
		return nil, err
	}
	vols := map[string]bool{}
	for _, n := range names {
		if v, ok := dataVolumeOf(n); ok && isDigestName(v) {
			vols[v] = true
		}
	}
	return slices.Sorted(maps.Keys(vols)), nil
}
