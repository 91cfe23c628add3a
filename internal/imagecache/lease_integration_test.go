package imagecache

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// shortLeases makes the claims of e's caches renew every 200 ms and go stale after 2 s.
func (e *env) shortLeases() { e.sh.setClaimPeriods(200*time.Millisecond, 2*time.Second) }

// waitForClaim waits until the upload of vol runs under its claim: the claim holds a record
// and the data volume exists (the claim volume alone exists, empty, before its bytes are
// written).
func (e *env) waitForClaim(t *testing.T, ctx context.Context, vol string) {
	t.Helper()
	for {
		exists, _, invalid, err := e.cache.readRecord(ctx, e.tb.pool, ClaimName(vol))
		if err == nil && exists && invalid == nil {
			if _, err := e.lv.Volume(ctx, e.tb.pool, vol); err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no claim of %s appeared", vol)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Two provider processes reconcile the same BaseImage at once (a rolling update, two replicas
// without leader election): the second waits for the first's renewed claim instead of
// deleting its upload, and attaches to what it published. Then a claim whose holder died is
// waited for until it goes stale, and only then cleaned; and an upload whose claim another
// process took over stops without publishing or deleting anything of that process.
func TestIntegrationClaimLeases(t *testing.T) {
	e := newEnv(t)
	e.shortLeases()
	claimStale := e.sh.timing.claimStale
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	src := Source{URL: srv.URL + "/slow", SHA256: sha(data)}
	vol := VolumeName(src)
	process := func(holder string) *Cache {
		return New(libvirt.New(e.tb.connect(t), e.lvsh, libvirt.WithSocket(e.tb.cfg.Socket)), e.sh, e.dl, WithHolder(holder))
	}

	t.Run("TwoProcessesOneBaseImage", func(t *testing.T) {
		ctx := ctxT(t, 3*time.Minute)
		owner := e.owner(t, "two-processes")
		a, b := process("process-a"), process("process-b")
		var wg sync.WaitGroup
		var resA Result
		var errA error
		wg.Add(1)
		go func() { defer wg.Done(); resA, errA = a.Publish(ctx, e.tb.pool, src, owner, nil) }()
		e.waitForClaim(t, ctx, vol)
		time.Sleep(3 * claimStale / 2) // well past one stale period: only renewals keep it fresh
		resB, errB := b.Publish(ctx, e.tb.pool, src, owner, nil)
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatalf("Publish: process a %v, process b %v", errA, errB)
		}
		if resA.Reused || !resB.Reused {
			t.Fatalf("process a reused %v, process b reused %v: want a to upload and b to attach to its upload", resA.Reused, resB.Reused)
		}
		if resA.Bytes != int64(len(data)) {
			t.Fatalf("process a uploaded %d bytes, want all %d (its upload was not cut)", resA.Bytes, len(data))
		}
		img, err := e.cache.LookupVolume(ctx, e.tb.pool, vol, owner.UID)
		if err != nil || img.State != StatePublished || img.Marker.SHA256 != sha(data) || img.HasClaim {
			t.Fatalf("after both: %s (%s), claim %v, %v", img.State, img.Reason, img.HasClaim, err)
		}
		if _, err := a.Remove(ctx, e.tb.pool, vol, owner.UID); err != nil {
			t.Fatal(err)
		}
		e.requireAbsent(t, ctx, src)
	})

	t.Run("DeadHolderIsWaitedForUntilStale", func(t *testing.T) {
		ctx := ctxT(t, 3*time.Minute)
		owner := e.owner(t, "dead-holder")
		// A provider killed mid-upload: its claim and a partial data volume, never renewed.
		dead := Record{State: RecordClaimed, Volume: vol, Owner: owner, Holder: "killed-process", SourceURL: src.URL, ExpectedSHA256: src.SHA256, Format: FormatQCOW2, Time: time.Now().UTC()}
		if err := e.cache.writeRecord(ctx, e.tb.pool, ClaimName(vol), dead); err != nil {
			t.Fatal(err)
		}
		x, _ := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: libvirt.FormatRaw, CapacityBytes: uint64(len(data))})
		if _, err := e.lv.CreateVolume(ctx, e.tb.pool, x); err != nil {
			t.Fatal(err)
		}
		if err := e.lv.Upload(ctx, e.tb.pool, vol, bytes.NewReader(data[:len(data)/3]), uint64(len(data)/3)); err != nil {
			t.Fatal(err)
		}
		srv.throttle.Store(false)
		defer srv.throttle.Store(true)
		start := time.Now()
		res, err := process("restarted").Publish(ctx, e.tb.pool, src, owner, nil)
		took := time.Since(start)
		if err != nil || res.Reused || res.Image.State != StatePublished {
			t.Fatalf("Publish after a dead holder = %+v, %v", res, err)
		}
		if took < claimStale {
			t.Fatalf("the dead holder's claim was cleaned after %s, before it went stale (%s)", took, claimStale)
		}
		t.Logf("a dead holder's claim was taken over after %s (stale after %s)", took.Round(time.Millisecond), claimStale)
	})

	t.Run("LostClaimPublishesAndDeletesNothing", func(t *testing.T) {
		ctx := ctxT(t, 3*time.Minute)
		data := uniqueQCOW2(t)
		srv := newImageServer(t, data)
		e.serve(t, srv)
		src := Source{URL: srv.URL + "/slow", SHA256: sha(data)}
		vol := VolumeName(src)
		owner := e.owner(t, "lost-claim")
		// Another process takes a claim over only after it saw it unchanged for claimStale:
		// its holder's renewals did not land (a partitioned or stopped process). So a does not
		// renew here; a renewal racing the takeover below could write a's bytes into the claim
		// volume the other process has just created, a race the real takeover never meets.
		renew := e.sh.timing.claimRenew
		e.sh.timing.claimRenew = time.Hour
		defer func() { e.sh.timing.claimRenew = renew }()
		a := process("process-a")
		done := make(chan error, 1)
		go func() { _, err := a.Publish(ctx, e.tb.pool, src, owner, nil); done <- err }()
		e.waitForClaim(t, ctx, vol)
		// Another process judged a's claim stale: it removes a's claim and data and claims
		// the name for itself.
		for _, n := range []string{ClaimName(vol), vol} {
			if err := e.lv.DeleteVolume(ctx, e.tb.pool, n); err != nil && !libvirt.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		other := Record{State: RecordClaimed, Volume: vol, Owner: owner, Holder: "process-b", SourceURL: src.URL, Format: FormatQCOW2, Time: time.Now().UTC()}
		if err := e.cache.writeRecord(ctx, e.tb.pool, ClaimName(vol), other); err != nil {
			t.Fatal(err)
		}
		err := <-done
		if err == nil || !strings.Contains(err.Error(), errClaimLost.Error()) {
			t.Fatalf("Publish whose claim was taken over: %v, want an error saying the claim was lost", err)
		}
		img, lerr := e.cache.lookup(ctx, e.tb.pool, vol, "")
		if lerr != nil {
			t.Fatal(lerr)
		}
		if img.HasMarker || !img.HasClaim || img.Claim == nil || img.Claim.Holder != "process-b" {
			t.Fatalf("after the lost claim: marker %v, claim %+v: want no marker and process-b's claim untouched", img.HasMarker, img.Claim)
		}
		for _, n := range []string{ClaimName(vol), vol} {
			if err := e.lv.DeleteVolume(ctx, e.tb.pool, n); err != nil && !libvirt.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	})
}
