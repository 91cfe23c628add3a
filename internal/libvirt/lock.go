package libvirt

import (
	"context"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// Shared is what every Client of one provider process shares: one lock per (host address,
// pool) that serializes the pool-mutating calls, and the handles (name and UUID) of the domains
// looked up. Make one per process (NewShared) and hand it to every New. Entries are never
// removed: there are few pools per host, and a handle is dropped only when its domain is.
type Shared struct {
	pools   sync.Map // address + "\x00" + pool -> chan struct{}
	domains sync.Map // address + "\x00" + name -> golibvirt.Domain
	defs    definitions
}

// NewShared returns the state the Clients of one process share.
func NewShared() *Shared { return &Shared{} }

// lockPool takes the lock of key, waiting no longer than ctx allows. It
// returns the unlock func.
func (s *Shared) lockPool(ctx context.Context, key string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, _ := s.pools.LoadOrStore(key, make(chan struct{}, 1))
	ch := v.(chan struct{}) // only chans are stored
	select {
	case ch <- struct{}{}:
		return sync.OnceFunc(func() { <-ch }), nil
	case <-ctx.Done():
		return nil, errors.Wrap(ctx.Err(), "gave up waiting for another call on the same pool")
	}
}

// Backoff of calls libvirt refuses because the pool is busy.
const (
	busyBackoffInitial = 100 * time.Millisecond
	busyBackoffMax     = 2 * time.Second
)

// retryBusy calls fn until it returns an error other than IsPoolBusy, or
// ctx ends (then it returns fn's last error).
func retryBusy(ctx context.Context, fn func() error) error {
	d := busyBackoffInitial
	for {
		err := fn()
		if err == nil || !IsPoolBusy(err) {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		d = min(2*d, busyBackoffMax)
	}
}
