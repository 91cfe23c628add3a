package imagecache

import (
	"fmt"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/imagefetch"
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

// OwnedByOtherError says a volume that the caller does not own belongs to another BaseImage
// that still exists (a volume published before images were shared, whose marker names its
// one owner), or (Owner zero) to nobody we know: a data volume that no record names was never
// made by us. Its message never names the other BaseImage, which may be of another namespace.
type OwnedByOtherError struct {
	Pool   string
	Volume string
	Owner  Owner
}

func (e *OwnedByOtherError) Error() string {
	if e.Owner.UID == "" {
		return fmt.Sprintf("volume %s in pool %s exists without an ownership record: it was not made by provider-kvm, so it is never overwritten or deleted; remove it by hand if nothing uses it", e.Volume, e.Pool)
	}
	return fmt.Sprintf("volume %s in pool %s belongs to another BaseImage that still exists, and this one is not among its owners; it is left alone", e.Volume, e.Pool)
}

// IsOwnedByOther is true when err is an *OwnedByOtherError.
func IsOwnedByOther(err error) bool {
	var e *OwnedByOtherError
	return errors.As(err, &e)
}

// InUseError says a base volume cannot be removed because overlays or domains use it, or
// because that cannot be ruled out (Doubts say why). Its message is for the BaseImage of
// Namespace: it names that namespace's volumes and domains and counts those of others.
type InUseError struct {
	Pool   string
	Volume string
	// Users and Doubts as Usage has them; they may name other namespaces' objects, so only
	// Error's redacted view of them is ever shown.
	Users  []string
	Doubts []string
	// Namespace whose objects the message names; "" names none.
	Namespace string
}

func (e *InUseError) Error() string {
	v := viewUsage(Usage{Users: e.Users, Doubts: e.Doubts}, e.Namespace)
	if len(e.Users) > 0 {
		users := v.OwnUsers
		if v.OtherUsers > 0 {
			users = append(users[:len(users):len(users)], plural(v.OtherUsers, "disk")+" of other namespaces")
		}
		return fmt.Sprintf("volume %s in pool %s is in use by %s; it is removed once nothing uses it", e.Volume, e.Pool, strings.Join(users, ", "))
	}
	doubts := append(append([]string{}, v.OwnDoubts...), v.HostDoubts...)
	if v.OtherDoubts > 0 {
		doubts = append(doubts, plural(v.OtherDoubts, "disk")+" of other namespaces cannot be checked")
	}
	return fmt.Sprintf("volume %s in pool %s is kept: provider-kvm cannot rule out that an overlay backs onto it: %s; it is removed once that can be checked", e.Volume, e.Pool, strings.Join(doubts, "; "))
}

// ChangedError says an image given without sha256 hashed differently on the download that
// stored it than on the one that computed its digest: the server changed the file between
// the two. Nothing was published; it is worth retrying.
type ChangedError struct {
	URL           string
	First, Second string
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("the image at %s changed while it was being cached (sha256 %s, then %s); nothing was published, it is tried again. Set spec.forProvider.source.sha256 to pin the image you expect", e.URL, e.First, e.Second)
}

// IsInUse is true when err is an *InUseError.
func IsInUse(err error) bool {
	var e *InUseError
	return errors.As(err, &e)
}

// IsTerminal is true for errors that retrying with the same source (and the
// same policy) cannot fix: a digest mismatch, or a download's terminal error
// (imagefetch.IsTerminal: an unusable format, a destination the policy
// refuses, an image over the size limit, or an HTTP 4xx other than 408 and 429).
func IsTerminal(err error) bool {
	return IsDigestMismatch(err) || imagefetch.IsTerminal(err)
}

// The download's errors are imagefetch's; they keep their names here for callers.
type (
	// FormatError: see imagefetch.FormatError.
	FormatError = imagefetch.FormatError
	// HTTPStatusError: see imagefetch.HTTPStatusError.
	HTTPStatusError = imagefetch.HTTPStatusError
	// RefusedError: see imagefetch.RefusedError.
	RefusedError = imagefetch.RefusedError
	// LimitError: see imagefetch.LimitError.
	LimitError = imagefetch.LimitError
	// Limit: see imagefetch.Limit.
	Limit = imagefetch.Limit
)

// Limits a LimitError names.
const (
	LimitSize    = imagefetch.LimitSize
	LimitHeaders = imagefetch.LimitHeaders
	LimitStall   = imagefetch.LimitStall
)

// IsFormatError is true when err is a *FormatError.
func IsFormatError(err error) bool { return imagefetch.IsFormatError(err) }

// IsRefused is true when err is a *RefusedError.
func IsRefused(err error) bool { return imagefetch.IsRefused(err) }

// IsLimit is true when err is a *LimitError.
func IsLimit(err error) bool { return imagefetch.IsLimit(err) }
