// Package domainxml builds the libvirt domain XML of a KVMDomain and reads back the ownership
// mark it carries. It is pure: no I/O, so it is tested without a host.
//
// The domain is a q35 machine with:
//   - firmware: UEFI (libvirt picks OVMF and manages the NVRAM, secure boot and enrolled keys
//     off) or SeaBIOS;
//   - the root disk: a qcow2 overlay volume on virtio;
//   - the cloud-init seed as a read-only cdrom on virtio-scsi (Debian's cloud kernels have no
//     AHCI driver, so a SATA cdrom on q35 is invisible to them);
//   - one virtio NIC on a libvirt network or a host bridge, with a stable MAC;
//   - the qemu guest agent channel, a serial console logged to a file, and virtio-rng;
//   - a <metadata> element in our own XML namespace naming the managed resource that owns it.
package domainxml

import (
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// Namespace is the XML namespace of our ownership metadata.
const Namespace = "https://kvm.crossplane.io/xmlns/owner/v1"

// ManagedBy is the value of the ownership mark's managedBy element.
const ManagedBy = "provider-kvm"

// Firmwares.
const (
	FirmwareUEFI = "uefi"
	FirmwareBIOS = "bios"
)

const (
	errNoName      = "domain name is empty"
	errNoOwner     = "owner UID is empty: every domain we define carries its owner"
	errNoDisk      = "no root disk volume"
	errFirmware    = "unknown firmware %q: must be uefi or bios"
	errDomainType  = "unknown domain type %q: must be kvm or qemu"
	errNetwork     = "set exactly one of network or bridge"
	errMarshal     = "cannot render domain XML"
	errUnmarshal   = "cannot parse domain XML"
	errBadMetadata = "cannot parse the ownership metadata"
)

// Owner is the ownership mark: which managed resource a domain belongs to.
type Owner struct {
	XMLName        xml.Name `xml:"https://kvm.crossplane.io/xmlns/owner/v1 owner"`
	ManagedBy      string   `xml:"managedBy"`
	UID            string   `xml:"uid"`
	Namespace      string   `xml:"namespace"`
	Name           string   `xml:"name"`
	ProviderConfig string   `xml:"providerConfig,omitempty"`
	// ClusterID names the management cluster of the KVMDomain (the provider's --cluster-id;
	// "" when it has none): another cluster's orphan sweep leaves the domain alone.
	ClusterID string `xml:"clusterID,omitempty"`
	// BaseVolume and SeedSHA256 record what the domain was defined from, so a later change of
	// its BaseImage or SeedVolume can be reported.
	BaseVolume string `xml:"baseVolume,omitempty"`
	SeedSHA256 string `xml:"seedSHA256,omitempty"`
}

// Volume names a storage volume in a pool.
type Volume struct {
	Pool, Name string
}

// Spec is everything the domain XML is built from.
type Spec struct {
	Name string
	// UUID keeps a redefined domain the same domain; empty lets libvirt choose one.
	UUID      string
	Type      string // kvm or qemu
	VCPU      uint
	MemoryMiB uint
	CPUMode   string // empty: host-passthrough for kvm, libvirt's default for qemu
	Firmware  string // uefi or bios

	RootDisk Volume
	Seed     *Volume // nil: no seed cdrom

	Network string // a libvirt network, or
	Bridge  string // a host bridge
	MAC     string

	// ConsoleLog is the file the serial console is logged to on the host.
	ConsoleLog string

	Owner Owner
}

// Domain renders the domain XML for s.
func Domain(s Spec) (string, error) {
	switch {
	case s.Name == "":
		return "", errors.New(errNoName)
	case s.Owner.UID == "":
		return "", errors.New(errNoOwner)
	case s.RootDisk.Pool == "" || s.RootDisk.Name == "":
		return "", errors.New(errNoDisk)
	case (s.Network == "") == (s.Bridge == ""):
		return "", errors.New(errNetwork)
	}
	if s.Type != "kvm" && s.Type != "qemu" {
		return "", errors.Errorf(errDomainType, s.Type)
	}

	owner := s.Owner
	owner.ManagedBy = ManagedBy
	meta, err := xml.Marshal(owner)
	if err != nil {
		return "", errors.Wrap(err, errMarshal)
	}

	d := &libvirtxml.Domain{
		Type:     s.Type,
		Name:     s.Name,
		UUID:     s.UUID,
		Metadata: &libvirtxml.DomainMetadata{XML: string(meta)},
		Memory:   &libvirtxml.DomainMemory{Value: s.MemoryMiB, Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Placement: "static", Value: s.VCPU},
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "q35", Type: "hvm"},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features: &libvirtxml.DomainFeatureList{
			ACPI: &libvirtxml.DomainFeature{},
			APIC: &libvirtxml.DomainFeatureAPIC{},
		},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices:    devices(s),
	}
	switch s.Firmware {
	case FirmwareUEFI, "":
		d.OS.Firmware = "efi"
		d.OS.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{
			{Name: "enrolled-keys", Enabled: "no"},
			{Name: "secure-boot", Enabled: "no"},
		}}
	case FirmwareBIOS:
	default:
		return "", errors.Errorf(errFirmware, s.Firmware)
	}
	switch {
	case s.CPUMode != "":
		d.CPU = &libvirtxml.DomainCPU{Mode: s.CPUMode}
	case s.Type == "kvm":
		d.CPU = &libvirtxml.DomainCPU{Mode: "host-passthrough"}
	}

	out, err := d.Marshal()
	return out, errors.Wrap(err, errMarshal)
}

