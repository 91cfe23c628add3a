package baseimage

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

// TestRetryDelay: a full pool waits minutes, not seconds, before the next attempt; other
// failures keep their backoff.
func TestRetryDelay(t *testing.T) {
	enospc := &hostlimits.PoolFullError{Pool: "default", Cause: errors.New("No space left on device")}
	cases := map[string]struct {
		reason  string
		attempt int
		err     error
		want    time.Duration
	}{
		"First":        {reason: "a transient failure is retried after 10 s", attempt: 1, err: errors.New("connection reset"), want: 10 * time.Second},
		"Doubles":      {reason: "each failure in a row doubles it", attempt: 3, err: errors.New("connection reset"), want: 40 * time.Second},
		"Capped":       {reason: "up to 10 min", attempt: 20, err: errors.New("connection reset"), want: 10 * time.Minute},
		"Stall":        {reason: "a timeout waits a minute at least", attempt: 1, err: &imagecache.LimitError{Limit: imagecache.LimitStall}, want: time.Minute},
		"ENOSPC":       {reason: "ENOSPC during the upload waits 5 min at least", attempt: 1, err: errors.Wrap(enospc, "cannot publish"), want: 5 * time.Minute},
		"NoRoomBefore": {reason: "a pool found without room waits 5 min at least", attempt: 1, err: &hostlimits.PoolFullError{Pool: "default", Need: 1}, want: 5 * time.Minute},
		"ENOSPCLater":  {reason: "and longer when the backoff is longer", attempt: 20, err: enospc, want: 10 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := retryDelay(tc.attempt, tc.err); got != tc.want {
				t.Errorf("%s\nretryDelay(%d) = %s, want %s", tc.reason, tc.attempt, got, tc.want)
			}
		})
	}
}

// TestUnavailable: a full pool is its own reason on the Ready condition.
func TestUnavailable(t *testing.T) {
	cases := map[string]struct {
		reason string
		err    error
		want   xpv2.ConditionReason
	}{
		"PoolFull": {reason: "ENOSPC", err: errors.Wrap(&hostlimits.PoolFullError{Pool: "p", Cause: errors.New("No space left on device")}, "x"), want: ReasonPoolFull},
		"Other":    {reason: "any other failure", err: errors.New("connection reset"), want: xpv2.ReasonUnavailable},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := unavailable(tc.err)
			if diff := cmp.Diff(tc.want, c.Reason); diff != "" {
				t.Errorf("%s\nreason: -want, +got:\n%s", tc.reason, diff)
			}
			if c.Type != xpv2.TypeReady || c.Message != tc.err.Error() {
				t.Errorf("%s\ncondition %+v", tc.reason, c)
			}
		})
	}
}

// TestCreateImageCount: a BaseImage whose namespace holds limits.maxImagesPerNamespace images
// on the host is refused before any publish starts; under it, the publish starts.
func TestCreateImageCount(t *testing.T) {
	cases := map[string]struct {
		reason      string
		have        int
		wantErr     error
		wantPublish bool
	}{
		"Under": {reason: "one image held, two allowed: published", have: 1, wantPublish: true},
		"AtCap": {reason: "two held, two allowed: refused, nothing started", have: 2,
			wantErr: &hostlimits.ExceededError{What: "images of this namespace on the host, with this one,", Field: "maxImagesPerNamespace", Asked: 3, Max: 2, Source: "ClusterProviderConfig/default"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			published := make(chan struct{}, 1)
			var asked []string
			c := &fakeCache{t: t,
				images: func(pool, ns, except string) (int, error) {
					asked = append(asked, pool+" "+ns+" "+except)
					return tc.have, nil
				},
				publish: func(string, imagecache.Source) (imagecache.Result, error) {
					published <- struct{}{}
					return imagecache.Result{}, nil
				}}
			e := newExternal(c)
			e.limits = hostlimits.Limits{HostLimits: v1alpha1.HostLimits{MaxImagesPerNamespace: 2}, Source: "ClusterProviderConfig/default"}
			_, err := e.Create(context.Background(), image())
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Fatalf("%s\nCreate(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff([]string{"default ns " + uid}, asked); diff != "" {
				t.Errorf("%s\ncounted: -want, +got:\n%s", tc.reason, diff)
			}
			select {
			case <-published:
				if !tc.wantPublish {
					t.Errorf("%s\na refused Create started a publish", tc.reason)
				}
			case <-time.After(2 * time.Second):
				if tc.wantPublish {
					t.Errorf("%s\nCreate() started no publish", tc.reason)
				}
			}
		})
	}
}
