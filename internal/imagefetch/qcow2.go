package imagefetch

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// qcow2Magic starts every qcow2 file: "QFI\xfb".
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// Sizes of the qcow2 header (docs/interop/qcow2.txt in QEMU).
const (
	qcow2V2HeaderLen = 72  // version 2: the header ends after snapshots_offset
	qcow2V3HeaderLen = 104 // version 3: at least up to header_length
	// qcow2 cluster sizes QEMU accepts: 512 bytes to 2 MiB.
	qcow2MinClusterBits = 9
	qcow2MaxClusterBits = 21
	// refcount_order: refcounts of 1 to 64 bits.
	qcow2MaxRefcountOrder = 6
)

// qcow2 incompatible feature bits; an image with a bit set that an implementation does not
// know must not be opened.
const (
	qcow2Dirty           = 0 // refcounts may be inconsistent: needs a repair before use
	qcow2Corrupt         = 1 // QEMU found corruption: must not be used
	qcow2ExternalData    = 2 // guest data lives in another file, named in a header extension
	qcow2CompressionType = 3 // compression_type (byte 104) is not zlib
	qcow2ExtendedL2      = 4 // subclusters
)

// qcow2Incompatible names the known incompatible feature bits and says why a base image may
// not use them ("" when it may).
var qcow2Incompatible = map[int]struct{ name, refusal string }{
	qcow2Dirty:           {"dirty", "its refcounts were not written back (the image was not closed cleanly); run qemu-img check -r all on it and publish the repaired image"},
	qcow2Corrupt:         {"corrupt", "QEMU marked it corrupt; an image marked corrupt must not boot"},
	qcow2ExternalData:    {"external data file", "its data lives in another file, which the provider does not download; a base image must be self-contained"},
	qcow2CompressionType: {"compression type", ""},
	qcow2ExtendedL2:      {"extended L2 entries", ""},
}

// qcow2Compression names the values of compression_type.
var qcow2Compression = map[byte]string{0: "zlib", 1: "zstd"}

// qcow2Header is the fixed qcow2 header. Version 2 images have no fields after
// SnapshotsOffset; they read as zero, with RefcountOrder 4 and HeaderLength 72.
type qcow2Header struct {
	Version               uint32
	BackingFileOffset     uint64
	BackingFileSize       uint32
	ClusterBits           uint32
	VirtualSize           uint64
	CryptMethod           uint32
	L1Size                uint32
	L1TableOffset         uint64
	RefcountTableOffset   uint64
	RefcountTableClusters uint32
	NbSnapshots           uint32
	SnapshotsOffset       uint64

	// Version 3.
	IncompatibleFeatures uint64
	CompatibleFeatures   uint64
	AutoclearFeatures    uint64
	RefcountOrder        uint32
	HeaderLength         uint32
	CompressionType      byte
}

// isQCOW2 is true when b starts with the qcow2 magic.
func isQCOW2(b []byte) bool {
	return len(b) >= 4 && b[0] == qcow2Magic[0] && b[1] == qcow2Magic[1] && b[2] == qcow2Magic[2] && b[3] == qcow2Magic[3]
}

// parseQCOW2Header reads the big-endian fixed header of a qcow2 image, version 2 or 3, from
// its first bytes and checks that its fields are consistent. It does not judge features; see
// checkQCOW2.
func parseQCOW2Header(b []byte) (qcow2Header, error) {
	if !isQCOW2(b) {
		return qcow2Header{}, errors.New("the image does not start with the qcow2 magic")
	}
	if len(b) < qcow2V2HeaderLen {
		return qcow2Header{}, errors.Errorf("the image ends within its qcow2 header (%d bytes)", len(b))
	}
	be := binary.BigEndian
	h := qcow2Header{
		Version:               be.Uint32(b[4:8]),
		BackingFileOffset:     be.Uint64(b[8:16]),
		BackingFileSize:       be.Uint32(b[16:20]),
		ClusterBits:           be.Uint32(b[20:24]),
		VirtualSize:           be.Uint64(b[24:32]),
		CryptMethod:           be.Uint32(b[32:36]),
		L1Size:                be.Uint32(b[36:40]),
		L1TableOffset:         be.Uint64(b[40:48]),
		RefcountTableOffset:   be.Uint64(b[48:56]),
		RefcountTableClusters: be.Uint32(b[56:60]),
		NbSnapshots:           be.Uint32(b[60:64]),
		SnapshotsOffset:       be.Uint64(b[64:72]),
		RefcountOrder:         4,
		HeaderLength:          qcow2V2HeaderLen,
	}
	if h.ClusterBits < qcow2MinClusterBits || h.ClusterBits > qcow2MaxClusterBits {
		return h, errors.Errorf("qcow2 cluster_bits %d is invalid: QEMU accepts %d to %d", h.ClusterBits, qcow2MinClusterBits, qcow2MaxClusterBits)
	}
	switch h.Version {
	case 2:
	case 3:
		if err := parseQCOW2V3(&h, b); err != nil {
			return h, err
		}
	default:
		return h, errors.Errorf("qcow2 version %d is not supported", h.Version)
	}
	if h.RefcountOrder > qcow2MaxRefcountOrder {
		return h, errors.Errorf("qcow2 refcount_order %d is invalid: at most %d", h.RefcountOrder, qcow2MaxRefcountOrder)
	}
	if h.VirtualSize == 0 || h.VirtualSize > 1<<62 {
		return h, errors.Errorf("qcow2 virtual size %d is invalid", h.VirtualSize)
	}
	return h, nil
}