func devices(s Spec) *libvirtxml.DomainDeviceList {
	dev := &libvirtxml.DomainDeviceList{
		Controllers: []libvirtxml.DomainController{{Type: "scsi", Model: "virtio-scsi"}},
		Disks: []libvirtxml.DomainDisk{{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap", DetectZeros: "unmap"},
			Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.RootDisk.Pool, Volume: s.RootDisk.Name}},
			Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
		}},
		Interfaces: []libvirtxml.DomainInterface{{
			MAC:   &libvirtxml.DomainInterfaceMAC{Address: s.MAC},
			Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		}},
		Channels: []libvirtxml.DomainChannel{{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
		}},
		Serials: []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainSerialTarget{Port: new(uint)},
		}},
		Consoles: []libvirtxml.DomainConsole{{
			Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: new(uint)},
		}},
		RNGs: []libvirtxml.DomainRNG{{
			Model:   "virtio",
			Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
		}},
	}
	if s.ConsoleLog != "" {
		dev.Serials[0].Log = &libvirtxml.DomainChardevLog{File: s.ConsoleLog, Append: "on"}
	}
	if s.Seed != nil {
		dev.Disks = append(dev.Disks, libvirtxml.DomainDisk{
			Device:   "cdrom",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.Seed.Pool, Volume: s.Seed.Name}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "scsi"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		})
	}
	if s.Network != "" {
		dev.Interfaces[0].Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network}}
	} else {
		dev.Interfaces[0].Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: s.Bridge}}
	}
	return dev
}

// OwnerOf returns the ownership mark in a domain's XML, or nil when it has none.
func OwnerOf(domainXML string) (*Owner, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return nil, errors.Wrap(err, errUnmarshal)
	}
	if d.Metadata == nil || !strings.Contains(d.Metadata.XML, Namespace) {
		return nil, nil
	}
	// The metadata may hold other applications' elements next to ours.
	dec := xml.NewDecoder(strings.NewReader("<m>" + d.Metadata.XML + "</m>"))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, errors.Wrap(err, errBadMetadata)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Space != Namespace || se.Name.Local != "owner" {
			continue
		}
		o := &Owner{}
		if err := dec.DecodeElement(o, &se); err != nil {
			return nil, errors.Wrap(err, errBadMetadata)
		}
		return o, nil
	}
}

// MACOf returns the MAC address of a domain's first network interface, or "" when it has
// none. An imported domain reports its own address, not one derived from the resource.
func MACOf(domainXML string) (string, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return "", errors.Wrap(err, errUnmarshal)
	}
	if d.Devices == nil {
		return "", nil
	}
	for _, i := range d.Devices.Interfaces {
		if i.MAC != nil && i.MAC.Address != "" {
			return strings.ToLower(i.MAC.Address), nil
		}
	}
	return "", nil
}

// MAC derives a stable, locally administered unicast MAC address from a resource UID, in
// QEMU's 52:54:00 range so it looks familiar to operators.
func MAC(uid string) string {
	h := sha256.Sum256([]byte("provider-kvm/mac/" + uid))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
}

// Size is the CPU and memory a domain definition gives its guest.
type Size struct {
	VCPU      uint
	MemoryMiB uint
}

