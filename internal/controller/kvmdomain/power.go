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

// shutdownRepeat is how often a shutdown request is repeated while the guest has not stopped.
const shutdownRepeat = 15 * time.Second

// shutdowns remembers when a graceful shutdown was requested, per KVMDomain.
type shutdowns struct {
	mu   sync.Mutex
	m    map[types.UID]time.Time
	last map[types.UID]time.Time // the last request sent
}

// ask is true when a shutdown request for uid is due: the first, or shutdownRepeat after
// the last one.
func (s *shutdowns) ask(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[types.UID]time.Time{}
	}
	if t, ok := s.last[uid]; ok && time.Since(t) < shutdownRepeat {
		return false
	}
	s.last[uid] = time.Now()
	return true
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
	delete(s.last, uid)
}

// powerOff asks the guest to shut down, and destroys it once its grace period has passed
// (at once for a grace of 0).
func (e *external) powerOff(ctx context.Context, cr *v1alpha1.KVMDomain, name, state string) error {
	if state == libvirt.StateShutOff {
		e.shutdowns.done(cr.GetUID())
		return nil
	}
	grace := shutdownGrace(cr)
	waited, asked := e.shutdowns.since(cr.GetUID())
	if (asked && waited > grace) || grace == 0 {
		if grace > 0 {
			e.recorder.Event(cr, event.Warning(reasonForcedOff, errors.Errorf("the guest did not shut down within %s: powered off", grace)))
		}
		return e.lv.DestroyDomain(ctx, name)
	}
	switch state {
	case libvirt.StateRunning:
		// Ask once, then again only every shutdownRepeat: a stopping guest is reconciled
		// often (its probe fails, its agent disconnects), and a request per reconcile only
		// keeps the guest agent busy while it shuts down.
		if !e.shutdowns.ask(cr.GetUID()) {
			return nil
		}
		return e.lv.ShutdownDomain(ctx, name)
	case libvirt.StatePaused, libvirt.StateCrashed, libvirt.StateSuspended:
		// Such a guest cannot act on a shutdown request.
		return e.lv.DestroyDomain(ctx, name)
	}
	return nil
}
