// Package fakestorage is an in-memory libvirt host for unit tests: storage pools whose volumes
// are byte slices, and the disks of domains. Errors are libvirt's own (so libvirt.IsNotFound
// and IsExists work), deleting a missing volume succeeds as with libvirt.Client, and every
// call is counted. It serves the calls of the ownership records, the SeedVolume and KVMDomain
// controllers and the image cache (imagecache.Host).
package fakestorage

import (
	"bytes"
	"context"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// Storage is an in-memory host with any number of pools.
type Storage struct {
	mu    sync.Mutex
	vols  map[string]*vol // pool "/" name
	Disks []libvirt.DomainDisk
	// Addr is the host's address (Address); "fake" when empty.
	Addr string
	// Inactive lists pools that exist but are not active: AllPools reports them, their
	// volumes cannot be listed.
	Inactive []string
	// NoTimestamps makes volumes report no mtime (Volume.ModifiedAt ""), as pools without
	// timestamps do.
	NoTimestamps bool
	// tick is the mtime of the next change: each create or upload advances it by a second.
	tick  int
	Calls map[string]int
	// Created holds the XML of each volume created, by pool "/" name.
	Created map[string]string
	// Fail, when set, is asked before each call; a non-nil error is returned instead.
	Fail func(op, pool, name string) error
	// Free is the free space of each pool (Pool's AvailableBytes); a pool not in it has 1 TiB.
	Free map[string]uint64
	// BeforeCreate, when set, runs before each CreateVolume (without the lock held), e.g. to
	// let another writer win a race.
	BeforeCreate func(pool, name string)
}

type vol struct {
	info libvirt.Volume
	data []byte
}

// New returns an empty Storage.
func New() *Storage {
	return &Storage{vols: map[string]*vol{}, Calls: map[string]int{}, Created: map[string]string{}}
}

// NotFound and Exists are libvirt's errors for a missing and an existing volume.
var (
	NotFound = golibvirt.Error{Code: uint32(golibvirt.ErrNoStorageVol), Message: "Storage volume not found"}
	Exists   = golibvirt.Error{Code: uint32(golibvirt.ErrStorageVolExist), Message: "storage volume already exists"}
)

func (s *Storage) call(op, pool, name string) error {
	s.Calls[op]++
	if s.Fail != nil {
		return s.Fail(op, pool, name)
	}
	return nil
}

// Put stores a volume with the given content.
func (s *Storage) Put(pool, name string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vols[pool+"/"+name] = &vol{info: info(pool, name, uint64(len(data))), data: append([]byte(nil), data...)}
	s.touch(s.vols[pool+"/"+name])
}

// PutOverlay stores a qcow2 volume that backs onto the file backingPath.
func (s *Storage) PutOverlay(pool, name, backingPath string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &vol{info: info(pool, name, 0), data: []byte{}}
	v.info.Format, v.info.BackingStorePath, v.info.BackingStoreFormat = "qcow2", backingPath, "qcow2"
	s.vols[pool+"/"+name] = v
	s.touch(v)
}

// Path is the path of volume name of pool on the fake host.
func Path(pool, name string) string { return "/pool/" + pool + "/" + name }

// touch advances the volume's mtime, as a write does on a host with timestamps.
func (s *Storage) touch(v *vol) {
	s.tick++
	v.info.ModifiedAt = ""
	if !s.NoTimestamps {
		v.info.ModifiedAt = strconv.Itoa(s.tick) + ".0"
	}
}

// Get returns a volume's content and whether it exists.
func (s *Storage) Get(pool, name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), v.data...), true
}

// Names lists the volumes of pool.
func (s *Storage) Names(pool string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, v := range s.vols {
		if v.info.Pool == pool {
			out = append(out, v.info.Name)
		}
	}
	return out
}

func info(pool, name string, capacity uint64) libvirt.Volume {
	return libvirt.Volume{Pool: pool, Name: name, Key: Path(pool, name), Path: Path(pool, name),
		Type: "file", Format: "raw", CapacityBytes: capacity}
}

