package imagecache

import (
	"context"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// ensureOwner adds the owner record of owner to vol, recording what the BaseImage asked for.
// A record of owner that records another source (the spec was edited), or is torn, is
// replaced. Only owner's own record is ever written: its name is derived from owner's UID.
func (c *Cache) ensureOwner(ctx context.Context, pool, vol string, owner Owner, asked Source) error {
	name := OwnerName(vol, owner.UID)
	want := Record{
		State: RecordOwner, Volume: vol, Owner: owner,
		SourceURL: redactURL(asked.URL), ExpectedSHA256: asked.SHA256, Format: asked.Format.OrDefault(),
		Time: c.now().UTC(),
	}
	exists, rec, invalid, err := c.readRecord(ctx, pool, name)
	if err != nil {
		return errors.Wrapf(err, errOwnerRecord, vol, pool)
	}
	if exists && invalid == nil && isOwnerRecord(rec, vol, owner.UID) && rec.Owner == owner &&
		rec.SourceURL == want.SourceURL && rec.ExpectedSHA256 == want.ExpectedSHA256 && rec.Format == want.Format {
		return nil
	}
	if exists {
		if err := c.lv.DeleteVolume(ctx, pool, name); err != nil {
			return errors.Wrapf(err, errOwnerRecord, vol, pool)
		}
	}
	if err := c.writeRecord(ctx, pool, name, want); err != nil {
		if libvirt.IsExists(err) {
			return errors.Errorf(errClaimRace, vol, pool)
		}
		return errors.Wrapf(err, errOwnerRecord, vol, pool)
	}
	return nil
}

// otherOwners returns the owner records of vol other than except's that are live, and deletes
// those that are not: records of UIDs the Liveness says are gone from the cluster, and records
// that stay torn (their writer died). Without a Liveness every valid record is live.
func (c *Cache) otherOwners(ctx context.Context, pool, vol, except string) ([]Record, error) {
	names, err := c.lv.VolumeNames(ctx, pool)
	if err != nil {
		return nil, errors.Wrapf(err, errOwnerRecord, vol, pool)
	}
	skip := ""
	if except != "" {
		skip = OwnerName(vol, except)
	}
	var out []Record
	for _, n := range names {
		if v, ok := ownerRecordOf(n); !ok || v != vol || n == skip {
			continue
		}
		rec, live, err := c.ownerLive(ctx, pool, vol, n)
		if err != nil {
			return nil, err
		}
		if live {
			out = append(out, rec)
			continue
		}
		if err := c.lv.DeleteVolume(ctx, pool, n); err != nil {
			return nil, errors.Wrapf(err, errOwnerRecord, vol, pool)
		}
		c.forgetRecord(pool, n)
	}
	return out, nil
}

// ownerLive reads the owner record name of vol and tells whether it is live: valid, for vol,
// under the name its UID gives, and (with a Liveness) of a BaseImage that exists. A record
// already gone is not live and needs no deleting; the caller deletes the others.
func (c *Cache) ownerLive(ctx context.Context, pool, vol, name string) (Record, bool, error) {
	valid := func(rec *Record, invalid error) bool {
		return invalid == nil && isOwnerRecord(rec, vol, rec.Owner.UID) && OwnerName(vol, rec.Owner.UID) == name
	}
	exists, rec, invalid, err := c.readRecord(ctx, pool, name)
	if err != nil || !exists {
		return Record{}, false, err
	}
	if !valid(rec, invalid) {
		// Its writer may be filling it right now: look again once it had time to.
		if err := sleep(ctx, c.sh.timing.tornGrace); err != nil {
			return Record{}, false, err
		}
		if exists, rec, invalid, err = c.readRecord(ctx, pool, name); err != nil || !exists {
			return Record{}, false, err
		}
		if !valid(rec, invalid) {
			return Record{}, false, nil
		}
	}
	alive, err := c.ownerAlive(ctx, rec.Owner)
	if err != nil {
		return Record{}, false, err
	}
	return *rec, alive, nil
}

// judges tells whether this provider may judge owner o by its Liveness: o is of its cluster,
// or names none (WithClusterID).
func (c *Cache) judges(o Owner) bool { return o.ClusterID == "" || o.ClusterID == c.clusterID }

// ownerAlive tells whether owner o still exists: by the Liveness when this provider judges o,
// else (no Liveness, another cluster's owner) it is taken for alive.
func (c *Cache) ownerAlive(ctx context.Context, o Owner) (bool, error) {
	if c.alive == nil || !c.judges(o) {
		return true, nil
	}
	alive, err := c.alive(ctx, o.UID)
	return alive, errors.Wrap(err, "cannot tell whether the owner of an image record still exists")
}

// liveUIDs is the set of the owners' UIDs.
func liveUIDs(owners []Record) map[string]bool {
	m := make(map[string]bool, len(owners))
	for _, r := range owners {
		m[r.Owner.UID] = true
	}
	return m
}
