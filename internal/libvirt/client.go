package libvirt

import (
	"context"
	"io"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// StreamAbortGrace is how long Upload waits, after its context ended, for
// libvirt to acknowledge the stream abort before the connection is closed.
const StreamAbortGrace = 10 * time.Second

// Conn is what a Client needs of a host connection; *host.Conn is one.
type Conn interface {
	// Do calls fn with the libvirt client, bounded by ctx.
	Do(ctx context.Context, fn func(l *golibvirt.Libvirt) error) error
	// Address names the host in errors and keys the per-pool lock.
	Address() string
}

// Client makes typed storage calls on one host. It is cheap and safe for
// concurrent use.
type Client struct {
	conn  Conn
	sh    *Shared
	grace time.Duration
	// uploadIdle: see UploadIdleTimeout.
	uploadIdle time.Duration
	socket     string
	uri        string
	// kind labels the calls counted for contexts that carry no kind (metrics.WithKind).
	kind string
	// count counts one RPC; metrics.Call unless a test replaces it.
	count func(ctx context.Context, op string)
	// opened counts a connection of its own; metrics.Opened unless a test replaces it.
	opened func(host string)
}

// New returns a Client for the host c connects to, sharing sh (one per process, see
// NewShared) with every other Client.
func New(c Conn, sh *Shared, opts ...Option) *Client {
	cl := &Client{conn: c, sh: sh, grace: StreamAbortGrace, uploadIdle: UploadIdleTimeout, socket: DefaultSocket, uri: DefaultURI, count: metrics.Call, opened: metrics.Opened}
	for _, o := range opts {
		o(cl)
	}
	return cl
}

// Address names the Client's host.
func (c *Client) Address() string { return c.conn.Address() }

// Pool is a storage pool.
type Pool struct {
	Name string
	UUID string
	// Type is libvirt's pool type: dir, fs, logical, ...
	Type string
	// Path is the pool's target path on the host.
	Path            string
	Active          bool
	CapacityBytes   uint64
	AllocationBytes uint64
	AvailableBytes  uint64
}

const (
	errLookupPool   = "cannot look up storage pool %q on %s"
	errListPools    = "cannot list storage pools on %s"
	errListVols     = "cannot list volumes of pool %q on %s"
	errLookupVol    = "cannot look up volume %q in pool %q on %s"
	errCreateVol    = "cannot create volume %q in pool %q on %s"
	errDeleteVol    = "cannot delete volume %q from pool %q on %s"
	errResizeVol    = "cannot resize volume %q in pool %q on %s"
	errUploadVol    = "cannot upload volume %q to pool %q on %s"
	errDownloadVol  = "cannot download volume %q from pool %q on %s"
	errRefreshPool  = "cannot refresh storage pool %q on %s"
	errListDomains  = "cannot list domains on %s"
	errPoolInactive = "storage pool %q on %s is not active"
	errStreamAbort  = "stream ended because the context ended (%v)"
	errParseDomain  = "cannot parse XML of domain %q"
	errParsePoolXML = "cannot parse XML of storage pool %q"
)

func (c *Client) poolKey(pool string) string { return c.conn.Address() + "\x00" + pool }

// poolInfo describes sp.
func poolInfo(l rpc, sp golibvirt.StoragePool) (Pool, error) {
	state, capacity, alloc, avail, err := l.StoragePoolGetInfo(sp)
	if err != nil {
		return Pool{}, err
	}
	doc, err := l.StoragePoolGetXMLDesc(sp, 0)
	if err != nil {
		return Pool{}, err
	}
	var x libvirtxml.StoragePool
	if err := x.Unmarshal(doc); err != nil {
		return Pool{}, errors.Wrapf(err, errParsePoolXML, sp.Name)
	}
	p := Pool{
		Name: sp.Name, UUID: x.UUID, Type: x.Type,
		Active:        golibvirt.StoragePoolState(state) == golibvirt.StoragePoolRunning,
		CapacityBytes: capacity, AllocationBytes: alloc, AvailableBytes: avail,
	}
	if x.Target != nil {
		p.Path = x.Target.Path
	}
	return p, nil
}

// Pool looks up a storage pool. IsNotFound tells a missing pool.
func (c *Client) Pool(ctx context.Context, name string) (Pool, error) {
	var p Pool
	err := c.do(ctx, func(l rpc) error {
		sp, err := l.StoragePoolLookupByName(name)
		if err != nil {
			return err
		}
		p, err = poolInfo(l, sp)
		return err
	})
	return p, errors.Wrapf(err, errLookupPool, name, c.conn.Address())
}

// ActivePools lists the host's active storage pools.
func (c *Client) ActivePools(ctx context.Context) ([]Pool, error) {
	return c.listPools(ctx, golibvirt.ConnectListStoragePoolsActive)
}

// AllPools lists the host's storage pools, active or not (Pool.Active tells).
func (c *Client) AllPools(ctx context.Context) ([]Pool, error) {
	return c.listPools(ctx, 0)
}

// listPools lists the storage pools that flags select, skipping any that went since listed.
func (c *Client) listPools(ctx context.Context, flags golibvirt.ConnectListAllStoragePoolsFlags) ([]Pool, error) {
	var out []Pool
	err := c.do(ctx, func(l rpc) error {
		sps, _, err := l.ConnectListAllStoragePools(1, flags)
		if err != nil {
			return err
		}
		for _, sp := range sps {
			p, err := poolInfo(l, sp)
			if IsNotFound(err) {
				continue // gone since listed
			}
			if err != nil {
				return err
			}
			out = append(out, p)
		}
		return nil
	})
	return out, errors.Wrapf(err, errListPools, c.conn.Address())
}

// VolumeNames lists the names of the volumes of an active pool, in two RPCs (no details).
func (c *Client) VolumeNames(ctx context.Context, pool string) ([]string, error) {
	var out []string
	err := c.do(ctx, func(l rpc) error {
		sp, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		svs, _, err := l.StoragePoolListAllVolumes(sp, 1, 0)
		if err != nil {
			return err
		}
		out = make([]string, 0, len(svs))
		for _, sv := range svs {
			out = append(out, sv.Name)
		}
		return nil
	})
	return out, errors.Wrapf(err, errListVols, pool, c.conn.Address())
}

// activePool looks up pool and fails unless it is active.
func (c *Client) activePool(l rpc, pool string) (golibvirt.StoragePool, error) {
	sp, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		return sp, err
	}
	active, err := l.StoragePoolIsActive(sp)
	if err != nil {
		return sp, err
	}
	if active != 1 {
		return sp, errors.Errorf(errPoolInactive, pool, c.conn.Address())
	}
	return sp, nil
}

