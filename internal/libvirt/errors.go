package libvirt

import (
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
)

// libvirtError returns the libvirt error in err's chain.
func libvirtError(err error) (golibvirt.Error, bool) {
	var le golibvirt.Error
	if errors.As(err, &le) {
		return le, true
	}
	var lep *golibvirt.Error
	if errors.As(err, &lep) && lep != nil {
		return *lep, true
	}
	return golibvirt.Error{}, false
}

// Code returns libvirt's error code carried by err, if any.
func Code(err error) (golibvirt.ErrorNumber, bool) {
	le, ok := libvirtError(err)
	return golibvirt.ErrorNumber(le.Code), ok
}

func hasCode(err error, codes ...golibvirt.ErrorNumber) bool {
	c, ok := Code(err)
	if !ok {
		return false
	}
	for _, want := range codes {
		if c == want {
			return true
		}
	}
	return false
}

// IsNotFound is true when err says the storage volume, storage pool, domain
// or network does not exist.
func IsNotFound(err error) bool {
	return hasCode(err, golibvirt.ErrNoStorageVol, golibvirt.ErrNoStoragePool, golibvirt.ErrNoDomain, golibvirt.ErrNoNetwork)
}

// IsExists is true when err says the storage volume, domain or network
// already exists.
func IsExists(err error) bool {
	return hasCode(err, golibvirt.ErrStorageVolExist, golibvirt.ErrDomExist, golibvirt.ErrNetworkExist)
}

// IsPoolBusy is true when libvirt refused a call because the pool has
// asynchronous jobs running (a volume is being built) or the volume is still
// being allocated. Such calls succeed when retried later.
func IsPoolBusy(err error) bool {
	le, ok := libvirtError(err)
	if !ok {
		return false
	}
	msg := le.Message
	switch golibvirt.ErrorNumber(le.Code) {
	case golibvirt.ErrInternalError, golibvirt.ErrOperationInvalid, golibvirt.ErrResourceBusy:
		return strings.Contains(msg, "asynchronous jobs running") ||
			strings.Contains(msg, "is still being allocated")
	}
	return false
}
