package imagecache

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const errUsers = "cannot find the users of %s"

// Usage is what Users found of a base volume's users.
type Usage struct {
	// Users are volumes backing onto the file ("volume POOL/NAME") and domains whose disks
	// use it ("domain NAME disk DEV").
	Users []string
	// Doubts say what could not be checked where overlays of the base can be (see
	// OverlayPools): a pool that is inactive or cannot be read, a domain disk whose backing
	// chain cannot be seen. Any doubt keeps the volume; the last owner's BaseImage may still
	// go, leaving it to Sweep (Removal.Doubts).
	Doubts []string
}

// OverlayPools names the pools in which overlays of a base can be made: those KVMDomains
// create their overlays in (their spec.forProvider.pool, or their config's default pool).
// Only there, and in the base's own pool, and in the directories of those pools, does what
// cannot be checked count as a doubt; an inactive or unreadable pool no overlay can be in
// does not keep an unused base. It may name more pools than the host has (names of other
// hosts' pools are harmless). Nil: every pool and directory counts.
type OverlayPools func(ctx context.Context) (map[string]bool, error)

// WithOverlayPools scopes the in-use scan's doubts to the pools p names (see OverlayPools).
func WithOverlayPools(p OverlayPools) Option { return func(c *Cache) { c.overlayPools = p } }

// scope is where overlays of one base can be: pools by name, and the directories of those
// pools (a domain disk that is a file in one). all: everywhere.
type scope struct {
	all   bool
	pools map[string]bool
	dirs  map[string]bool
}

// newScope is the scope of the base at basePath on a host with pools, overlay naming the
// pools overlays are made in (nil: everywhere). The pool that holds the base is in it.
func newScope(pools []libvirt.Pool, overlay map[string]bool, basePath string) scope {
	if overlay == nil {
		return scope{all: true}
	}
	s := scope{pools: map[string]bool{}, dirs: map[string]bool{}}
	for _, p := range pools {
		if overlay[p.Name] || (p.Path != "" && p.Path == filepath.Dir(basePath)) {
			s.pools[p.Name] = true
			if p.Path != "" {
				s.dirs[filepath.Clean(p.Path)] = true
			}
		}
	}
	for n := range overlay {
		s.pools[n] = true
	}
	return s
}

func (s scope) pool(name string) bool { return s.all || s.pools[name] }

func (s scope) file(path string) bool { return s.all || s.dirs[filepath.Dir(path)] }

// InUse is true when the file is in use, or that cannot be ruled out.
func (u Usage) InUse() bool { return len(u.Users) > 0 || len(u.Doubts) > 0 }

// Users lists what uses the file basePath: volumes in any pool whose backing store it is and
// domains (running or not, whoever defined them) whose disks use it directly or in their
// backing chain; and what it could not check (Usage.Doubts) where overlays of it can be (the
// scope, see OverlayPools): an inactive pool or one it cannot read, a disk that is a volume it
// cannot resolve, a qcow2 (or unknown format) disk outside every active pool whose backing
// chain libvirt does not show (a shut-off domain's). It reads the host afresh.
func (c *Cache) Users(ctx context.Context, basePath string) (Usage, error) {
	s, err := c.scanHost(ctx)
	if err != nil {
		return Usage{}, errors.Wrapf(err, errUsers, basePath)
	}
	return c.usage(ctx, s, basePath)
}

// usersRecent is Users on a scan of the host at most ScanReuse old (Shared.scans): removals of
// several BaseImages on one host within a poll share one scan. Only a removal's first check
// uses it; the check after the marker is gone reads the host afresh (Users), so an overlay
// made since the scan is still seen before anything is deleted.
func (c *Cache) usersRecent(ctx context.Context, basePath string) (Usage, error) {
	s, ok := c.sh.scans.get(c.lv.Address(), c.now())
	if !ok {
		var err error
		if s, err = c.scanHost(ctx); err != nil {
			return Usage{}, errors.Wrapf(err, errUsers, basePath)
		}
		c.sh.scans.put(c.lv.Address(), s)
	}
	return c.usage(ctx, s, basePath)
}

// usage is what uses basePath in scan s, with the doubts scoped to where overlays of it can be.
func (c *Cache) usage(ctx context.Context, s hostScan, basePath string) (Usage, error) {
	var overlay map[string]bool
	if c.overlayPools != nil {
		var err error
		if overlay, err = c.overlayPools(ctx); err != nil {
			return Usage{}, errors.Wrapf(err, errUsers, basePath)
		}
	}
	return usageOf(s, newScope(s.pools, overlay, basePath), basePath), nil
}

// hostScan is what the in-use scan reads of a host: its pools, the volumes of each active one
// (or why they could not be read), and every domain's disks.
type hostScan struct {
	at    time.Time
	pools []libvirt.Pool
	vols  map[string][]libvirt.Volume
	errs  map[string]error
	disks []libvirt.DomainDisk
}