func volume(l rpc, pool string, sv golibvirt.StorageVol) (Volume, error) {
	doc, err := l.StorageVolGetXMLDesc(sv, 0)
	if err != nil {
		return Volume{}, err
	}
	v, err := ParseVolumeXML(pool, doc)
	if err != nil {
		return Volume{}, err
	}
	if v.Key == "" {
		v.Key = sv.Key
	}
	return v, nil
}

// Volumes lists the volumes of an active pool with their XML details.
func (c *Client) Volumes(ctx context.Context, pool string) ([]Volume, error) {
	var out []Volume
	err := c.do(ctx, func(l rpc) error {
		sp, err := c.activePool(l, pool)
		if err != nil {
			return err
		}
		svs, _, err := l.StoragePoolListAllVolumes(sp, 1, 0)
		if err != nil {
			return err
		}
		out = make([]Volume, 0, len(svs))
		for _, sv := range svs {
			v, err := volume(l, pool, sv)
			if IsNotFound(err) {
				continue // deleted since listed
			}
			if err != nil {
				return errors.Wrapf(err, "volume %q", sv.Name)
			}
			out = append(out, v)
		}
		return nil
	})
	return out, errors.Wrapf(err, errListVols, pool, c.conn.Address())
}

// withVolume runs fn on the named volume of pool.
func (c *Client) withVolume(ctx context.Context, pool, name string, fn func(l rpc, sv golibvirt.StorageVol) error) error {
	return c.do(ctx, func(l rpc) error {
		sp, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		sv, err := l.StorageVolLookupByName(sp, name)
		if err != nil {
			return err
		}
		return fn(l, sv)
	})
}

