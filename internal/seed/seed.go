// Package seed builds NoCloud (cloud-init) seed ISOs.
//
// A seed ISO is an ISO 9660 image labelled "cidata" whose root directory
// holds user-data, meta-data and, optionally, network-config and
// vendor-data. cloud-init's NoCloud datasource finds it by its label, mounts
// it and reads those files.
//
// The package never parses, re-renders or classifies user content: user-data,
// network-config and the user's vendor-data go into the image byte for byte.
//
// The image is written with github.com/kdomanski/iso9660 (no Joliet, no Rock
// Ridge). That library stores a file named "user-data" under the ISO 9660
// identifier "user-data;1"; the Linux isofs driver (default map=normal) drops
// the ";1" version suffix, so a mounted seed shows user-data, meta-data,
// network-config and vendor-data, which is what cloud-init opens.
//
// Builds are deterministic: the same Input always gives the same image bytes.
// The library stamps the primary volume descriptor with time.Now(); Build
// overwrites those three dates with the ECMA-119 "not specified" value (the
// value the library already writes for the expiration date). The remaining
// fields are fixed: file records carry the zero time, files are laid out in
// name order, and the system identifier is runtime.GOOS of the builder.
//
// The library stages files in a private temporary directory (os.MkdirTemp,
// mode 0700) while it writes the image; Build removes it before returning.
// That directory is the only I/O besides in-memory buffers.
//
// Errors never contain user content: user-data may hold secrets.
package seed

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/kdomanski/iso9660"
)

// VolumeLabel is the ISO 9660 volume identifier of a seed image. cloud-init's
// NoCloud datasource looks for a filesystem with this label.
const VolumeLabel = "cidata"

// Names of the files at the root of a seed image, as cloud-init sees them.
const (
	// FileUserData is the user-data file. It is always present.
	FileUserData = "user-data"
	// FileMetaData is the meta-data file. It is always present.
	FileMetaData = "meta-data"
	// FileNetworkConfig is the network-config file. It is present only
	// when Input.NetworkConfig is not nil.
	FileNetworkConfig = "network-config"
	// FileVendorData is the vendor-data file. It is present only when
	// VendorData returns content.
	FileVendorData = "vendor-data"
)

// DefaultUserData is written as user-data when Input.UserData is empty.
// NoCloud needs a user-data file, and an empty cloud-config mapping is the
// smallest content that cloud-init unambiguously reads as valid cloud-config
// doing nothing (an empty file has no type for cloud-init to recognise).
const DefaultUserData = "#cloud-config\n{}\n"

// Input is everything that goes into a seed image.
type Input struct {
	// InstanceID is written to meta-data as instance-id. cloud-init runs
	// its per-instance modules again whenever it changes.
	InstanceID string
	// Hostname is written to meta-data as local-hostname.
	Hostname string
	// UserData is written verbatim as user-data, whatever its format
	// (cloud-config, Jinja template, shell script, MIME multipart,
	// #include, ...). When empty, DefaultUserData is written instead.
	UserData []byte
	// NetworkConfig is written verbatim as network-config. When nil there
	// is no network-config file; an empty non-nil slice gives an empty
	// file.
	NetworkConfig []byte
	// VendorData is the user's vendor-data, written verbatim as
	// vendor-data unless InstallGuestAgent is also set (see VendorData).
	// When nil the user gives no vendor-data.
	VendorData []byte
	// InstallGuestAgent asks for a vendor-data script that installs and
	// starts qemu-guest-agent (see GuestAgentScript).
	InstallGuestAgent bool
}

// Seed is a built seed image.
type Seed struct {
	// ISO is the ISO 9660 image.
	ISO []byte
	// SHA256 is the lowercase hex SHA-256 digest of ISO.
	SHA256 string
	// Files maps each file name in the image, as cloud-init sees it
	// (FileUserData, ...), to the exact bytes written.
	Files map[string][]byte
}

// The file names above are passed to the iso9660 writer as they are: it
// appends the ISO 9660 version suffix ";1" itself and keeps the names
// otherwise unchanged, since they are lower case d1-characters. Passing
// "user-data;1" would give the identifier "user-data;1;1", which Linux shows
// as "user-data;1" (the library's own reader hides this by cutting at the
// first ';'). TestBuild checks the raw identifiers.

// Errors returned by Build when a required meta-data value is missing.
var (
	ErrNoInstanceID = errors.New("seed: instance ID is empty")
	ErrNoHostname   = errors.New("seed: hostname is empty")
)

