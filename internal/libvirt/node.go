package libvirt

import (
	"context"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
)

// The host-wide reads of a host status: the node, every domain's statistics, a pool's figures
// and its volume names. Each says how many RPCs it makes.

const (
	errNodeInfo     = "cannot read the node information of %s"
	errFreeMemory   = "cannot read the free memory of %s"
	errDomainStats  = "cannot read the domain statistics of %s"
	errDomainMeta   = "cannot read the metadata of domain %q on %s"
	errPoolUsage    = "cannot read storage pool %q on %s"
	kibibyte        = 1024
	versionMajorDiv = 1_000_000
)

// NodeInfo is what libvirt tells of a host that changes only when its daemon restarts.
type NodeInfo struct {
	// LibvirtVersion and HypervisorVersion are major*1e6 + minor*1e3 + micro.
	LibvirtVersion, HypervisorVersion uint64
	// CPUs is the number of logical CPUs.
	CPUs int32
	// MemoryBytes is the host's memory.
	MemoryBytes uint64
}

// Version formats a libvirt version number (major*1e6 + minor*1e3 + micro) as major.minor.micro.
func Version(v uint64) string {
	if v == 0 {
		return ""
	}
	return uitoa(v/versionMajorDiv) + "." + uitoa(v/1000%1000) + "." + uitoa(v%1000)
}

func uitoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; v > 0; v /= 10 {
		i--
		b[i] = byte('0' + v%10)
	}
	return string(b[i:])
}

// NodeInfo reads the libvirt and hypervisor versions and the host's CPUs and memory: three
// RPCs (ConnectGetLibVersion, ConnectGetVersion, NodeGetInfo).
func (c *Client) NodeInfo(ctx context.Context) (NodeInfo, error) {
	var n NodeInfo
	err := c.do(ctx, func(l rpc) error {
		var err error
		if n.LibvirtVersion, err = l.ConnectGetLibVersion(); err != nil {
			return err
		}
		if n.HypervisorVersion, err = l.ConnectGetVersion(); err != nil {
			return err
		}
		var memKiB uint64
		if memKiB, n.CPUs, err = l.NodeGetInfo(); err != nil {
			return err
		}
		n.MemoryBytes = memKiB * kibibyte
		return nil
	})
	return n, errors.Wrapf(err, errNodeInfo, c.conn.Address())
}

// FreeMemory returns the host's free memory in bytes, summed over its NUMA cells as
// `virsh freecell --all` does: one RPC (NodeGetFreeMemory).
func (c *Client) FreeMemory(ctx context.Context) (uint64, error) {
	var n uint64
	err := c.do(ctx, func(l rpc) error {
		var err error
		n, err = l.NodeGetFreeMemory()
		return err
	})
	return n, errors.Wrapf(err, errFreeMemory, c.conn.Address())
}

// DomainStat is one domain's state and size, from its statistics.
type DomainStat struct {
	// Handle is the domain's handle (name and UUID): calls made with it need no lookup.
	Handle golibvirt.Domain
	// Active is true for a running, paused or shutting-down domain.
	Active bool
	// State is libvirt's state of the domain, as KVMDomain status names it (StateName).
	State string
	// VCPUs the definition gives the guest (vcpu.maximum).
	VCPUs uint32
	// MemoryBytes the definition gives the guest (balloon.maximum).
	MemoryBytes uint64
}

// Name is the domain's name.
func (d DomainStat) Name() string { return d.Handle.Name }

// UUID is the domain's UUID in its text form.
func (d DomainStat) UUID() string { return uuidString(d.Handle.UUID) }

// DomainStats reads the state, vCPUs and memory of every domain, running or defined, in one
// RPC (ConnectGetAllDomainStats), without waiting for a busy domain's monitor.
func (c *Client) DomainStats(ctx context.Context) ([]DomainStat, error) {
	var out []DomainStat
	err := c.do(ctx, func(l rpc) error {
		recs, err := l.ConnectGetAllDomainStats(
			uint32(golibvirt.DomainStatsState|golibvirt.DomainStatsVCPU|golibvirt.DomainStatsBalloon),
			// Nowait: a domain whose QEMU is busy with a job (or stuck) reports what its
			// definition says without waiting for its monitor.
			uint32(golibvirt.ConnectGetAllDomainsStatsActive|golibvirt.ConnectGetAllDomainsStatsInactive|golibvirt.ConnectGetAllDomainsStatsNowait))
		if err != nil {
			return err
		}
		out = make([]DomainStat, 0, len(recs))
		for _, r := range recs {
			out = append(out, domainStat(r))
		}
		return nil
	})
	return out, errors.Wrapf(err, errDomainStats, c.conn.Address())
}

// domainStat reads one record of ConnectGetAllDomainStats.
func domainStat(r golibvirt.DomainStatsRecord) DomainStat {
	d := DomainStat{Handle: r.Dom}
	for _, p := range r.Params {
		v, ok := paramUint(p.Value)
		if !ok {
			continue
		}
		switch p.Field {
		case "state.state":
			s := golibvirt.DomainState(v)
			d.State = StateName(s)
			d.Active = s != golibvirt.DomainShutoff && s != golibvirt.DomainNostate && s != golibvirt.DomainCrashed
		case "vcpu.maximum":
			d.VCPUs = uint32(v)
		case "balloon.maximum":
			d.MemoryBytes = v * kibibyte
		}
	}
	return d
}

