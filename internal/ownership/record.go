// Package ownership keeps the ownership record of every storage volume the provider makes for
// a managed resource (seed ISOs, root disk overlays): a small raw companion volume
// "<volume>.owner" holding JSON that names the resource (kind, UID, namespace, name).
//
// The record is created (libvirt's create is exclusive) BEFORE its volume and deleted AFTER
// it, and written exactly once into a fresh volume, so a torn write can only give invalid
// JSON, never another owner. The provider resizes, uploads to or deletes a volume only after
// Verify found a record naming the acting resource; a volume without one is never touched.
// Base image volumes keep their own records (internal/imagecache); domains carry theirs in
// their <metadata> (internal/domainxml).
package ownership

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// SchemaVersion of the Record JSON.
const SchemaVersion = 1

// recordKind tells our records from other JSON.
const recordKind = "provider-kvm.crossplane.io/VolumeOwner"

// Suffix is appended to a volume's name to name its record volume.
const Suffix = ".owner"

// maxRecordBytes bounds how much of a record volume is read.
const maxRecordBytes = 16 << 10

// Owner names the managed resource a volume belongs to, and the management cluster it is in
// (the provider's --cluster-id; "" when the provider has none): the orphan sweep of a provider
// of another cluster sharing the host leaves the volume alone.
type Owner struct {
	Kind      string `json:"kind"`
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	ClusterID string `json:"clusterID,omitempty"`
}

func (o Owner) String() string {
	return fmt.Sprintf("%s %s/%s (UID %s)", o.Kind, o.Namespace, o.Name, o.UID)
}

// Record is the JSON kept in a record volume.
type Record struct {
	Schema int       `json:"schema"`
	Kind   string    `json:"kind"`
	Volume string    `json:"volume"`
	Owner  Owner     `json:"owner"`
	Time   time.Time `json:"time"`
}

// RecordVolume is the name of volume's record volume.
func RecordVolume(volume string) string { return volume + Suffix }

// Encode returns the record JSON naming o as the owner of volume.
func Encode(volume string, o Owner, now time.Time) ([]byte, error) {
	b, err := json.Marshal(Record{Schema: SchemaVersion, Kind: recordKind, Volume: volume, Owner: o, Time: now.UTC()})
	return append(b, '\n'), errors.Wrap(err, "cannot encode the ownership record")
}

// Decode parses a record. An error means it is unusable: torn, empty, not ours, or of a newer
// schema.
func Decode(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(bytes.TrimRight(b, "\x00"), &r); err != nil {
		return Record{}, errors.Wrap(err, "the ownership record is not valid JSON")
	}
	if r.Kind != recordKind {
		return Record{}, errors.Errorf("the ownership record's kind is %q, want %q", r.Kind, recordKind)
	}
	if r.Schema != SchemaVersion {
		return Record{}, errors.Errorf("the ownership record's schema version %d is not supported (want %d)", r.Schema, SchemaVersion)
	}
	if r.Owner.UID == "" || r.Volume == "" {
		return Record{}, errors.New("the ownership record names no owner or no volume")
	}
	return r, nil
}

// NotOwnedError says that a volume does not belong to the resource acting on it.
type NotOwnedError struct {
	Volume string
	Why    string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("volume %s is not owned by this resource (%s): refusing to change or delete it", e.Volume, e.Why)
}

// IsNotOwned is true when err is (or wraps) a NotOwnedError.
func IsNotOwned(err error) bool {
	var n *NotOwnedError
	return errors.As(err, &n)
}

// Check returns nil when r is the record of volume and names o (by UID; kind too).
func (r Record) Check(volume string, o Owner) error {
	switch {
	case r.Volume != volume:
		return &NotOwnedError{Volume: volume, Why: fmt.Sprintf("its ownership record is about volume %s", r.Volume)}
	case r.Owner.UID != o.UID || r.Owner.Kind != o.Kind:
		return &NotOwnedError{Volume: volume, Why: "it belongs to " + r.Owner.String()}
	}
	return nil
}
