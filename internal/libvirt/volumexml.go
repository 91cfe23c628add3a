package libvirt

import (
	"math"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"libvirt.org/go/libvirtxml"
)

// Volume formats the provider creates.
const (
	FormatRaw   = "raw"
	FormatQCOW2 = "qcow2"
)

// VolumeSpec describes a storage volume to create.
type VolumeSpec struct {
	// Name of the volume in its pool; a file name in a dir pool.
	Name string
	// Format is raw or qcow2.
	Format string
	// CapacityBytes is the size the volume presents (a qcow2's virtual size).
	// A raw volume in a dir pool is a sparse file of this size; 0 makes an
	// empty file that an upload grows.
	CapacityBytes uint64
	// AllocationBytes is how much to allocate up front; 0 for a sparse volume.
	AllocationBytes uint64
	// BackingStorePath makes a qcow2 overlay on this file.
	BackingStorePath string
	// BackingStoreFormat is the backing file's format. It is required with
	// BackingStorePath: libvirt must never probe a backing file's format.
	BackingStoreFormat string
}

// Volume is a storage volume as libvirt describes it.
type Volume struct {
	Pool string
	Name string
	Key  string
	// Path of the volume on the host.
	Path string
	// Type is libvirt's volume type: file, block, dir, ...
	Type string
	// Format is the target format: raw, qcow2, ... For a dir pool libvirt
	// probes it from the file's contents when the pool is refreshed.
	Format string
	// CapacityBytes is the size the volume presents to a guest (a qcow2's
	// virtual size).
	CapacityBytes uint64
	// AllocationBytes is the space the volume uses on the host.
	AllocationBytes uint64
	// BackingStorePath is the volume's backing file, if any.
	BackingStorePath   string
	BackingStoreFormat string
	// ModifiedAt is the file's mtime as libvirt reports it (seconds.nanoseconds since the
	// epoch, on the host's clock), "" when the pool's volumes have no timestamps. It is
	// compared only with earlier readings of the same volume, never with the local clock.
	ModifiedAt string
}

const (
	errVolName       = "volume name %q is invalid: it must be non-empty and contain no '/'"
	errVolFormat     = "volume %q: format %q is not supported: use raw or qcow2"
	errBackingFormat = "volume %q: a backing store needs its format (raw or qcow2); libvirt must not probe it"
	errBackingQCOW2  = "volume %q: only a qcow2 volume can have a backing store"
	errMarshalVol    = "cannot build XML for volume %q"
	errParseVol      = "cannot parse volume XML"
	errParseSize     = "volume %q: cannot read %s"
)

// VolumeXML returns the libvirt XML that creates the volume s describes. It is
// pure: it only validates and formats.
func VolumeXML(s VolumeSpec) (string, error) {
	if s.Name == "" || strings.ContainsRune(s.Name, '/') || s.Name == "." || s.Name == ".." {
		return "", errors.Errorf(errVolName, s.Name)
	}
	if s.Format != FormatRaw && s.Format != FormatQCOW2 {
		return "", errors.Errorf(errVolFormat, s.Name, s.Format)
	}
	v := libvirtxml.StorageVolume{
		Name:       s.Name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: s.CapacityBytes},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: s.AllocationBytes},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: s.Format}},
	}
	if s.BackingStorePath != "" {
		if s.Format != FormatQCOW2 {
			return "", errors.Errorf(errBackingQCOW2, s.Name)
		}
		if s.BackingStoreFormat != FormatRaw && s.BackingStoreFormat != FormatQCOW2 {
			return "", errors.Errorf(errBackingFormat, s.Name)
		}
		v.BackingStore = &libvirtxml.StorageVolumeBackingStore{
			Path:   s.BackingStorePath,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: s.BackingStoreFormat},
		}
	}
	out, err := v.Marshal()
	return out, errors.Wrapf(err, errMarshalVol, s.Name)
}

// ParseVolumeXML reads the volume XML libvirt returns for a volume of pool.
func ParseVolumeXML(pool, doc string) (Volume, error) {
	var x libvirtxml.StorageVolume
	if err := x.Unmarshal(doc); err != nil {
		return Volume{}, errors.Wrap(err, errParseVol)
	}
	v := Volume{Pool: pool, Name: x.Name, Key: x.Key, Type: x.Type}
	var err error
	if v.CapacityBytes, err = sizeBytes(x.Capacity); err != nil {
		return Volume{}, errors.Wrapf(err, errParseSize, x.Name, "capacity")
	}
	if v.AllocationBytes, err = sizeBytes(x.Allocation); err != nil {
		return Volume{}, errors.Wrapf(err, errParseSize, x.Name, "allocation")
	}
	if t := x.Target; t != nil {
		v.Path = t.Path
		if t.Format != nil {
			v.Format = t.Format.Type
		}
		if t.Timestamps != nil {
			v.ModifiedAt = t.Timestamps.Mtime
		}
	}
	if b := x.BackingStore; b != nil {
		v.BackingStorePath = b.Path
		if b.Format != nil {
			v.BackingStoreFormat = b.Format.Type
		}
	}
	return v, nil
}

// unitScale maps libvirt's size units to bytes (see libvirt's "scaled
// integer": k/K/KiB are 1024, KB is 1000, and so on).
var unitScale = map[string]uint64{
	"": 1, "b": 1, "bytes": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
	"e": 1 << 60, "eib": 1 << 60, "eb": 1e18,
}

func sizeBytes(s *libvirtxml.StorageVolumeSize) (uint64, error) {
	if s == nil {
		return 0, nil
	}
	scale, ok := unitScale[strings.ToLower(s.Unit)]
	if !ok {
		return 0, errors.Errorf("unknown unit %q", s.Unit)
	}
	if s.Value > math.MaxUint64/scale {
		return 0, errors.Errorf("%d %s overflows", s.Value, s.Unit)
	}
	return s.Value * scale, nil
}
