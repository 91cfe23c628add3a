package imagecache

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// Claim leases. A claim (NAME.claim) names the BaseImage that uploads the volume and the
// provider process that holds it (Record.Holder). While the upload runs, the holder rewrites
// the claim every claimRenew with exactly the bytes it first wrote, so the content never
// changes (a torn rewrite of identical bytes is identical) while the file's mtime advances.
// Anyone else judges a claim by that mtime, read through libvirt, and compares it only with
// its own earlier readings: a claim whose mtime has not moved for claimStale of the reader's
// own clock is stale, whatever the clocks of the host and of the holder say. A fresh claim of
// another holder is never deleted, whichever BaseImage it names: two provider processes
// reconciling the same BaseImage (a rolling update, two replicas without leader election) wait
// for each other instead of deleting each other's upload. The periods are Shared's
// (timing.claimRenew, timing.claimStale).

// errClaimLost ends an upload whose claim another process removed or replaced: it must not
// publish, and must not delete what may be that process's data now.
var errClaimLost = errors.New("the upload's claim was removed or replaced by another process, which must have judged it stale or its upload slower than the provider's minimum throughput; this upload is abandoned")

// lease is what a reader knows of a claim it does not hold.
type lease int

const (
	// leaseUnknown: the claim's mtime cannot be read (a pool without timestamps) or it names
	// no holder of this protocol; the owner's liveness decides, as before leases.
	leaseUnknown lease = iota
	// leaseFresh: the claim's mtime moved within claimStale, or it was first seen less than
	// claimStale ago.
	leaseFresh
	// leaseStale: the mtime has not moved for claimStale: its holder is gone or stuck.
	leaseStale
)

// claimClock remembers, per claim volume, the mtime last read and when this process first
// read it.
type claimClock struct {
	mu   sync.Mutex
	seen map[string]claimSeen
	// stale is claimStale: how long an unchanged mtime stays fresh.
	stale time.Duration
}

type claimSeen struct {
	mtime string
	since time.Time
}

// judge returns the lease of the claim volume key whose mtime is mtime, at now.
func (k *claimClock) judge(key, mtime string, now time.Time) lease {
	if mtime == "" {
		return leaseUnknown
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.seen[key]
	if !ok || s.mtime != mtime {
		k.seen[key] = claimSeen{mtime: mtime, since: now}
		return leaseFresh
	}
	if now.Sub(s.since) < k.stale {
		return leaseFresh
	}
	return leaseStale
}

// forget drops what is remembered of key (the claim was deleted).
func (k *claimClock) forget(key string) {
	k.mu.Lock()
	delete(k.seen, key)
	k.mu.Unlock()
}

// ours tells whether img's claim is an upload claim this process holds for owner.
func (c *Cache) ours(img Image, owner string) bool {
	cl := img.Claim
	return img.HasClaim && cl != nil && cl.State == RecordClaimed && cl.Owner.UID == owner && cl.Holder == c.holder
}

// claimLease judges img's claim, which is not ours. A claim without a holder (written by a
// release before leases) is judged by its mtime too: its writer may still be uploading.
func (c *Cache) claimLease(img Image) lease {
	if !img.HasClaim {
		return leaseUnknown
	}
	return c.sh.claims.judge(c.memoKey(img.Pool, ClaimName(img.Volume)), img.ClaimModified, c.now())
}

// hold renews the claim volume name of pool, whose content is b, every claimRenew until the
// returned stop is called. When the claim is gone or no longer holds b, it cancels the
// returned context with errClaimLost. stop waits for the renewing goroutine.
func (c *Cache) hold(ctx context.Context, pool, name string, b []byte) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.sh.timing.claimRenew)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-hctx.Done():
				return
			case <-t.C:
			}
			if lost := c.renew(hctx, pool, name, b); lost {
				cancel(errClaimLost)
				return
			}
		}
	}()
	return hctx, func() {
		close(quit)
		<-done
		cancel(nil)
	}
}

// renew rewrites the claim with its own bytes after checking they are still there; it
// reports the claim lost when it is gone or holds other bytes. Other failures (a cut
// connection) are retried at the next tick: the claim goes stale only after claimStale.
//
// libvirt has no compare-and-swap: a holder whose renewals did not land for claimStale (so
// another process took the claim over) and that comes back between its check and its rewrite
// can write its bytes into the other's new claim. Both then fail safe: the other's stillOurs
// before its marker sees a claim not its own and publishes nothing, and this holder's data
// volume was deleted by the takeover, so its read-back fails; the next attempt starts clean.
func (c *Cache) renew(ctx context.Context, pool, name string, b []byte) (lost bool) {
	var buf bytes.Buffer
	err := c.lv.Download(ctx, pool, name, &buf, 0, maxRecordBytes)
	switch {
	case libvirt.IsNotFound(err):
		return true
	case err != nil:
		return false
	case !bytes.Equal(bytes.TrimRight(buf.Bytes(), "\x00"), b):
		return true
	}
	err = c.lv.Upload(ctx, pool, name, bytes.NewReader(b), uint64(len(b)))
	return libvirt.IsNotFound(err)
}

