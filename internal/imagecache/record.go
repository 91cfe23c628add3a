package imagecache

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// SchemaVersion of the Record JSON.
const SchemaVersion = 1

// recordKind tells our records from other JSON files.
const recordKind = "provider-kvm.crossplane.io/BaseImageVolume"

// Record states.
const (
	// RecordClaimed: the owner is uploading the data volume, or its upload
	// was cut; in a .claim volume.
	RecordClaimed = "claimed"
	// RecordRemoving: the owner is removing the data volume; in a .claim
	// volume.
	RecordRemoving = "removing"
	// RecordPublished: the data volume is complete and verified; in a .meta
	// volume.
	RecordPublished = "published"
	// RecordOwner: the owner (a BaseImage) uses the data volume; in its .owner-HASH volume
	// (OwnerName). It also records what that BaseImage asked for (SourceURL,
	// ExpectedSHA256, Format) and, when it downloaded the bytes itself, FinalURL.
	RecordOwner = "owner"
)

// maxRecordBytes bounds a record's size when it is read.
const maxRecordBytes = 64 << 10

// Record is the JSON kept in a marker (.meta) or claim (.claim) volume.
type Record struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
	State  string `json:"state"`
	// Volume is the data volume the record is about.
	Volume string `json:"volume"`
	Owner  Owner  `json:"owner"`
	// Holder names the provider process that wrote a claim (see claimRenew); "" in records
	// of releases before claim leases.
	Holder string `json:"holder,omitempty"`
	// SourceURL is the URL asked for (password redacted); FinalURL the one
	// the bytes came from after redirects.
	SourceURL string `json:"sourceURL"`
	FinalURL  string `json:"finalURL,omitempty"`
	// ExpectedSHA256 is the digest the owner asked for, if any.
	ExpectedSHA256 string `json:"expectedSHA256,omitempty"`
	// SHA256 is the digest computed while uploading.
	SHA256 string `json:"sha256,omitempty"`
	// Verified is true when SHA256 was checked against ExpectedSHA256.
	Verified bool   `json:"verified"`
	Format   Format `json:"format"`
	// SizeBytes is the size of the image file.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// VirtualSizeBytes is the disk size the image presents to a guest.
	VirtualSizeBytes int64     `json:"virtualSizeBytes,omitempty"`
	Time             time.Time `json:"time"`
}

// Encode returns r as JSON.
func (r Record) Encode() ([]byte, error) {
	r.Schema, r.Kind = SchemaVersion, recordKind
	b, err := json.Marshal(r)
	return append(b, '\n'), errors.Wrap(err, "cannot encode volume record")
}

// DecodeRecord parses a record. An error means the record is unusable:
// torn, empty, not ours, or of a newer schema. The returned record may still
// name an owner (when the JSON parsed) so that the caller can check it.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	b = bytes.TrimRight(b, "\x00")
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, errors.Wrap(err, "record is not valid JSON")
	}
	if r.Kind != recordKind {
		return r, errors.Errorf("record kind is %q, want %q", r.Kind, recordKind)
	}
	if r.Schema != SchemaVersion {
		return r, errors.Errorf("record schema version %d is not supported (want %d)", r.Schema, SchemaVersion)
	}
	if r.Owner.UID == "" {
		return r, errors.New("record names no owner")
	}
	switch r.State {
	case RecordClaimed, RecordRemoving, RecordOwner:
	case RecordPublished:
		if len(r.SHA256) != 64 || !isLowerHex(r.SHA256) {
			return r, errors.Errorf("published record has invalid sha256 %q", r.SHA256)
		}
		if r.SizeBytes <= 0 || r.VirtualSizeBytes <= 0 {
			return r, errors.New("published record has no size")
		}
		if r.Format != FormatQCOW2 && r.Format != FormatRaw {
			return r, errors.Errorf("published record has invalid format %q", r.Format)
		}
	default:
		return r, errors.Errorf("record state %q is unknown", r.State)
	}
	return r, nil
}
