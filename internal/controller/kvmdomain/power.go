package kvmdomain

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// shutdowns remembers when a graceful shutdown was requested, per KVMDomain.
type shutdowns struct {
	mu sync.Mutex
	m  map[types.UID]time.Time
}

// since returns how long ago a shutdown of uid was first requested, starting the clock now
// if it was not.
func (s *shutdowns) since(uid types.UID) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[uid]
	if !ok {
		s.m[uid] = time.Now()
		return 0, false
	}
	return time.Since(t), true
}

func (s *shutdowns) done(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, uid)
}

// powerOff asks the guest to shut down, and destroys it once shutdownGrace has passed.
func (e *external) powerOff(ctx context.Context, cr *v1alpha1.KVMDomain, name, state string) error {
	if state == libvirt.StateShutOff {
		e.shutdowns.done(cr.GetUID())
		return nil
	}
	waited, asked := e.shutdowns.since(cr.GetUID())
	if asked && waited > shutdownGrace {
		e.recorder.Event(cr, event.Warning(reasonForcedOff, errors.Errorf("the guest did not shut down within %s: powered off", shutdownGrace)))
		return e.lv.DestroyDomain(ctx, name)
	}
	switch state {
	case libvirt.StateRunning:
		return e.lv.ShutdownDomain(ctx, name)
	case libvirt.StatePaused, libvirt.StateCrashed, libvirt.StateSuspended:
		// Such a guest cannot act on a shutdown request.
		return e.lv.DestroyDomain(ctx, name)
	}
	return nil
}