// stillOurs reads the claim of vol again and tells whether this process still holds it for
// owner: before a marker is written, and before a failed upload deletes what it wrote.
func (c *Cache) stillOurs(ctx context.Context, pool, vol, owner string) (bool, error) {
	exists, r, invalid, err := c.readRecord(ctx, pool, ClaimName(vol))
	if err != nil || !exists || invalid != nil {
		return false, err
	}
	return r.State == RecordClaimed && r.Owner.UID == owner && r.Holder == c.holder, nil
}

// Throughput is the least progress an upload must make for its claim to hold against
// BaseImages of other namespaces waiting for the same image: Bytes over every Window. Zero
// Bytes or Window: no minimum.
type Throughput struct {
	Bytes  int64
	Window time.Duration
}

// DefaultMinThroughput is the Throughput a claim must keep by default: 16 MiB every 5
// minutes (about 55 KiB/s). Slower, a 1 GiB image would not be uploaded within the 6 hours a
// publish job may take; a URL that sends a byte every 50 seconds kept every other namespace
// publishing the same image in that pool waiting that long.
var DefaultMinThroughput = Throughput{Bytes: 16 << 20, Window: 5 * time.Minute}

// WithMinThroughput sets the Throughput a claim must keep (default DefaultMinThroughput).
func WithMinThroughput(t Throughput) SharedOption { return func(s *Shared) { s.progress.min = t } }

// progressSample is how many bytes a claimed data volume held (its allocation) when this
// process looked.
type progressSample struct {
	at    time.Time
	bytes int64
}

// slowClaim decides, without I/O, whether the upload whose data volume was seen holding
// samples (oldest first, all of one claim, read by this process at its own clock) is slower
// than floor: it added less than floor.Bytes since the last sample taken at least floor.Window
// before the newest. An upload not watched for a whole window yet is not slow.
func slowClaim(samples []progressSample, floor Throughput) bool {
	if floor.Bytes <= 0 || floor.Window <= 0 || len(samples) < 2 {
		return false
	}
	last := samples[len(samples)-1]
	for i := len(samples) - 2; i >= 0; i-- {
		if last.at.Sub(samples[i].at) >= floor.Window {
			return last.bytes-samples[i].bytes < floor.Bytes
		}
	}
	return false
}

// progressClock remembers, per claim volume, the allocations of its data volume this process
// saw while it waited for that claim.
type progressClock struct {
	mu   sync.Mutex
	seen map[string]claimProgress
	min  Throughput
}

type claimProgress struct {
	// claim identifies the claim (its holder and time): a new claim starts anew.
	claim   string
	samples []progressSample
}

// slow records that the data volume of the claim key (identified by claim) held bytes at now,
// and tells whether its upload is slower than the minimum (slowClaim).
func (p *progressClock) slow(key, claim string, bytes int64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cp := p.seen[key]
	if cp.claim != claim || (len(cp.samples) > 0 && bytes < cp.samples[len(cp.samples)-1].bytes) {
		cp = claimProgress{claim: claim} // another claim, or its data was written anew
	}
	cp.samples = append(cp.samples, progressSample{at: now, bytes: bytes})
	// Keep one sample at least a window old, and those after it.
	for len(cp.samples) > 2 && now.Sub(cp.samples[1].at) >= p.min.Window {
		cp.samples = cp.samples[1:]
	}
	p.seen[key] = cp
	return slowClaim(cp.samples, p.min)
}

// forget drops what is remembered of key.
func (p *progressClock) forget(key string) {
	p.mu.Lock()
	delete(p.seen, key)
	p.mu.Unlock()
}

// tooSlow tells whether img's claim, fresh and not ours, guards an upload by a BaseImage of
// another namespace than owner's that is slower than the minimum throughput: owner may then
// take it over like a stale claim, so that one slow URL does not hold every other namespace
// publishing the same image in that pool. A claim of owner's own namespace is waited for
// however slow (its team's URL). It costs one call (the data volume's allocation) per look.
func (c *Cache) tooSlow(ctx context.Context, img Image, owner Owner) (bool, error) {
	cl := img.Claim
	if c.sh.progress.min.Bytes <= 0 || !img.HasData || cl == nil || cl.State != RecordClaimed ||
		owner.Namespace == "" || cl.Owner.sameNamespace(owner) {
		return false, nil
	}
	vi, err := c.lv.VolumeInfo(ctx, img.Pool, img.Volume)
	if libvirt.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, errors.Wrapf(err, errLookup, img.Volume, img.Pool)
	}
	key := c.memoKey(img.Pool, ClaimName(img.Volume))
	return c.sh.progress.slow(key, cl.Holder+"\x00"+cl.Time.UTC().Format(time.RFC3339Nano), int64(vi.AllocationBytes), c.now()), nil
}