// Build assembles the seed image for in. InstanceID and Hostname must not be
// empty. Build is safe for concurrent use, and its errors never contain
// Input content.
func Build(in Input) (*Seed, error) {
	if in.InstanceID == "" {
		return nil, ErrNoInstanceID
	}
	if in.Hostname == "" {
		return nil, ErrNoHostname
	}
	files, err := seedFiles(in)
	if err != nil {
		return nil, err
	}

	iso, err := writeISO(files)
	if err != nil {
		return nil, err
	}

	sum := sha256.Sum256(iso)
	return &Seed{ISO: iso, SHA256: hex.EncodeToString(sum[:]), Files: files}, nil
}

// seedFiles returns the files Build puts in the image for in, keyed by the
// name cloud-init sees.
func seedFiles(in Input) (map[string][]byte, error) {
	userData := in.UserData
	if len(userData) == 0 {
		userData = []byte(DefaultUserData)
	}

	files := map[string][]byte{
		FileUserData: bytes.Clone(userData),
		FileMetaData: MetaData(in.InstanceID, in.Hostname),
	}
	if in.NetworkConfig != nil {
		files[FileNetworkConfig] = bytes.Clone(in.NetworkConfig)
	}

	vd, err := VendorData(in)
	if err != nil {
		return nil, err
	}
	if vd != nil {
		files[FileVendorData] = vd
	}
	return files, nil
}

// MetaData renders the NoCloud meta-data file: a YAML mapping with
// instance-id and local-hostname. Values are emitted as JSON strings, which
// are valid YAML double-quoted scalars, so no value can change the document's
// structure or be read as another type.
func MetaData(instanceID, hostname string) []byte {
	var b bytes.Buffer
	b.WriteString("instance-id: ")
	b.Write(quote(instanceID))
	b.WriteString("\nlocal-hostname: ")
	b.Write(quote(hostname))
	b.WriteString("\n")
	return b.Bytes()
}

// quote renders s as a JSON string literal without HTML escaping.
func quote(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Encoding a string cannot fail.
	_ = enc.Encode(s) //nolint:errchkjson // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// writeISO writes files into an ISO 9660 image labelled VolumeLabel and pins
// the volume dates so that the image depends on files alone.
func writeISO(files map[string][]byte) (iso []byte, err error) {
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, errors.Wrap(err, "creating ISO writer")
	}
	defer func() {
		// The staging directory holds user-data, which may be secret:
		// failing to remove it is an error.
		if cerr := w.Cleanup(); cerr != nil && err == nil {
			iso, err = nil, errors.Wrap(cerr, "removing ISO staging directory")
		}
	}()

	size := 20 * sectorSize // system area, descriptors, root directory
	for name, content := range files {
		if err := w.AddFile(bytes.NewReader(content), name); err != nil {
			return nil, errors.Wrapf(err, "adding %s to ISO", name)
		}
		size += (len(content)/sectorSize + 1) * sectorSize
	}

	buf := bytes.NewBuffer(make([]byte, 0, size))
	if err := w.WriteTo(buf, VolumeLabel); err != nil {
		return nil, errors.Wrap(err, "writing ISO")
	}

	iso = buf.Bytes()
	if err := pinVolumeDates(iso); err != nil {
		return nil, err
	}
	return iso, nil
}

// ECMA-119 layout of the primary volume descriptor, the first volume
// descriptor after the 16-sector system area.
const (
	sectorSize = 2048
	pvdOffset  = 16 * sectorSize

	// Offsets within the descriptor (ECMA-119 8.4).
	pvdCreationDate     = 813 // 8.4.26, 17 bytes
	pvdModificationDate = 830 // 8.4.27, 17 bytes
	pvdEffectiveDate    = 864 // 8.4.29, 17 bytes
	pvdDateLen          = 17
)

// errNotPVD reports that the image does not start as written by the library.
var errNotPVD = errors.New("ISO writer did not produce a primary volume descriptor at sector 16")

// pinVolumeDates replaces the volume creation, modification and effective
// dates, which github.com/kdomanski/iso9660 v0.4.0 sets from time.Now(), with
// the ECMA-119 8.4.26.1 "not specified" date: sixteen '0' digits and a zero
// time zone offset.
func pinVolumeDates(iso []byte) error {
	if len(iso) < pvdOffset+sectorSize ||
		iso[pvdOffset] != 1 || string(iso[pvdOffset+1:pvdOffset+6]) != "CD001" {
		return errNotPVD
	}

	var unspecified [pvdDateLen]byte
	for i := range pvdDateLen - 1 {
		unspecified[i] = '0'
	}
	for _, off := range []int{pvdCreationDate, pvdModificationDate, pvdEffectiveDate} {
		copy(iso[pvdOffset+off:pvdOffset+off+pvdDateLen], unspecified[:])
	}
	return nil
}