// Volume looks up a volume. IsNotFound tells a missing volume (or pool).
func (c *Client) Volume(ctx context.Context, pool, name string) (Volume, error) {
	var v Volume
	err := c.withVolume(ctx, pool, name, func(l rpc, sv golibvirt.StorageVol) error {
		var err error
		v, err = volume(l, pool, sv)
		return err
	})
	return v, errors.Wrapf(err, errLookupVol, name, pool, c.conn.Address())
}

// ResizeVolume sets a volume's capacity, shrinking it too when size is smaller.
func (c *Client) ResizeVolume(ctx context.Context, pool, name string, size uint64) error {
	err := c.withVolume(ctx, pool, name, func(l rpc, sv golibvirt.StorageVol) error {
		return l.StorageVolResize(sv, size, golibvirt.StorageVolResizeShrink)
	})
	return errors.Wrapf(err, errResizeVol, name, pool, c.conn.Address())
}

// VolumePhysicalBytes returns the size of the volume's file on the host
// (st_size of a file; a qcow2's file size, not its virtual size), in one RPC.
func (c *Client) VolumePhysicalBytes(ctx context.Context, pool, name string) (uint64, error) {
	var n uint64
	err := c.do(ctx, func(l rpc) error {
		var err error
		_, _, n, err = l.StorageVolGetInfoFlags(handle(pool, name), uint32(golibvirt.StorageVolGetPhysical))
		return err
	})
	return n, errors.Wrapf(err, errLookupVol, name, pool, c.conn.Address())
}

// withPoolLock runs fn holding the process-wide lock of the pool, retrying
// while libvirt says the pool is busy.
func (c *Client) withPoolLock(ctx context.Context, pool string, fn func(l rpc) error) error {
	unlock, err := c.sh.lockPool(ctx, c.poolKey(pool))
	if err != nil {
		return err
	}
	defer unlock()
	return retryBusy(ctx, func() error { return c.do(ctx, fn) })
}

// CreateVolume creates a volume from libvirt volume XML (see VolumeXML) in
// an active pool. IsExists tells that a volume of that name exists.
func (c *Client) CreateVolume(ctx context.Context, pool, xml string) (Volume, error) {
	name := "?"
	var x libvirtxml.StorageVolume
	if err := x.Unmarshal(xml); err == nil {
		name = x.Name
	}
	var v Volume
	err := c.withPoolLock(ctx, pool, func(l rpc) error {
		sp, err := c.activePool(l, pool)
		if err != nil {
			return err
		}
		sv, err := l.StorageVolCreateXML(sp, xml, 0)
		if err != nil {
			return err
		}
		v, err = volume(l, pool, sv)
		return err
	})
	return v, errors.Wrapf(err, errCreateVol, name, pool, c.conn.Address())
}

// DeleteVolume deletes a volume. A volume (or pool) that is already gone
// is success.
func (c *Client) DeleteVolume(ctx context.Context, pool, name string) error {
	err := c.withPoolLock(ctx, pool, func(l rpc) error {
		sp, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		sv, err := l.StorageVolLookupByName(sp, name)
		if err != nil {
			return err
		}
		return l.StorageVolDelete(sv, golibvirt.StorageVolDeleteNormal)
	})
	if IsNotFound(err) {
		return nil
	}
	return errors.Wrapf(err, errDeleteVol, name, pool, c.conn.Address())
}

// RefreshPool makes libvirt rescan an active pool; for a dir pool it probes
// every file's format and size again.
func (c *Client) RefreshPool(ctx context.Context, pool string) error {
	err := c.withPoolLock(ctx, pool, func(l rpc) error {
		sp, err := c.activePool(l, pool)
		if err != nil {
			return err
		}
		return l.StoragePoolRefresh(sp, 0)
	})
	return errors.Wrapf(err, errRefreshPool, pool, c.conn.Address())
}

