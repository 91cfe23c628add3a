package setup

import (
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// Shared is the state the managed controllers of one provider process share: the libvirt
// clients' pool locks and domain handles, and the image cache's memo, claim clock and base
// locks (which order a base image's removal against the overlays KVMDomains create). Make one
// per process with NewShared (controller.SetupGated does; so do tests that set controllers up)
// and hand it to every managed controller's Setup.
type Shared struct {
	Libvirt *libvirt.Shared
	Images  *imagecache.Shared
}

// NewShared returns the state of one process.
func NewShared() *Shared {
	return &Shared{Libvirt: libvirt.NewShared(), Images: imagecache.NewShared()}
}
