package setup

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestPollHook(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(c xpv2.Condition, ago time.Duration) xpv2.Condition {
		c.LastTransitionTime = metav1.NewTime(now.Add(-ago))
		return c
	}
	cases := map[string]struct {
		reason  string
		cond    *xpv2.Condition
		created time.Duration // ago
		// zeroTime clears the condition's transition time.
		zeroTime bool
		// updated: the external client just updated the resource.
		updated bool
		poll    time.Duration
		want    time.Duration
	}{
		"Ready":                           {reason: "a Ready resource polls at --poll", cond: ptr.To(at(xpv2.Available(), time.Hour)), poll: time.Minute, want: time.Minute},
		"JustCreated":                     {reason: "a new resource without conditions is looked at after a second", created: 0, poll: time.Minute, want: time.Second},
		"Booting":                         {reason: "a guest booting for 30 s: a second", cond: ptr.To(at(xpv2.Unavailable(), 30*time.Second)), poll: time.Minute, want: time.Second},
		"WaitedTwoMinutes":                {reason: "two minutes not Ready: three seconds", cond: ptr.To(at(xpv2.Creating(), 2*time.Minute)), poll: time.Minute, want: 3 * time.Second},
		"StuckForAnHour":                  {reason: "an hour not Ready: back at --poll", cond: ptr.To(at(xpv2.Unavailable(), time.Hour)), poll: time.Minute, want: time.Minute},
		"ShortPoll":                       {reason: "a --poll shorter than the backoff wins", cond: ptr.To(at(xpv2.Unavailable(), 10*time.Minute)), poll: 5 * time.Second, want: 5 * time.Second},
		"PollUnderASecond":                {reason: "a --poll under a second is kept", cond: ptr.To(at(xpv2.Unavailable(), 0)), poll: 500 * time.Millisecond, want: 500 * time.Millisecond},
		"NotReadyWithoutTimeUsesCreation": {reason: "a condition without a time counts from creation", cond: ptr.To(at(xpv2.Unavailable(), 0)), zeroTime: true, created: 5 * time.Minute, poll: time.Minute, want: 6 * time.Second},
		"JustUpdated":                     {reason: "a Ready resource just updated is looked at after a second", cond: ptr.To(at(xpv2.Available(), time.Hour)), updated: true, poll: time.Minute, want: time.Second},
		"JustUpdatedShortPoll":            {reason: "a --poll under a second stays", cond: ptr.To(at(xpv2.Available(), time.Hour)), updated: true, poll: 500 * time.Millisecond, want: 500 * time.Millisecond},
		"ClockSkew":                       {reason: "a transition in the future counts as now", cond: ptr.To(at(xpv2.Unavailable(), -time.Minute)), poll: time.Minute, want: time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := &Updated{}
			hook := PollHook(func() time.Time { return now }, u)
			mg := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{UID: "uid-1", CreationTimestamp: metav1.NewTime(now.Add(-tc.created))}}
			if tc.updated {
				u.mark(mg.GetUID())
			}
			if tc.cond != nil {
				mg.SetConditions(*tc.cond)
				if tc.zeroTime {
					mg.Status.Conditions[0].LastTransitionTime = metav1.Time{}
				}
			}
			if diff := cmp.Diff(tc.want, hook(mg, tc.poll)); diff != "" {
				t.Errorf("%s\nPollHook(): -want, +got:\n%s", tc.reason, diff)
			}
			if tc.updated && hook(mg, tc.poll) != tc.poll && tc.cond != nil && tc.cond.Status == "True" {
				t.Errorf("%s\nPollHook(): an update shortens only the next poll", tc.reason)
			}
		})
	}
}

// fakeClient is a typed external client of function fields.
type fakeClient struct {
	managed.TypedExternalClient[*v1alpha1.KVMDomain]
	update func() error
}

func (f fakeClient) Update(context.Context, *v1alpha1.KVMDomain) (managed.ExternalUpdate, error) {
	return managed.ExternalUpdate{}, f.update()
}

func TestTrackUpdates(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"UpdatedIsMarked":   {want: true},
		"FailedIsNotMarked": {err: errors.New("boom")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := &Updated{}
			c := trackUpdates[*v1alpha1.KVMDomain](managed.TypedExternalConnectorFn[*v1alpha1.KVMDomain](func(context.Context, *v1alpha1.KVMDomain) (managed.TypedExternalClient[*v1alpha1.KVMDomain], error) {
				return fakeClient{update: func() error { return tc.err }}, nil
			}), u)
			mg := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{UID: "uid-1"}}
			ec, err := c.Connect(context.Background(), mg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ec.Update(context.Background(), mg); !errors.Is(err, tc.err) {
				t.Fatalf("Update(): %v", err)
			}
			if got := u.take(mg.GetUID()); got != tc.want {
				t.Errorf("marked = %t, want %t", got, tc.want)
			}
			if u.take(mg.GetUID()) {
				t.Error("a mark is taken once")
			}
		})
	}
}