// scanHost reads the host for the in-use scan. A pool gone since listed is left out.
//
// Its calls are bounded by what the host holds, each thing read once: the pools (one call,
// two per pool), each active pool's volumes (three calls, one per volume) and the domains'
// disks (one call, one per domain). A disk whose source is a volume is resolved from the
// volumes read (resolveDisks), not looked up again (three calls per disk, two disks per
// KVMDomain); only one missing from its pool's listing is looked up.
func (c *Cache) scanHost(ctx context.Context) (hostScan, error) {
	s := hostScan{at: c.now(), vols: map[string][]libvirt.Volume{}, errs: map[string]error{}}
	var err error
	if s.pools, err = c.lv.AllPools(ctx); err != nil {
		return hostScan{}, err
	}
	for _, p := range s.pools {
		if !p.Active {
			continue
		}
		vols, err := c.lv.Volumes(ctx, p.Name)
		switch {
		case libvirt.IsNotFound(err):
		case err != nil:
			s.errs[p.Name] = err
		default:
			s.vols[p.Name] = vols
		}
	}
	disks, err := c.lv.DomainDiskSources(ctx)
	if err != nil {
		return hostScan{}, err
	}
	s.disks = c.resolveDisks(ctx, s, disks)
	return s, nil
}

// resolveDisks gives each disk whose source is a volume (Path "", Volume set) the path of
// that volume as the scan s read it in its pool. A volume missing from the listing of a pool
// the scan read (made since) is looked up, and added to s's volumes of that pool, so that its
// backing store is checked as theirs. A volume that cannot be found or read, or one of a pool
// the scan could not read (inactive, unreadable, gone), keeps no path: usageOf counts it as a
// doubt where overlays of the base can be (diskDoubt), never as unused.
func (c *Cache) resolveDisks(ctx context.Context, s hostScan, disks []libvirt.DomainDisk) []libvirt.DomainDisk {
	paths := map[string]string{}
	for pool, vols := range s.vols {
		for _, v := range vols {
			paths[pool+"/"+v.Name] = v.Path
		}
	}
	out := make([]libvirt.DomainDisk, len(disks))
	for i, d := range disks {
		out[i] = d
		if d.Path != "" || d.Volume == "" {
			continue
		}
		key := d.Pool + "/" + d.Volume
		if p, ok := paths[key]; ok {
			out[i].Path = p
			continue
		}
		if _, read := s.vols[d.Pool]; !read {
			continue
		}
		v, err := c.lv.Volume(ctx, d.Pool, d.Volume)
		if err != nil {
			continue
		}
		s.vols[d.Pool] = append(s.vols[d.Pool], v)
		paths[key] = v.Path
		out[i].Path = v.Path
	}
	return out
}

// usageOf decides, without I/O, what uses basePath in s and what cannot be ruled out in sc.
func usageOf(s hostScan, sc scope, basePath string) Usage {
	var u Usage
	inPool := map[string]bool{}
	for _, p := range s.pools {
		switch {
		case !p.Active && sc.pool(p.Name):
			u.Doubts = append(u.Doubts, "pool "+p.Name+" is inactive, so its volumes cannot be checked (start the pool, or delete it)")
		case s.errs[p.Name] != nil && sc.pool(p.Name):
			u.Doubts = append(u.Doubts, "pool "+p.Name+" cannot be read: "+s.errs[p.Name].Error())
		}
		for _, v := range s.vols[p.Name] {
			inPool[v.Path] = true
			if v.BackingStorePath == basePath && v.Path != basePath {
				u.Users = append(u.Users, "volume "+p.Name+"/"+v.Name)
			}
		}
	}
	for _, d := range s.disks {
		if d.Path == basePath {
			u.Users = append(u.Users, "domain "+d.Domain+" disk "+d.Target)
		} else if doubt := diskDoubt(d, inPool, sc); doubt != "" {
			u.Doubts = append(u.Doubts, doubt)
		}
	}
	sort.Strings(u.Users)
	sort.Strings(u.Doubts)
	u.Users, u.Doubts = slices.Compact(u.Users), slices.Compact(u.Doubts)
	return u
}

// ScanReuse is how long a host's in-use scan serves the first check of later removals on that
// host (about one poll of a deletion that is held).
const ScanReuse = 5 * time.Second

// scans remembers the last in-use scan of each host, for ScanReuse.
type scans struct {
	mu sync.Mutex
	m  map[string]hostScan
}

func (s *scans) get(address string, now time.Time) (hostScan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.m[address]
	if !ok || now.Sub(h.at) >= ScanReuse || now.Before(h.at) {
		delete(s.m, address)
		return hostScan{}, false
	}
	return h, true
}

func (s *scans) put(address string, h hostScan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]hostScan{}
	}
	s.m[address] = h
}

// diskDoubt says why a domain disk (not the base itself) might back onto the base without
// anyone being able to tell, or "" when it cannot: its chain is listed (a running domain's),
// it is a volume of a pool that was read (its backing store was checked there), it cannot
// have a backing file (cdrom, floppy, raw), or it is outside sc (no overlay of the base can be
// there).
func diskDoubt(d libvirt.DomainDisk, inPool map[string]bool, sc scope) string {
	switch {
	case d.Backing || d.ChainKnown || d.Device == "cdrom" || d.Device == "floppy" || d.Format == "raw":
		return ""
	case d.Path == "" && !sc.pool(d.Pool):
		return ""
	case d.Path == "":
		return "domain " + d.Domain + " disk " + d.Target + " is volume " + d.Pool + "/" + d.Volume + ", which cannot be read"
	case !inPool[d.Path] && sc.file(d.Path):
		return "domain " + d.Domain + " disk " + d.Target + " is " + d.Path + ", which is in no active pool, and libvirt shows no backing chain for it while the domain is not running"
	}
	return ""
}
