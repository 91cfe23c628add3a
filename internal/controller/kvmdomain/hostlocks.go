package kvmdomain

import (
	"context"
	"sync"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// hostLocks is one lock per host address: the MAC check and the definition of a new domain
// run under it, so that two KVMDomains asking for the same MAC on one host cannot both pass
// the check. Made once per controller (Setup); entries are never removed (few hosts).
type hostLocks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func newHostLocks() *hostLocks { return &hostLocks{m: map[string]chan struct{}{}} }

// lock takes the lock of host, waiting no longer than ctx allows, and returns its unlock.
// A nil hostLocks locks nothing.
func (l *hostLocks) lock(ctx context.Context, host string) (func(), error) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	ch, ok := l.m[host]
	if !ok {
		ch = make(chan struct{}, 1)
		l.m[host] = ch
	}
	l.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return sync.OnceFunc(func() { <-ch }), nil
	case <-ctx.Done():
		return nil, errors.Wrap(ctx.Err(), "gave up waiting for another domain definition on the same host")
	}
}
