package imagecache

import (
	"fmt"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// DigestMismatchError says the downloaded bytes do not hash to the expected
// sha256. It is terminal: retrying the same URL gives the same bytes.
type DigestMismatchError struct {
	URL  string
	Want string
	Got  string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("the image downloaded from %s has sha256 %s, but spec.forProvider.source.sha256 is %s; nothing was published. "+
		"Check that the URL serves the image you meant (a mirror may serve a newer release under the same name) and set source.sha256 to its published digest, or point the URL at the exact release whose digest you gave",
		e.URL, e.Got, e.Want)
}

// IsDigestMismatch is true when err is a *DigestMismatchError.
func IsDigestMismatch(err error) bool {
	var e *DigestMismatchError
	return errors.As(err, &e)
}

// OwnedByOtherError says a volume belongs to another BaseImage.
type OwnedByOtherError struct {
	Pool   string
	Volume string
	Owner  Owner
}

func (e *OwnedByOtherError) Error() string {
	return fmt.Sprintf("volume %s in pool %s belongs to BaseImage %s; two BaseImages cannot share an image: use that BaseImage, or give this one a different source", e.Volume, e.Pool, e.Owner)
}

// IsOwnedByOther is true when err is an *OwnedByOtherError.
func IsOwnedByOther(err error) bool {
	var e *OwnedByOtherError
	return errors.As(err, &e)
}

// InUseError says a base volume cannot be removed because overlays or
// domains use it.
type InUseError struct {
	Pool   string
	Volume string
	Users  []string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("volume %s in pool %s is in use by %s; it is removed once nothing uses it", e.Volume, e.Pool, strings.Join(e.Users, ", "))
}

// IsInUse is true when err is an *InUseError.
func IsInUse(err error) bool {
	var e *InUseError
	return errors.As(err, &e)
}

// FormatError says the image bytes do not match the declared format, or are
// a kind of image that cannot be a base. It is terminal.
type FormatError struct {
	URL    string
	Reason string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("the image at %s cannot be used: %s; nothing was published", e.URL, e.Reason)
}

// IsFormatError is true when err is a *FormatError.
func IsFormatError(err error) bool {
	var e *FormatError
	return errors.As(err, &e)
}

// HTTPStatusError says the image server answered with an error status.
type HTTPStatusError struct {
	URL        string
	StatusCode int
	Status     string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("cannot download the image: GET %s answered %s", e.URL, e.Status)
}

// IsTerminal is true for errors that retrying with the same source cannot
// fix: a digest mismatch, an unusable format, or an HTTP 4xx other than
// 408 and 429.
func IsTerminal(err error) bool {
	if IsDigestMismatch(err) || IsFormatError(err) {
		return true
	}
	var h *HTTPStatusError
	if errors.As(err, &h) {
		return h.StatusCode >= 400 && h.StatusCode < 500 && h.StatusCode != 408 && h.StatusCode != 429
	}
	return false
}
