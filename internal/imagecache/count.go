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
// record of the pool: ask it only where a limit needs it. Only the records of this provider's
// cluster (WithClusterID), or of none, are counted: another cluster's namespace of the same
// name is another team.
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
			rec.Owner.Namespace != namespace || !c.judges(rec.Owner) || rec.Owner.UID == except || uids[rec.Owner.UID] {
			continue
		}
		alive, err := c.ownerAlive(ctx, rec.Owner)
		if err != nil {
			return 0, errors.Wrapf(err, errCountImages, namespace, pool)
		}
		if !alive {
			continue
		}
		uids[rec.Owner.UID] = true
	}
	return len(uids), nil
}
