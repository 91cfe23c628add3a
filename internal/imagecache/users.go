package imagecache

import (
	"context"
	"slices"
	"sort"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const errUsers = "cannot find the users of %s"

// Usage is what Users found of a base volume's users.
type Usage struct {
	// Users are volumes backing onto the file ("volume POOL/NAME") and domains whose disks
	// use it ("domain NAME disk DEV").
	Users []string
	// Doubts say what could not be checked: a pool that is inactive or cannot be read, a
	// domain disk whose backing chain cannot be seen. Any doubt keeps the volume.
	Doubts []string
}

// InUse is true when the file is in use, or that cannot be ruled out.
func (u Usage) InUse() bool { return len(u.Users) > 0 || len(u.Doubts) > 0 }

// Users lists what uses the file basePath: volumes in any pool whose backing store it is and
// domains (running or not, whoever defined them) whose disks use it directly or in their
// backing chain; and what it could not check (Usage.Doubts): an inactive pool or one it cannot
// read, a disk that is a volume it cannot resolve, a qcow2 (or unknown format) disk outside
// every active pool whose backing chain libvirt does not show (a shut-off domain's).
func (c *Cache) Users(ctx context.Context, basePath string) (Usage, error) {
	u, inPool, err := c.poolUsers(ctx, basePath)
	if err != nil {
		return Usage{}, err
	}
	disks, err := c.lv.DomainDisks(ctx)
	if err != nil {
		return Usage{}, errors.Wrapf(err, errUsers, basePath)
	}
	for _, d := range disks {
		if d.Path == basePath {
			u.Users = append(u.Users, "domain "+d.Domain+" disk "+d.Target)
		} else if doubt := diskDoubt(d, inPool); doubt != "" {
			u.Doubts = append(u.Doubts, doubt)
		}
	}
	sort.Strings(u.Users)
	sort.Strings(u.Doubts)
	u.Users, u.Doubts = slices.Compact(u.Users), slices.Compact(u.Doubts)
	return u, nil
}

// poolUsers lists the volumes of every pool that back onto basePath, the doubts of pools it
// cannot read, and the paths of every volume it read.
func (c *Cache) poolUsers(ctx context.Context, basePath string) (Usage, map[string]bool, error) {
	pools, err := c.lv.AllPools(ctx)
	if err != nil {
		return Usage{}, nil, errors.Wrapf(err, errUsers, basePath)
	}
	var u Usage
	inPool := map[string]bool{}
	for _, p := range pools {
		if !p.Active {
			u.Doubts = append(u.Doubts, "pool "+p.Name+" is inactive, so its volumes cannot be checked (start the pool, or delete it)")
			continue
		}
		vols, err := c.lv.Volumes(ctx, p.Name)
		if libvirt.IsNotFound(err) {
			continue
		}
		if err != nil {
			u.Doubts = append(u.Doubts, "pool "+p.Name+" cannot be read: "+err.Error())
			continue
		}
		for _, v := range vols {
			inPool[v.Path] = true
			if v.BackingStorePath == basePath && v.Path != basePath {
				u.Users = append(u.Users, "volume "+p.Name+"/"+v.Name)
			}
		}
	}
	return u, inPool, nil
}

// diskDoubt says why a domain disk (not the base itself) might back onto the base without
// anyone being able to tell, or "" when it cannot: its chain is listed (a running domain's),
// it is a volume of a pool that was read (its backing store was checked there), or it cannot
// have a backing file (cdrom, floppy, raw).
func diskDoubt(d libvirt.DomainDisk, inPool map[string]bool) string {
	switch {
	case d.Backing || d.ChainKnown || d.Device == "cdrom" || d.Device == "floppy" || d.Format == "raw":
		return ""
	case d.Path == "":
		return "domain " + d.Domain + " disk " + d.Target + " is volume " + d.Pool + "/" + d.Volume + ", which cannot be read"
	case !inPool[d.Path]:
		return "domain " + d.Domain + " disk " + d.Target + " is " + d.Path + ", which is in no active pool, and libvirt shows no backing chain for it while the domain is not running"
	}
	return ""
}