// Volume looks a volume up.
func (s *Storage) Volume(_ context.Context, pool, name string) (libvirt.Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Volume", pool, name); err != nil {
		return libvirt.Volume{}, err
	}
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		return libvirt.Volume{}, NotFound
	}
	vi := v.info
	vi.AllocationBytes = allocation(v.data)
	return vi, nil
}

// allocation is a file's: its content rounded up to 4 KiB blocks.
func allocation(data []byte) uint64 { return (uint64(len(data)) + 4095) / 4096 * 4096 }

// VolumeInfo returns a volume's capacity and allocation (its content rounded up to 4 KiB
// blocks, as a file's).
func (s *Storage) VolumeInfo(_ context.Context, pool, name string) (libvirt.VolumeInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("VolumeInfo", pool, name); err != nil {
		return libvirt.VolumeInfo{}, err
	}
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		return libvirt.VolumeInfo{}, NotFound
	}
	return libvirt.VolumeInfo{CapacityBytes: v.info.CapacityBytes, AllocationBytes: allocation(v.data)}, nil
}

// CreateVolume creates a volume from its XML; it fails with Exists when the name is taken.
func (s *Storage) CreateVolume(_ context.Context, pool, x string) (libvirt.Volume, error) {
	sv := &libvirtxml.StorageVolume{}
	if err := sv.Unmarshal(x); err != nil {
		return libvirt.Volume{}, err
	}
	if s.BeforeCreate != nil {
		s.BeforeCreate(pool, sv.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("CreateVolume", pool, sv.Name); err != nil {
		return libvirt.Volume{}, err
	}
	if _, ok := s.vols[pool+"/"+sv.Name]; ok {
		return libvirt.Volume{}, Exists
	}
	var c uint64
	if sv.Capacity != nil {
		c = sv.Capacity.Value
	}
	v := &vol{info: info(pool, sv.Name, c), data: make([]byte, 0)}
	if sv.Target != nil && sv.Target.Format != nil {
		v.info.Format = sv.Target.Format.Type
	}
	if b := sv.BackingStore; b != nil {
		v.info.BackingStorePath = b.Path
		if b.Format != nil {
			v.info.BackingStoreFormat = b.Format.Type
		}
	}
	s.touch(v)
	s.vols[pool+"/"+sv.Name] = v
	s.Created[pool+"/"+sv.Name] = x
	return v.info, nil
}

// Upload replaces a volume's content with what r yields up to its end, as libvirt's stream
// does, keeping the first length bytes (0: all).
func (s *Storage) Upload(_ context.Context, pool, name string, r io.Reader, length uint64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if length > 0 && uint64(len(b)) > length {
		b = b[:length]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Upload", pool, name); err != nil {
		return err
	}
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		return NotFound
	}
	v.data = b
	s.touch(v)
	if uint64(len(b)) > v.info.CapacityBytes {
		v.info.CapacityBytes = uint64(len(b))
	}
	return nil
}

// Download writes length bytes from offset (0: to the end).
func (s *Storage) Download(_ context.Context, pool, name string, w io.Writer, offset, length uint64) error {
	s.mu.Lock()
	if err := s.call("Download", pool, name); err != nil {
		s.mu.Unlock()
		return err
	}
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		s.mu.Unlock()
		return NotFound
	}
	b := v.data
	s.mu.Unlock()
	if offset > uint64(len(b)) {
		offset = uint64(len(b))
	}
	b = b[offset:]
	if length > 0 && length < uint64(len(b)) {
		b = b[:length]
	}
	_, err := io.Copy(w, bytes.NewReader(b))
	return err
}

// DeleteVolume deletes a volume; one already gone is success, as with libvirt.Client.
func (s *Storage) DeleteVolume(_ context.Context, pool, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("DeleteVolume", pool, name); err != nil {
		return err
	}
	delete(s.vols, pool+"/"+name)
	return nil
}

