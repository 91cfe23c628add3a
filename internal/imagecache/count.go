package imagecache

import (
	"context"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

const errCountImages = "cannot count the images of namespace %s in pool %s"

// NamespaceImages counts the BaseImages of namespace, other than except (a UID), that own an
// image in pool: the distinct UIDs of the valid owner records that name the namespace. With a
// Liveness, records of BaseImages gone from the cluster are not counted (the next publish or
// removal of their volume deletes them). Torn records are not counted. It reads every owner
// record of the pool: ask it only where a limit needs it.
func (c *Cache) NamespaceImages(ctx context.Context, pool, namespace, except string) (int, error) {
	names, err := c.lv.VolumeNames(ctx, pool)
	if err != nil {
		return 0, errors.Wrapf(err, errCountImages, namespace, pool)
	}
	uids := map[string]bool{}
	for _, n := range names {
		vol, ok := ownerRecordOf(n)
		if !ok {
			continue
		}
		exists, rec, invalid, err := c.readRecord(ctx, pool, n)
		if err != nil {
			return 0, errors.Wrapf(err, errCountImages, namespace, pool)
		}
		if !exists || invalid != nil || rec == nil || !isOwnerRecord(rec, vol, rec.Owner.UID) ||
			rec.Owner.Namespace != namespace || rec.Owner.UID == except || uids[rec.Owner.UID] {
			continue
		}
		if c.alive != nil {
			alive, err := c.alive(ctx, rec.Owner.UID)
			if err != nil {
				return 0, errors.Wrapf(err, errCountImages, namespace, pool)
			}
			if !alive {
				continue
			}
		}
		uids[rec.Owner.UID] = true
	}
	return len(uids), nil
}