// parseQCOW2V3 reads the fields version 3 adds to the header into h, and checks the header's
// length.
func parseQCOW2V3(h *qcow2Header, b []byte) error {
	if len(b) < qcow2V3HeaderLen {
		return errors.Errorf("the image ends within its qcow2 version 3 header (%d bytes)", len(b))
	}
	be := binary.BigEndian
	h.IncompatibleFeatures = be.Uint64(b[72:80])
	h.CompatibleFeatures = be.Uint64(b[80:88])
	h.AutoclearFeatures = be.Uint64(b[88:96])
	h.RefcountOrder = be.Uint32(b[96:100])
	h.HeaderLength = be.Uint32(b[100:104])
	if h.HeaderLength < qcow2V3HeaderLen || h.HeaderLength%8 != 0 {
		return errors.Errorf("qcow2 header_length %d is invalid: version 3 needs at least %d, a multiple of 8", h.HeaderLength, qcow2V3HeaderLen)
	}
	if uint64(h.HeaderLength) > 1<<h.ClusterBits {
		return errors.Errorf("qcow2 header_length %d exceeds the cluster size %d", h.HeaderLength, 1<<h.ClusterBits)
	}
	if h.HeaderLength > qcow2V3HeaderLen {
		if uint64(len(b)) < uint64(h.HeaderLength) {
			return errors.Errorf("the image ends within its qcow2 header of %d bytes (%d bytes)", h.HeaderLength, len(b))
		}
		h.CompressionType = b[104]
	}
	return nil
}

// checkQCOW2 refuses what a base image may not be: an image with a backing file (its data is
// elsewhere), an encrypted one, one that needs an incompatible feature a base cannot use
// (dirty, corrupt, external data file) or one this provider does not know.
func checkQCOW2(h qcow2Header) error {
	if h.BackingFileOffset != 0 {
		return errors.New("the qcow2 image has a backing file; a base image must be self-contained")
	}
	if h.CryptMethod != 0 {
		return errors.Errorf("the qcow2 image is encrypted (crypt_method %d); encrypted base images are not supported", h.CryptMethod)
	}
	var refusals []string
	for f := h.IncompatibleFeatures; f != 0; f &= f - 1 {
		bit := bits.TrailingZeros64(f)
		k, known := qcow2Incompatible[bit]
		switch {
		case !known:
			refusals = append(refusals, fmt.Sprintf("unknown incompatible feature bit %d: a newer qcow2 feature this provider cannot check", bit))
		case k.refusal != "":
			refusals = append(refusals, fmt.Sprintf("incompatible feature %q (bit %d): %s", k.name, bit, k.refusal))
		}
	}
	if len(refusals) > 0 {
		return errors.New("the qcow2 image has " + strings.Join(refusals, "; "))
	}
	if h.IncompatibleFeatures&(1<<qcow2CompressionType) != 0 || h.CompressionType != 0 {
		if _, ok := qcow2Compression[h.CompressionType]; !ok {
			return errors.Errorf("the qcow2 image has unknown compression_type %d", h.CompressionType)
		}
	}
	return nil
}

// checkFormat checks the first bytes of an image declared as f and returns
// its virtual size (0 for raw: the caller uses the byte count).
func checkFormat(f Format, head []byte) (int64, error) {
	if f.OrDefault() == FormatRaw {
		if isQCOW2(head) {
			return 0, errors.New("the image is declared raw but is a qcow2 image; set format: qcow2")
		}
		return 0, nil
	}
	h, err := parseQCOW2Header(head)
	if err != nil {
		return 0, errors.Wrap(err, "the image is declared qcow2 but is not a valid qcow2 image; check the URL, or set format: raw if it is a raw disk image")
	}
	if err := checkQCOW2(h); err != nil {
		return 0, err
	}
	return int64(h.VirtualSize), nil
}
