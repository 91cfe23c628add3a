package libvirt

import (
	"context"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// poolLocks holds one lock per (host address, pool), shared by every Client
// of the process. Entries are never removed: there are few pools per host.
var poolLocks sync.Map // string -> chan struct{}

// lockPool takes the lock of key, waiting no longer than ctx allows. It
// returns the unlock func.
func lockPool(ctx context.Context, key string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, _ := poolLocks.LoadOrStore(key, make(chan struct{}, 1))
	ch := v.(chan struct{}) //nolint:forcetypeassert // only chans are stored
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
