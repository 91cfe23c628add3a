package imagecache

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// Format is the on-disk format of an image.
type Format string

// Formats.
const (
	FormatQCOW2 Format = "qcow2"
	FormatRaw   Format = "raw"
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

// Owner is the BaseImage that owns a volume.
type Owner struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
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
	NamePrefix   = "pkvm-base-"
	nameHexChars = 24
	MarkerSuffix = ".meta"
	ClaimSuffix  = ".claim"
)

func (f Format) orDefault() Format {
	if f == "" {
		return FormatQCOW2
	}
	return f
}

func (f Format) ext() string {
	if f.orDefault() == FormatRaw {
		return ".img"
	}
	return ".qcow2"
}

// VolumeName returns the content-addressed name of the data volume for src.
func VolumeName(src Source) string {
	h := sha256.Sum256([]byte(src.URL + "\n" + src.SHA256))
	return NamePrefix + hex.EncodeToString(h[:])[:nameHexChars] + src.Format.ext()
}

// MarkerName returns the name of the volume that marks volume published.
func MarkerName(volume string) string { return volume + MarkerSuffix }

// ClaimName returns the name of the volume that claims volume for its owner
// while it is uploaded or removed.
func ClaimName(volume string) string { return volume + ClaimSuffix }

// IsVolumeName is true for a data volume name VolumeName can return.
func IsVolumeName(name string) bool {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return false
	}
	var h string
	switch {
	case strings.HasSuffix(rest, ".qcow2"):
		h = strings.TrimSuffix(rest, ".qcow2")
	case strings.HasSuffix(rest, ".img"):
		h = strings.TrimSuffix(rest, ".img")
	default:
		return false
	}
	return len(h) == nameHexChars && isLowerHex(h)
}

// dataVolumeOf returns the data volume a marker, claim or data volume name
// belongs to.
func dataVolumeOf(name string) (string, bool) {
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
	if f := src.Format.orDefault(); f != FormatQCOW2 && f != FormatRaw {
		return errors.Errorf(errSourceFormat, src.Format)
	}
	return nil
}

// redactURL hides a password in a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}
