package imagecache

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/imagefetch"
)

// Format is the on-disk format of an image (imagefetch's).
type Format = imagefetch.Format

// Formats.
const (
	FormatQCOW2 = imagefetch.FormatQCOW2
	FormatRaw   = imagefetch.FormatRaw
)

// Source says where an image comes from.
type Source struct {
	// URL is an http or https URL. Redirects are followed.
	URL string
	// SHA256 is the expected digest, 64 lower-case hex digits, or empty
	// for an unverified image.
	SHA256 string
	// Format of the bytes; empty means qcow2.
	Format Format
}

// Owner is the BaseImage that owns a volume. ClusterID names the management cluster it is in
// (the provider's --cluster-id; "" in records of providers without one, or of releases before
// it): only that cluster's provider may take the owner for gone (see WithClusterID).
type Owner struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	ClusterID string `json:"clusterID,omitempty"`
}

// sameNamespace tells whether o and other are BaseImages of one namespace of one cluster.
func (o Owner) sameNamespace(other Owner) bool {
	return o.Namespace == other.Namespace && o.ClusterID == other.ClusterID
}

func (o Owner) String() string {
	if o.Name == "" {
		return "UID " + o.UID
	}
	return o.Namespace + "/" + o.Name + " (UID " + o.UID + ")"
}

// Volume name parts.
const (
	// NamePrefix starts every volume name this package creates.
	NamePrefix = "pkvm-base-"
	// legacyHexChars is the length of the hash in names of releases before shared images
	// (sha256 of url "\n" sha256); such volumes are still recognized, published and removed.
	legacyHexChars = 24
	MarkerSuffix   = ".meta"
	ClaimSuffix    = ".claim"
	// OwnerInfix joins a data volume's name and the hash of an owner's UID in the name of
	// that owner's record.
	OwnerInfix    = ".owner-"
	ownerHexChars = 32
	// unpinnedPrefix starts the external name of a BaseImage without sha256, whose volume
	// is known only once its bytes are hashed.
	unpinnedPrefix = "pkvm-unpinned-"
)

// ext is the file name extension of a volume of format f.
func ext(f Format) string {
	if f.OrDefault() == FormatRaw {
		return ".img"
	}
	return ".qcow2"
}

// VolumeName returns the content-addressed name of the data volume for a src with a
// SHA256: DigestVolumeName of it. For a src without one it is "": the volume is known only
// once the bytes were hashed (see Publish).
func VolumeName(src Source) string {
	if len(src.SHA256) != sha256.Size*2 || !isLowerHex(src.SHA256) {
		return "" // no digest (or not one: Validate says why); never a name from other input
	}
	return DigestVolumeName(src.SHA256, src.Format)
}

// DigestVolumeName is the data volume of the image whose bytes hash to sha256 in format: one
// per host, pool and digest, shared by every BaseImage that asks for those bytes.
func DigestVolumeName(sha256 string, f Format) string {
	return NamePrefix + sha256 + ext(f)
}

// ExternalName is the external name of a BaseImage with source src: its volume's name when
// src has a SHA256, else a name derived from the URL that names no volume (the volume is
// known once the bytes were hashed; status.atProvider.volumeName shows it).
func ExternalName(src Source) string {
	if v := VolumeName(src); v != "" {
		return v
	}
	h := sha256.Sum256([]byte(src.URL))
	return unpinnedPrefix + hex.EncodeToString(h[:])[:legacyHexChars] + ext(src.Format)
}

// OwnerName is the name of the record that makes the BaseImage with uid an owner of volume.
// It is derived from the UID (hashed: a UID is not a safe file name), so that each owner
// adds and removes its own record without reading or rewriting anyone else's.
func OwnerName(volume, uid string) string {
	h := sha256.Sum256([]byte(uid))
	return volume + OwnerInfix + hex.EncodeToString(h[:])[:ownerHexChars]
}

// ownerRecordOf returns the data volume an owner record name belongs to.
func ownerRecordOf(name string) (string, bool) {
	i := strings.LastIndex(name, OwnerInfix)
	if i < 0 {
		return "", false
	}
	h := name[i+len(OwnerInfix):]
	if len(h) != ownerHexChars || !isLowerHex(h) || !IsVolumeName(name[:i]) {
		return "", false
	}
	return name[:i], true
}

// MarkerName returns the name of the volume that marks volume published.
func MarkerName(volume string) string { return volume + MarkerSuffix }

// ClaimName returns the name of the volume that claims volume for its owner
// while it is uploaded or removed.
func ClaimName(volume string) string { return volume + ClaimSuffix }

// IsVolumeName is true for a data volume name VolumeName can return.
func IsVolumeName(name string) bool {
	h, ok := volumeHex(name)
	return ok && (len(h) == legacyHexChars || len(h) == sha256.Size*2)
}

// isDigestName is true for a data volume name DigestVolumeName returns, named by the image's
// whole sha256 (not one of an earlier release, named by 24 hex characters of a URL's hash,
// whatever its extension).
func isDigestName(name string) bool {
	h, ok := volumeHex(name)
	return ok && len(h) == sha256.Size*2
}

// volumeHex is the lower-hex part of a data volume name (NamePrefix, hex, .qcow2 or .img).
func volumeHex(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return "", false
	}
	var h string
	switch {
	case strings.HasSuffix(rest, ".qcow2"):
		h = strings.TrimSuffix(rest, ".qcow2")
	case strings.HasSuffix(rest, ".img"):
		h = strings.TrimSuffix(rest, ".img")
	default:
		return "", false
	}
	return h, isLowerHex(h)
}

// dataVolumeOf returns the data volume a marker, claim, owner record or data volume name
// belongs to.
func dataVolumeOf(name string) (string, bool) {
	if v, ok := ownerRecordOf(name); ok {
		return v, true
	}
	base := strings.TrimSuffix(strings.TrimSuffix(name, MarkerSuffix), ClaimSuffix)
	return base, IsVolumeName(base)
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

const (
	errSourceURL    = "source URL %q is invalid: it must be an absolute http or https URL"
	errSourceSHA    = "source sha256 %q is invalid: it must be 64 lower-case hex digits"
	errSourceFormat = "format %q is invalid: it must be qcow2 or raw"
	errNoOwnerUID   = "owner UID is empty"
)

// Validate checks src.
func (src Source) Validate() error {
	u, err := url.Parse(src.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.Errorf(errSourceURL, redactURL(src.URL))
	}
	if src.SHA256 != "" && (len(src.SHA256) != sha256.Size*2 || !isLowerHex(src.SHA256)) {
		return errors.Errorf(errSourceSHA, src.SHA256)
	}
	if f := src.Format.OrDefault(); f != FormatQCOW2 && f != FormatRaw {
		return errors.Errorf(errSourceFormat, src.Format)
	}
	return nil
}

// redactURL hides a password and the query of a URL (imagefetch.RedactURL).
func redactURL(s string) string { return imagefetch.RedactURL(s) }

// RedactURL is a URL as records, status and messages show it: without password and query
// (imagefetch.RedactURL).
func RedactURL(s string) string { return imagefetch.RedactURL(s) }