// SizeOf reads the vcpu count and memory of a domain XML.
func SizeOf(domainXML string) (Size, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return Size{}, errors.Wrap(err, errUnmarshal)
	}
	var s Size
	if d.VCPU != nil {
		s.VCPU = d.VCPU.Value
	}
	if d.Memory != nil {
		s.MemoryMiB = uint(toKiB(d.Memory.Value, d.Memory.Unit) / 1024)
	}
	return s, nil
}

// toKiB converts a libvirt memory value to KiB (libvirt's default unit).
func toKiB(v uint, unit string) uint64 {
	switch strings.ToLower(unit) {
	case "b", "bytes":
		return uint64(v) / 1024
	case "m", "mib":
		return uint64(v) * 1024
	case "g", "gib":
		return uint64(v) << 20
	case "t", "tib":
		return uint64(v) << 30
	case "mb":
		return uint64(v) * 1000 * 1000 / 1024
	case "gb":
		return uint64(v) * 1000 * 1000 * 1000 / 1024
	case "kb":
		return uint64(v) * 1000 / 1024
	default: // k, KiB, or empty
		return uint64(v)
	}
}

// SeedOf returns the volume the domain's seed cdrom reads (its first cdrom whose source is a
// pool volume), or nil when it has none.
func SeedOf(domainXML string) (*Volume, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return nil, errors.Wrap(err, errUnmarshal)
	}
	if c := seedDisk(d); c != nil {
		return &Volume{Pool: c.Source.Volume.Pool, Name: c.Source.Volume.Volume}, nil
	}
	return nil, nil
}

func seedDisk(d *libvirtxml.Domain) *libvirtxml.DomainDisk {
	if d.Devices == nil {
		return nil
	}
	for i, c := range d.Devices.Disks {
		if c.Device == "cdrom" && c.Source != nil && c.Source.Volume != nil {
			return &d.Devices.Disks[i]
		}
	}
	return nil
}

// SeedDisk returns the <disk> element of the seed cdrom of a domain XML (as Domain builds it),
// for changing the medium of a running domain; "" when it has none.
func SeedDisk(domainXML string) (string, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return "", errors.Wrap(err, errUnmarshal)
	}
	c := seedDisk(d)
	if c == nil {
		return "", nil
	}
	x, err := c.Marshal()
	return x, errors.Wrap(err, errMarshal)
}

// MACTaken is true when a domain among defs (domain XML documents), other than the one whose
// ownership mark names uid, has an interface with mac. Domains without our mark count too:
// a guest must not take the address of any guest on the host.
func MACTaken(defs []string, mac, uid string) (bool, error) {
	for _, doc := range defs {
		d := &libvirtxml.Domain{}
		if err := d.Unmarshal(doc); err != nil {
			return false, errors.Wrap(err, errUnmarshal)
		}
		if d.Devices == nil {
			continue
		}
		if o, err := OwnerOf(doc); err == nil && o != nil && o.UID == uid {
			continue
		}
		for _, i := range d.Devices.Interfaces {
			if i.MAC != nil && strings.EqualFold(i.MAC.Address, mac) {
				return true, nil
			}
		}
	}
	return false, nil
}

// AttachmentOf returns the libvirt network or the host bridge the interface with mac (the
// first interface when mac is empty) of a domain XML is attached to; both "" when it has none
// or another kind of interface.
func AttachmentOf(domainXML, mac string) (network, bridge string, err error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return "", "", errors.Wrap(err, errUnmarshal)
	}
	if d.Devices == nil {
		return "", "", nil
	}
	for _, i := range d.Devices.Interfaces {
		if mac != "" && (i.MAC == nil || !strings.EqualFold(i.MAC.Address, mac)) {
			continue
		}
		switch s := i.Source; {
		case s == nil:
		case s.Network != nil:
			return s.Network.Network, "", nil
		case s.Bridge != nil:
			return "", s.Bridge.Bridge, nil
		}
		return "", "", nil
	}
	return "", "", nil
}

// ConsoleLogOf returns the file the domain's first serial console is logged to on the host,
// or "" when it logs to none.
func ConsoleLogOf(domainXML string) (string, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return "", errors.Wrap(err, errUnmarshal)
	}
	if d.Devices == nil || len(d.Devices.Serials) == 0 || d.Devices.Serials[0].Log == nil {
		return "", nil
	}
	return d.Devices.Serials[0].Log.File, nil
}