// paramUint is a typed parameter's numeric value.
func paramUint(v golibvirt.TypedParamValue) (uint64, bool) {
	switch x := v.I.(type) {
	case int32:
		return uint64(max(x, 0)), true
	case uint32:
		return uint64(x), true
	case int64:
		return uint64(max(x, 0)), true
	case uint64:
		return x, true
	}
	return 0, false
}

// DomainMetadata returns the metadata element of namespace uri of the domain with handle d
// (from DomainStats), or "" when it has none: one RPC (DomainGetMetadata), no lookup.
func (c *Client) DomainMetadata(ctx context.Context, d golibvirt.Domain, uri string) (string, error) {
	var out string
	err := c.do(ctx, func(l rpc) error {
		var err error
		out, err = l.DomainGetMetadata(d, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{uri}, golibvirt.DomainAffectCurrent)
		if hasCode(err, golibvirt.ErrNoDomainMetadata) {
			out, err = "", nil
		}
		return err
	})
	return out, errors.Wrapf(err, errDomainMeta, d.Name, c.conn.Address())
}

// PoolUsage is a pool's figures and the names of its volumes.
type PoolUsage struct {
	// Handle is the pool's handle (name and UUID), to pass to the next PoolUsage.
	Handle golibvirt.StoragePool
	Pool
	// Volumes are the names of its volumes (none for an inactive pool).
	Volumes []string
}

// PoolUsage reads a pool's state, capacity, allocation and available bytes and lists its
// volumes' names: two RPCs (StoragePoolGetInfo, StoragePoolListAllVolumes; one for an inactive
// pool) given the handle of an earlier PoolUsage, one more (StoragePoolLookupByName) without
// one or when the pool was replaced since. IsNotFound tells a missing pool.
func (c *Client) PoolUsage(ctx context.Context, name string, known *golibvirt.StoragePool) (PoolUsage, error) {
	var out PoolUsage
	err := c.do(ctx, func(l rpc) error {
		var (
			sp                     golibvirt.StoragePool
			state                  uint8
			capacity, alloc, avail uint64
			err                    error
		)
		if known != nil && known.Name == name {
			sp = *known
			state, capacity, alloc, avail, err = l.StoragePoolGetInfo(sp)
		}
		if known == nil || known.Name != name || IsNotFound(err) {
			if sp, err = l.StoragePoolLookupByName(name); err != nil {
				return err
			}
			state, capacity, alloc, avail, err = l.StoragePoolGetInfo(sp)
		}
		if err != nil {
			return err
		}
		out.Handle = sp
		out.Pool = Pool{Name: name, UUID: uuidString(sp.UUID),
			Active:        golibvirt.StoragePoolState(state) == golibvirt.StoragePoolRunning,
			CapacityBytes: capacity, AllocationBytes: alloc, AvailableBytes: avail}
		if !out.Active {
			return nil
		}
		svs, _, err := l.StoragePoolListAllVolumes(sp, 1, 0)
		if err != nil {
			return err
		}
		out.Volumes = make([]string, 0, len(svs))
		for _, sv := range svs {
			out.Volumes = append(out.Volumes, sv.Name)
		}
		return nil
	})
	return out, errors.Wrapf(err, errPoolUsage, name, c.conn.Address())
}

// ConnectGetVersion is go-libvirt's ConnectGetVersion, counted.
func (r rpc) ConnectGetVersion() (uint64, error) {
	if err := r.send("ConnectGetVersion"); err != nil {
		return 0, err
	}
	return r.l.ConnectGetVersion()
}

// NodeGetInfo is go-libvirt's NodeGetInfo, counted; it returns the memory in KiB and the CPUs.
func (r rpc) NodeGetInfo() (uint64, int32, error) {
	if err := r.send("NodeGetInfo"); err != nil {
		return 0, 0, err
	}
	_, mem, cpus, _, _, _, _, _, err := r.l.NodeGetInfo()
	return mem, cpus, err
}

// NodeGetFreeMemory is go-libvirt's NodeGetFreeMemory, counted.
func (r rpc) NodeGetFreeMemory() (uint64, error) {
	if err := r.send("NodeGetFreeMemory"); err != nil {
		return 0, err
	}
	return r.l.NodeGetFreeMemory()
}

// ConnectGetAllDomainStats is go-libvirt's ConnectGetAllDomainStats for every domain, counted.
func (r rpc) ConnectGetAllDomainStats(stats, flags uint32) ([]golibvirt.DomainStatsRecord, error) {
	if err := r.send("ConnectGetAllDomainStats"); err != nil {
		return nil, err
	}
	return r.l.ConnectGetAllDomainStats(nil, stats, flags)
}

// DomainGetMetadata is go-libvirt's DomainGetMetadata, counted.
func (r rpc) DomainGetMetadata(d golibvirt.Domain, typ int32, uri golibvirt.OptString, flags golibvirt.DomainModificationImpact) (string, error) {
	if err := r.send("DomainGetMetadata"); err != nil {
		return "", err
	}
	return r.l.DomainGetMetadata(d, typ, uri, flags)
}