// ResizeVolume sets a volume's capacity.
func (s *Storage) ResizeVolume(_ context.Context, pool, name string, size uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("ResizeVolume", pool, name); err != nil {
		return err
	}
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		return NotFound
	}
	v.info.CapacityBytes = size
	if uint64(len(v.data)) > size {
		v.data = v.data[:size]
	}
	return nil
}

// DomainDisks returns Disks.
func (s *Storage) DomainDisks(context.Context) ([]libvirt.DomainDisk, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("DomainDisks", "", ""); err != nil {
		return nil, err
	}
	return append([]libvirt.DomainDisk(nil), s.Disks...), nil
}

// DomainDiskSources returns Disks as their domains' XML states them: without the Path of a
// disk whose source is a volume (Volume set).
func (s *Storage) DomainDiskSources(context.Context) ([]libvirt.DomainDisk, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("DomainDiskSources", "", ""); err != nil {
		return nil, err
	}
	out := append([]libvirt.DomainDisk(nil), s.Disks...)
	for i := range out {
		if out[i].Volume != "" {
			out[i].Path = ""
		}
	}
	return out, nil
}

// VolumeNames lists the volumes of pool, sorted.
func (s *Storage) VolumeNames(_ context.Context, pool string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("VolumeNames", pool, ""); err != nil {
		return nil, err
	}
	var out []string
	for _, v := range s.vols {
		if v.info.Pool == pool {
			out = append(out, v.info.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Address returns Addr, or "fake".
func (s *Storage) Address() string {
	if s.Addr == "" {
		return "fake"
	}
	return s.Addr
}

// VolumePhysicalBytes returns the size of the volume's content (a file's st_size).
func (s *Storage) VolumePhysicalBytes(_ context.Context, pool, name string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("VolumePhysicalBytes", pool, name); err != nil {
		return 0, err
	}
	v, ok := s.vols[pool+"/"+name]
	if !ok {
		return 0, NotFound
	}
	return uint64(len(v.data)), nil
}

// RefreshPool does nothing but count the call (and fail as Fail says).
func (s *Storage) RefreshPool(_ context.Context, pool string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.call("RefreshPool", pool, "")
}

// Volumes lists the volumes of pool, sorted by name; an inactive pool fails.
func (s *Storage) Volumes(_ context.Context, pool string) ([]libvirt.Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Volumes", pool, ""); err != nil {
		return nil, err
	}
	if slices.Contains(s.Inactive, pool) {
		return nil, golibvirt.Error{Code: uint32(golibvirt.ErrOperationInvalid), Message: "storage pool '" + pool + "' is not active"}
	}
	var out []libvirt.Volume
	for _, v := range s.vols {
		if v.info.Pool == pool {
			vi := v.info
			vi.AllocationBytes = allocation(v.data)
			out = append(out, vi)
		}
	}
	slices.SortFunc(out, func(a, b libvirt.Volume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// AllPools lists every pool that holds a volume (active) and the Inactive ones, by name.
func (s *Storage) AllPools(context.Context) ([]libvirt.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("AllPools", "", ""); err != nil {
		return nil, err
	}
	active := map[string]bool{}
	for _, v := range s.vols {
		active[v.info.Pool] = true
	}
	for _, p := range s.Inactive {
		active[p] = false
	}
	out := make([]libvirt.Pool, 0, len(active))
	for _, name := range slices.Sorted(maps.Keys(active)) {
		out = append(out, libvirt.Pool{Name: name, Type: "dir", Path: "/pool/" + name, Active: active[name]})
	}
	return out, nil
}

// Pool describes pool: active unless Inactive lists it, with Free's free space.
func (s *Storage) Pool(_ context.Context, pool string) (libvirt.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Pool", pool, ""); err != nil {
		return libvirt.Pool{}, err
	}
	free, ok := s.Free[pool]
	if !ok {
		free = 1 << 40
	}
	return libvirt.Pool{Name: pool, Type: "dir", Path: "/pool/" + pool, Active: !slices.Contains(s.Inactive, pool), AvailableBytes: free}, nil
}