// ctxReader fails reads once ctx has ended, which makes go-libvirt abort
// the stream.
type ctxReader struct {
	ctx context.Context // bounds one stream
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := context.Cause(r.ctx); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// doStream runs a streaming call. When ctx ends the stream should end by
// itself (the reader fails, go-libvirt aborts the stream); Do only closes
// the connection if that takes longer than the grace period.
func (c *Client) doStream(ctx context.Context, fn func(l rpc) error) error {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(c.grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-dctx.Done():
		}
	})
	defer stop()
	err := c.do(dctx, fn)
	if err != nil && ctx.Err() != nil {
		return errors.Wrapf(context.Cause(ctx), errStreamAbort, err)
	}
	return err
}

// Upload writes r into an existing volume from offset 0. length is the
// number of bytes r yields, or 0 when unknown (then r is read to EOF). A
// read error of r aborts the stream and is returned. When ctx ends the
// stream is aborted and the error wraps ctx's cause.
//
// When the Client's Conn is a Dialer, the upload runs on a libvirt connection of its own (see
// ownConn), so that neither a stuck upload nor its cancellation touches the host's shared
// connection, and nothing done to the shared connection (a reconnect, a stuck call's
// connection torn down) cuts the upload.
func (c *Client) Upload(ctx context.Context, pool, name string, r io.Reader, length uint64) error {
	// An upload that libvirt stops reading ends after UploadIdleTimeout (watchUpload).
	ctx, r, stop := watchUpload(ctx, r, c.uploadIdle, c.uploadIdle/10)
	defer stop()
	upload := func(l rpc) error {
		sp, err := c.activePool(l, pool)
		if err != nil {
			return err
		}
		sv, err := l.StorageVolLookupByName(sp, name)
		if err != nil {
			return err
		}
		return l.StorageVolUpload(sv, ctxReader{ctx: ctx, r: r}, 0, length, 0)
	}
	var err error
	if d, ok := c.conn.(Dialer); ok {
		err = c.ownConn(ctx, d, c.grace, false, upload)
		if err != nil && ctx.Err() != nil {
			err = errors.Wrapf(context.Cause(ctx), errStreamAbort, err)
		}
	} else {
		err = c.doStream(ctx, upload)
	}
	return errors.Wrapf(err, errUploadVol, name, pool, c.conn.Address())
}

// DomainDisk is a file or block device a domain's disk uses, directly or
// as a backing file in the disk's chain as libvirt reports it.
type DomainDisk struct {
	Domain string
	// Target is the guest device name, e.g. vda.
	Target string
	// Path is the file or block device. For a disk whose source is a
	// storage volume, DomainDisks resolves the volume's path.
	Path string
	// Pool and Volume name a storage volume source.
	Pool, Volume string
	// Backing is true when Path is in the backing chain, not the disk's
	// own source.
	Backing bool
	// Device is the disk's device: disk, cdrom, floppy or lun.
	Device string
	// Format is the disk's driver type, e.g. qcow2 or raw; "" when the XML gives none.
	Format string
	// ChainKnown is true when the XML lists the disk's backing chain (libvirt does for a
	// running domain, with an empty backingStore for a disk without one); a shut-off
	// domain's XML usually does not.
	ChainKnown bool
}

// DomainDisks lists the disks of every domain, running or defined. A disk whose source is a
// storage volume gets the volume's path (three more calls per such disk; "" when it cannot be
// found).
func (c *Client) DomainDisks(ctx context.Context) ([]DomainDisk, error) {
	return c.domainDisks(ctx, true)
}

// DomainDiskSources lists the disks of every domain, running or defined, as their XML states
// them: a disk whose source is a storage volume has Pool and Volume, and no Path. It makes one
// call, and one per domain.
func (c *Client) DomainDiskSources(ctx context.Context) ([]DomainDisk, error) {
	return c.domainDisks(ctx, false)
}

