package imagecache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// DefaultRecheck is how long Lookup trusts a record (marker or claim) it read on its
// volume's fingerprint (capacity and allocation) alone: at most the provider's sync period
// (1 h by default). A record whose fingerprint changed is read at once. Publish and Remove,
// which write and delete, never use what is remembered: they read every record.
const DefaultRecheck = time.Hour

// Shared is what every Cache of one provider process shares, and what outlives a Cache (which
// lives for one reconcile): what Lookup remembers of each host's records, the clock that
// judges other processes' claims, the name of this process in its claims, and the base locks
// that order a removal's check for overlays against the creation of one (CreateOverlay).
// Make one per process with NewShared and hand it to every New and to the KVMDomain
// controller.
type Shared struct {
	memo   *memo
	claims *claimClock
	// progress judges the throughput of other namespaces' uploads this process waits for.
	progress *progressClock
	bases    *baseLocks
	scans    *scans
	holder   string
	timing   timing
	// clusterID is the management cluster this process serves (InCluster).
	clusterID string
}

// timing holds the protocol's periods; tests shorten them.
type timing struct {
	// waitPoll is how often Publish looks again while another BaseImage uploads the image it
	// asks for.
	waitPoll time.Duration
	// settleTries and settlePause bound how often lookupSettled looks again.
	settleTries int
	settlePause time.Duration
	// tornGrace is how long an owner record that does not parse is given to be completed by
	// its writer (creating and filling a record takes milliseconds) before it is taken for
	// the debris of a writer that died between the two.
	tornGrace time.Duration
	// claimRenew and claimStale: see the claim leases in holder.go.
	claimRenew, claimStale time.Duration
}

func defaultTiming() timing {
	return timing{
		waitPoll: 2 * time.Second, settleTries: 4, settlePause: 250 * time.Millisecond,
		tornGrace: time.Second, claimRenew: 5 * time.Second, claimStale: 30 * time.Second,
	}
}

// A SharedOption configures a Shared.
type SharedOption func(*Shared)

// WithRecheck sets how long Lookup trusts a record on its fingerprint alone (default
// DefaultRecheck).
func WithRecheck(d time.Duration) SharedOption { return func(s *Shared) { s.memo.recheck = d } }

// InCluster says which management cluster this process serves (the provider's --cluster-id):
// the Caches made with the Shared name it in the owner records they write, and judge only
// the records of that cluster or of none (see WithClusterID).
func InCluster(id string) SharedOption { return func(s *Shared) { s.clusterID = id } }

// NewShared returns the state one provider process shares among its Caches. Its holder name
// (written into claims) is the host name (a pod's name in a cluster), the PID and a random
// suffix, so that a restarted process is another holder.
func NewShared(opts ...SharedOption) *Shared {
	s := &Shared{
		memo:     &memo{m: map[string]memoEntry{}, now: time.Now, recheck: DefaultRecheck},
		bases:    &baseLocks{},
		scans:    &scans{},
		holder:   processHolder(),
		progress: &progressClock{seen: map[string]claimProgress{}, min: DefaultMinThroughput},
		timing:   defaultTiming(),
	}
	s.claims = &claimClock{seen: map[string]claimSeen{}, stale: s.timing.claimStale}
	for _, o := range opts {
		o(s)
	}
	return s
}

// processHolder names this process in the claims it writes.
func processHolder() string {
	h, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return h + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b)
}

// baseLocks holds one lock per (host address, pool) that orders the removal of a cached base
// volume against the creation of overlays backing onto one (CreateOverlay). It is not the
// lock of libvirt's pool-mutating calls, which its holders call while holding it.
type baseLocks struct {
	m sync.Map // address + "\x00" + pool -> chan struct{}
}

// lock takes the base lock of pool on the host at address, waiting no longer than ctx allows,
// and returns the unlock func (idempotent). Within one process, nothing may create an overlay
// onto a base volume of pool, nor decide that one is unused and remove it, without holding it.
func (b *baseLocks) lock(ctx context.Context, address, pool string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, _ := b.m.LoadOrStore(address+"\x00"+pool, make(chan struct{}, 1))
	ch := v.(chan struct{}) // only chans are stored
	select {
	case ch <- struct{}{}:
		return sync.OnceFunc(func() { <-ch }), nil
	case <-ctx.Done():
		return nil, errors.Wrapf(ctx.Err(), "gave up waiting for another operation on the base images of pool %s", pool)
	}
}
