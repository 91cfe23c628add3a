package imagecache

import (
	"encoding/binary"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// qcow2Magic starts every qcow2 file: "QFI\xfb".
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// qcow2HeaderLen is the size of the version 2 header, the part we read.
const qcow2HeaderLen = 72

// qcow2Header is what we need of a qcow2 header.
type qcow2Header struct {
	Version           uint32
	BackingFileOffset uint64
	VirtualSize       uint64
	CryptMethod       uint32
}

// isQCOW2 is true when b starts with the qcow2 magic.
func isQCOW2(b []byte) bool {
	return len(b) >= 4 && b[0] == qcow2Magic[0] && b[1] == qcow2Magic[1] && b[2] == qcow2Magic[2] && b[3] == qcow2Magic[3]
}

// parseQCOW2Header reads the big-endian header fields of a qcow2 image from
// its first bytes.
func parseQCOW2Header(b []byte) (qcow2Header, error) {
	if !isQCOW2(b) {
		return qcow2Header{}, errors.New("the image does not start with the qcow2 magic")
	}
	if len(b) < qcow2HeaderLen {
		return qcow2Header{}, errors.Errorf("the image ends within its qcow2 header (%d bytes)", len(b))
	}
	h := qcow2Header{
		Version:           binary.BigEndian.Uint32(b[4:8]),
		BackingFileOffset: binary.BigEndian.Uint64(b[8:16]),
		VirtualSize:       binary.BigEndian.Uint64(b[24:32]),
		CryptMethod:       binary.BigEndian.Uint32(b[32:36]),
	}
	if h.Version != 2 && h.Version != 3 {
		return h, errors.Errorf("qcow2 version %d is not supported", h.Version)
	}
	if h.VirtualSize == 0 || h.VirtualSize > 1<<62 {
		return h, errors.Errorf("qcow2 virtual size %d is invalid", h.VirtualSize)
	}
	return h, nil
}

// checkFormat checks the first bytes of an image declared as f and returns
// its virtual size (0 for raw: the caller uses the byte count).
func checkFormat(f Format, head []byte) (int64, error) {
	if f.orDefault() == FormatRaw {
		if isQCOW2(head) {
			return 0, errors.New("the image is declared raw but is a qcow2 image; set format: qcow2")
		}
		return 0, nil
	}
	h, err := parseQCOW2Header(head)
	if err != nil {
		return 0, errors.Wrap(err, "the image is declared qcow2 but is not a valid qcow2 image; check the URL, or set format: raw if it is a raw disk image")
	}
	if h.BackingFileOffset != 0 {
		return 0, errors.New("the qcow2 image has a backing file; a base image must be self-contained")
	}
	if h.CryptMethod != 0 {
		return 0, errors.New("the qcow2 image is encrypted; encrypted base images are not supported")
	}
	return int64(h.VirtualSize), nil //nolint:gosec // bounded above
}
