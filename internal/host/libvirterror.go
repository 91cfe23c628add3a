package host

import (
	"fmt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// LibvirtOpenError says the host was reached (SSH logged in, or the provider's own host for
// the Unix transport) but libvirt's connection could not be opened on it: libvirtd is stopped,
// its socket is missing or refuses the user, or it does not answer.
type LibvirtOpenError struct {
	// URI is the libvirt connection URI that was opened.
	URI string
	// Err is why.
	Err error
}

func (e *LibvirtOpenError) Error() string {
	return fmt.Sprintf(errOpenLibvirt+": %v", e.URI, e.Err)
}

// Unwrap returns why.
func (e *LibvirtOpenError) Unwrap() error { return e.Err }

// IsLibvirtOpenError reports whether err, or an error it wraps, is a *LibvirtOpenError.
func IsLibvirtOpenError(err error) bool {
	var e *LibvirtOpenError
	return errors.As(err, &e)
}
