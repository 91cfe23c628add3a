package baseimage

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/publishqueue"
)

// absentCache is a host where no image is cached.
type absentCache struct{ Cache }

func (absentCache) LookupVolume(_ context.Context, pool, volume, _ string) (imagecache.Image, error) {
	return imagecache.Image{State: imagecache.StateAbsent, Pool: pool, Volume: volume}, nil
}

func (absentCache) Owned(context.Context, string, string) ([]imagecache.Image, error) {
	return nil, nil
}

func TestObserveFailedDownload(t *testing.T) {
	const policy = `{"allow":[{"cidr":"127.0.0.1/32"}]}`
	refused := &imagecache.RefusedError{URL: "http://127.0.0.1:8080/a", Config: "ClusterProviderConfig/default", Rule: "built-in: loopback 127.0.0.0/8"}
	tooLarge := &imagecache.LimitError{URL: "http://127.0.0.1:8080/a", Config: "ClusterProviderConfig/default", Limit: imagecache.LimitSize, MaxBytes: 1 << 20, Announced: 2 << 20}
	stalled := &imagecache.LimitError{URL: "http://127.0.0.1:8080/a", Config: "ClusterProviderConfig/default", Limit: imagecache.LimitStall, Timeout: time.Minute}
	unavailable := &imagecache.HTTPStatusError{URL: "http://127.0.0.1:8080/a", StatusCode: 503, Status: "503 Service Unavailable"}
	finished := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	type args struct {
		err     error         // the finished job's error
		policy  string        // the policy the job ran under
		since   time.Duration // time since the job finished
		attempt int           // the job's attempt, 0 for the first
	}
	type want struct {
		obs managed.ExternalObservation
		err string // the error Observe returns; "" for none
		// ready is the message of a Ready=False condition, "" when none is set.
		ready string
		// kept is true when the job is still remembered.
		kept bool
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"RefusedIsTerminal": {
			reason: "A refused source is shown until the spec or the policy changes.",
			args:   args{err: refused, policy: policy, since: time.Hour},
			want:   want{err: "cannot publish the image: " + refused.Error(), ready: refused.Error(), kept: true},
		},
		"TooLargeIsTerminal": {
			reason: "An image over maxImageSizeMiB is shown until the spec or the policy changes.",
			args:   args{err: tooLarge, policy: policy, since: time.Hour},
			want:   want{err: "cannot publish the image: " + tooLarge.Error(), ready: tooLarge.Error(), kept: true},
		},
		"RefusedUnderAnotherPolicy": {
			reason: "A refusal under imageSources since changed is not this policy's verdict: publish again.",
			args:   args{err: refused, policy: `{}`, since: time.Second},
			want:   want{obs: managed.ExternalObservation{ResourceExists: false}, kept: true},
		},
		"StallShownForAWhile": {
			reason: "A stall is shown, with when it is retried, for a minute.",
			args:   args{err: stalled, policy: policy, since: 30 * time.Second},
			want:   want{err: "cannot publish the image; it is tried again 1m0s after this attempt failed (failed attempts in a row: 1): " + stalled.Error(), ready: stalled.Error(), kept: true},
		},
		"StallRetriedLater": {
			reason: "After a minute a stalled download is tried again; the failed job is kept to count the next attempt.",
			args:   args{err: stalled, policy: policy, since: 2 * time.Minute},
			want:   want{obs: managed.ExternalObservation{ResourceExists: false}, kept: true},
		},
		"ServerErrorShown": {
			reason: "An HTTP 5xx is worth retrying: it is shown, Synced=False with the reason, for 10 s.",
			args:   args{err: unavailable, policy: policy, since: 5 * time.Second},
			want:   want{err: "cannot publish the image; it is tried again 10s after this attempt failed (failed attempts in a row: 1): " + unavailable.Error(), ready: unavailable.Error(), kept: true},
		},
		"ServerErrorRetried": {
			reason: "After 10 s the first 5xx is tried again.",
			args:   args{err: unavailable, policy: policy, since: 11 * time.Second},
			want:   want{obs: managed.ExternalObservation{ResourceExists: false}, kept: true},
		},
		"ThirdServerErrorBacksOff": {
			reason: "The third failure in a row waits 40 s.",
			args:   args{err: unavailable, policy: policy, since: 30 * time.Second, attempt: 3},
			want:   want{err: "cannot publish the image; it is tried again 40s after this attempt failed (failed attempts in a row: 3): " + unavailable.Error(), ready: unavailable.Error(), kept: true},
		},
		"StallAfterManyFailuresWaitsTheBackoff": {
			reason: "A stall after seven failures in a row waits the backoff (10 min), not the minute of a first stall.",
			args:   args{err: stalled, policy: policy, since: 5 * time.Minute, attempt: 8},
			want:   want{err: "cannot publish the image; it is tried again 10m0s after this attempt failed (failed attempts in a row: 8): " + stalled.Error(), ready: stalled.Error(), kept: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cr := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "img", UID: "uid-1"},
				Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Pool: "default", Source: v1alpha1.ImageSource{URL: "http://127.0.0.1:8080/a"}}}}
			js := newJobs(nil, nil)
			j := js.start(cr.GetUID(), types.NamespacedName{}, "", source(cr), tc.args.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
				return imagecache.Result{}, tc.args.err
			})
			<-j.done
			j.finishedAt = finished
			if tc.args.attempt > 0 {
				j.attempt = tc.args.attempt
			}
			e := &external{jobs: js, recorder: event.NewNopRecorder(), grant: defaultGrant(t), policy: policy, cache: absentCache{},
				now: func() time.Time { return finished.Add(tc.args.since) }}

			obs, err := e.Observe(context.Background(), cr)
			got := want{obs: obs, kept: js.get(cr.GetUID()) != nil}
			if err != nil {
				got.err = err.Error()
			}
			if c := cr.GetCondition(xpv2.TypeReady); c.Status == corev1.ConditionFalse {
				got.ready = c.Message
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nObserve(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRetryCountsAttempts checks that a job replacing a failed one of the same source and
// policy is its next attempt, and that while it runs the resource still says why the one
// before failed; another source starts counting again.
func TestRetryCountsAttempts(t *testing.T) {
	cr := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "img", UID: "uid-1"},
		Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Pool: "default", Source: v1alpha1.ImageSource{URL: "http://127.0.0.1:8080/a"}}}}
	boom := &imagecache.HTTPStatusError{URL: "http://127.0.0.1:8080/a", StatusCode: 502, Status: "502 Bad Gateway"}
	js := newJobs(nil, nil)
	fail := func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
		return imagecache.Result{}, boom
	}
	for i := 1; i <= 3; i++ {
		j := js.start(cr.GetUID(), types.NamespacedName{}, "", source(cr), "p", fail)
		<-j.done
		if j.attempt != i {
			t.Errorf("job %d: attempt %d, want %d", i, j.attempt, i)
		}
	}
	block := make(chan struct{})
	defer close(block)
	js.start(cr.GetUID(), types.NamespacedName{}, "", source(cr), "p", func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
		<-block
		return imagecache.Result{}, nil
	})
	e := &external{jobs: js, recorder: event.NewNopRecorder(), grant: defaultGrant(t), policy: "p", cache: absentCache{}, now: time.Now}
	if _, err := e.Observe(context.Background(), cr); err != nil {
		t.Fatalf("Observe during the retry: %v", err)
	}
	c := cr.GetCondition(xpv2.TypeReady)
	want := "publishing the image, attempt 4; the one before failed: " + boom.Error()
	if diff := cmp.Diff(want, c.Message); diff != "" || c.Reason != xpv2.Creating().Reason {
		t.Errorf("Ready during the retry: %s %q, want Creating with: -want +got:\n%s", c.Reason, c.Message, diff)
	}
	other := cr.DeepCopy()
	other.Spec.ForProvider.Source.URL = "http://127.0.0.1:8080/b"
	if j := js.start(cr.GetUID(), types.NamespacedName{}, "", source(other), "p", fail); j.attempt != 1 {
		t.Errorf("a job for another source: attempt %d, want 1", j.attempt)
	}
}