// domainDisks lists the disks of every domain, resolving volume sources' paths if resolve.
func (c *Client) domainDisks(ctx context.Context, resolve bool) ([]DomainDisk, error) {
	var out []DomainDisk
	err := c.do(ctx, func(l rpc) error {
		// Read afresh, never remembered: a seed swapped in a running guest raises no
		// lifecycle event, and an in-use scan must never miss a disk.
		docs, err := allDomainXML(l)
		if err != nil {
			return err
		}
		for _, doc := range docs {
			disks, err := ParseDomainDisks(doc)
			if err != nil {
				return err
			}
			for i := range disks {
				if resolve && disks[i].Path == "" && disks[i].Volume != "" {
					disks[i].Path = volumePath(l, disks[i].Pool, disks[i].Volume)
				}
			}
			out = append(out, disks...)
		}
		return nil
	})
	return out, errors.Wrapf(err, errListDomains, c.conn.Address())
}

// ParseDomainDisks returns the files and block devices a domain XML's disks
// use, including their backing chains.
func ParseDomainDisks(doc string) ([]DomainDisk, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(doc); err != nil {
		return nil, errors.Wrapf(err, errParseDomain, "?")
	}
	if d.Devices == nil {
		return nil, nil
	}
	var out []DomainDisk
	for _, disk := range d.Devices.Disks {
		target := ""
		if disk.Target != nil {
			target = disk.Target.Dev
		}
		format := ""
		if disk.Driver != nil {
			format = disk.Driver.Type
		}
		if dd, ok := sourceDisk(disk.Source); ok {
			dd.Domain, dd.Target = d.Name, target
			dd.Device, dd.Format, dd.ChainKnown = disk.Device, format, disk.BackingStore != nil
			out = append(out, dd)
		}
		for b := disk.BackingStore; b != nil; b = b.BackingStore {
			if dd, ok := sourceDisk(b.Source); ok {
				dd.Domain, dd.Target, dd.Backing = d.Name, target, true
				out = append(out, dd)
			}
		}
	}
	return out, nil
}

func sourceDisk(s *libvirtxml.DomainDiskSource) (DomainDisk, bool) {
	switch {
	case s == nil:
		return DomainDisk{}, false
	case s.File != nil && s.File.File != "":
		return DomainDisk{Path: s.File.File}, true
	case s.Block != nil && s.Block.Dev != "":
		return DomainDisk{Path: s.Block.Dev}, true
	case s.Volume != nil && s.Volume.Volume != "":
		return DomainDisk{Pool: s.Volume.Pool, Volume: s.Volume.Volume}, true
	}
	return DomainDisk{}, false
}

// volumePath returns the path of a volume, or "" if it cannot be found.
func volumePath(l rpc, pool, name string) string {
	sp, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		return ""
	}
	sv, err := l.StorageVolLookupByName(sp, name)
	if err != nil {
		return ""
	}
	p, err := l.StorageVolGetPath(sv)
	if err != nil {
		return ""
	}
	return p
}

// VolumeInfo is what one cheap call tells of a volume: its sizes, a fingerprint that
// changes when the volume is resized, truncated, refilled or replaced by one of another size.
type VolumeInfo struct {
	CapacityBytes   uint64
	AllocationBytes uint64
}

// handle is the libvirt handle of a volume, made without a lookup: libvirtd resolves a volume
// by its pool's and its own name (the key is not used), so a gone volume or pool still fails
// with IsNotFound.
func handle(pool, name string) golibvirt.StorageVol {
	return golibvirt.StorageVol{Pool: pool, Name: name}
}

// VolumeInfo returns a volume's sizes in one RPC (libvirt re-reads a file volume's size
// first). IsNotFound tells a missing volume (or pool).
func (c *Client) VolumeInfo(ctx context.Context, pool, name string) (VolumeInfo, error) {
	var v VolumeInfo
	err := c.do(ctx, func(l rpc) error {
		var err error
		_, v.CapacityBytes, v.AllocationBytes, err = l.StorageVolGetInfo(handle(pool, name))
		return err
	})
	return v, errors.Wrapf(err, errLookupVol, name, pool, c.conn.Address())
}
