package setup

import (
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/publishqueue"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// Shared is the state the managed controllers of one provider process share: the libvirt
// clients' pool locks and domain handles, and the image cache's memo, claim clock and base
// locks (which order a base image's removal against the overlays KVMDomains create). Make one
// per process with NewShared (controller.SetupGated does; so do tests that set controllers up)
// and hand it to every managed controller's Setup.
type Shared struct {
	Libvirt *libvirt.Shared
	Images  *imagecache.Shared
	// Platform is what the provider's flags set for every host config (read-only): the image
	// source policy namespaced ProviderConfigs narrow, and whether BaseImages must pin a
	// sha256.
	Platform sourcepolicy.Platform
	// PublishLimits bound the BaseImage publish jobs that run at once, in all, per host and
	// per namespace (--max-publish-jobs, --max-publish-jobs-per-host,
	// --max-publish-jobs-per-namespace); zero: no limit.
	PublishLimits publishqueue.Limits

	// ConsoleLogInPool logs new domains' serial consoles in their storage pool (a directory
	// pool), where the provider reads their end for a guest that is not Ready (the
	// --console-log-in-pool flag); else in libvirt's log directory.
	ConsoleLogInPool bool

	// ClusterID names the management cluster this provider serves (--cluster-id; "" for
	// none). The ownership records of what it makes on a host name it, and its sweeps and
	// counts leave the objects whose records name another cluster: two clusters may share a
	// host. It must be set before the controllers are.
	ClusterID string
}

// NewShared returns the state of one process, with the platform's settings pl (at most one;
// none: the zero Platform).
func NewShared(pl ...sourcepolicy.Platform) *Shared {
	s := &Shared{Libvirt: libvirt.NewShared(), Images: imagecache.NewShared()}
	if len(pl) > 0 {
		s.Platform = pl[0]
	}
	return s
}