// A job that ends, well or not, names its BaseImage at once: it is observed then, not at its
// next poll.
func TestJobsTellWhenFinished(t *testing.T) {
	for name, fail := range map[string]bool{"Published": false, "Failed": true} {
		t.Run(name, func(t *testing.T) {
			told := make(chan types.NamespacedName, 1)
			js := newJobs(nil, func(nn types.NamespacedName) { told <- nn })
			release := make(chan struct{})
			want := types.NamespacedName{Namespace: "team-a", Name: "debian"}
			j := js.start("uid-1", want, "", imagecache.Source{URL: "https://example.org/a.qcow2"}, "", func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
				<-release
				if fail {
					return imagecache.Result{}, context.DeadlineExceeded
				}
				return imagecache.Result{}, nil
			})
			select {
			case nn := <-told:
				t.Fatalf("told %v before the job finished", nn)
			default:
			}
			close(release)
			select {
			case got := <-told:
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("finished: -want +got:\n%s", diff)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a finished job told nobody")
			}
			if !j.finished() {
				t.Error("told before the job's result was set")
			}
		})
	}
}

// A job that replaces a cancelled one of the same BaseImage starts only once that one ended:
// the cancelled one's cleanup (its claim, data, owner record) never runs under the new one.
func TestJobsReplaceAfterTheCancelledOneEnded(t *testing.T) {
	js := newJobs(nil, nil)
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); defer mu.Unlock(); order = append(order, s) }
	old := js.start("uid-1", types.NamespacedName{}, "", imagecache.Source{URL: "https://example.org/a.qcow2"}, "", func(ctx context.Context, _ imagecache.ProgressFunc) (imagecache.Result, error) {
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // cleaning up
		note("old ended")
		return imagecache.Result{}, ctx.Err()
	})
	next := js.start("uid-1", types.NamespacedName{}, "", imagecache.Source{URL: "https://example.org/b.qcow2"}, "", func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
		note("new started")
		return imagecache.Result{}, nil
	})
	for _, j := range []*job{old, next} {
		select {
		case <-j.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a job did not end")
		}
	}
	if diff := cmp.Diff([]string{"old ended", "new started"}, order); diff != "" {
		t.Errorf("order: -want +got:\n%s", diff)
	}
}

// A UID is taken for gone only when a fresh list lacks it; UIDs seen once are alive for the
// Cache's life without another list.
func TestRememberAlive(t *testing.T) {
	lists := 0
	cluster := map[string]bool{"a": true}
	alive := rememberAlive(func(context.Context) (map[string]bool, error) {
		lists++
		return maps.Clone(cluster), nil
	})
	ctx := context.Background()
	check := func(uid string, want bool, wantLists int) {
		t.Helper()
		got, err := alive(ctx, uid)
		if err != nil || got != want || lists != wantLists {
			t.Errorf("alive(%s) = %v, %v after %d lists; want %v after %d", uid, got, err, lists, want, wantLists)
		}
	}
	check("a", true, 1)
	check("a", true, 1) // remembered
	cluster["b"] = true // created since the first list
	check("b", true, 2)
	check("gone", false, 3)
}

// A running job whose BaseImage is gone from the API server, or was replaced by a new object
// of the same name, is cancelled; one whose BaseImage is there, or cannot be looked up, runs on.
func TestReapOrphans(t *testing.T) {
	nn := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "team-a", Name: n} }
	cases := map[string]struct {
		uid     types.UID // of the BaseImage the job runs for
		current types.UID // the API server's UID of that name ("" for gone)
		err     error
		reaped  bool
	}{
		"StillThere":  {uid: "u1", current: "u1"},
		"Gone":        {uid: "u1", current: "", reaped: true},
		"Replaced":    {uid: "u1", current: "u2", reaped: true},
		"LookupFails": {uid: "u1", err: errors.New("apiserver down")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			js := newJobs(nil, nil)
			cancelled := make(chan struct{})
			j := js.start(tc.uid, nn("debian"), "", imagecache.Source{URL: "https://example.org/a.qcow2"}, "", func(ctx context.Context, _ imagecache.ProgressFunc) (imagecache.Result, error) {
				<-ctx.Done()
				close(cancelled)
				return imagecache.Result{}, ctx.Err()
			})
			got := reapOrphans(context.Background(), js, func(context.Context, types.NamespacedName) (types.UID, error) { return tc.current, tc.err })
			if (len(got) == 1) != tc.reaped {
				t.Fatalf("reaped %v, want reaped=%v", got, tc.reaped)
			}
			if !tc.reaped {
				if js.get(tc.uid) != j {
					t.Error("the job of a BaseImage that is there was dropped")
				}
				j.cancel()
				<-j.done
				return
			}
			select {
			case <-cancelled:
			case <-time.After(10 * time.Second):
				t.Fatal("the orphaned job was not cancelled")
			}
			if js.get(tc.uid) != nil {
				t.Error("the orphaned job is still tracked")
			}
			if len(js.running()) != 0 {
				t.Errorf("running after the reap: %v", js.running())
			}
		})
	}
}

// defaultGrant is what a namespace may use of a host whose only pool is "default".
func defaultGrant(t *testing.T) hostgrants.Grant {
	t.Helper()
	g, err := hostgrants.For("ClusterProviderConfig/default", v1alpha1.ProviderConfigSpec{Defaults: v1alpha1.HostDefaults{Pool: "default"}}, hostgrants.Namespace{Name: "ns"}, false)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The queue's message gives the place and the limits, and names no job.
func TestQueuedCondition(t *testing.T) {
	cases := map[string]struct {
		reason string
		place  int
		wait   int
		limits publishqueue.Limits
		want   string
	}{
		"AllLimits": {
			reason: "place, count and the three limits",
			place:  2, wait: 5, limits: publishqueue.Limits{Total: 16, PerHost: 4, PerNamespace: 2},
			want: "waiting to publish: place 2 of 5 publish jobs waiting; namespaces take turns, the one with the fewest jobs publishing first (the provider publishes at most 16 at once, at most 4 per host, at most 2 per namespace)",
		},
		"NoHostLimit": {
			reason: "a limit that is not set is said so",
			place:  1, wait: 1, limits: publishqueue.Limits{Total: 3},
			want: "waiting to publish: place 1 of 1 publish jobs waiting; namespaces take turns, the one with the fewest jobs publishing first (the provider publishes at most 3 at once, at most any number per host, at most any number per namespace)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := queuedCondition(tc.place, tc.wait, tc.limits)
			if diff := cmp.Diff(tc.want, c.Message); diff != "" {
				t.Errorf("%s\nmessage: -want, +got:\n%s", tc.reason, diff)
			}
			if c.Reason != ReasonQueued || c.Status != "False" {
				t.Errorf("%s\ncondition %s %s, want False %s", tc.reason, c.Status, c.Reason, ReasonQueued)
			}
		})
	}
}
