package setup

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

type recorder struct {
	failed []string
	timed  []string
}

func (r *recorder) ReconcileFailed(kind, reason string) { r.failed = append(r.failed, kind+"/"+reason) }
func (r *recorder) External(kind, op string, _ time.Duration) {
	r.timed = append(r.timed, kind+"/"+op)
}

// failingClient fails the ops named in fail.
type failingClient struct {
	managed.TypedExternalClient[*v1alpha1.KVMDomain]
	fail map[string]bool
}

func (c failingClient) err(op string) error {
	if c.fail[op] {
		return errors.New(op + " failed")
	}
	return nil
}
func (c failingClient) Observe(context.Context, *v1alpha1.KVMDomain) (managed.ExternalObservation, error) {
	return managed.ExternalObservation{}, c.err("Observe")
}
func (c failingClient) Create(context.Context, *v1alpha1.KVMDomain) (managed.ExternalCreation, error) {
	return managed.ExternalCreation{}, c.err("Create")
}
func (c failingClient) Update(context.Context, *v1alpha1.KVMDomain) (managed.ExternalUpdate, error) {
	return managed.ExternalUpdate{}, c.err("Update")
}
func (c failingClient) Delete(context.Context, *v1alpha1.KVMDomain) (managed.ExternalDelete, error) {
	return managed.ExternalDelete{}, c.err("Delete")
}

func TestInstrument(t *testing.T) {
	cases := map[string]struct {
		reason     string
		connectErr bool
		fail       map[string]bool
		wantFailed []string
		wantTimed  []string
	}{
		"AllSucceed": {
			reason:    "Every op is timed; nothing counts as failed.",
			wantTimed: []string{"KVMDomain/Observe", "KVMDomain/Create", "KVMDomain/Update", "KVMDomain/Delete"},
		},
		"ConnectFails": {
			reason:     "A failed Connect counts as CannotConnectToProvider, and nothing is timed.",
			connectErr: true,
			wantFailed: []string{"KVMDomain/" + ReasonCannotConnect},
		},
		"ObserveAndDeleteFail": {
			reason:     "Failed ops count by crossplane-runtime's reason for their step, and are timed too.",
			fail:       map[string]bool{"Observe": true, "Delete": true},
			wantFailed: []string{"KVMDomain/" + ReasonCannotObserve, "KVMDomain/" + ReasonCannotDelete},
			wantTimed:  []string{"KVMDomain/Observe", "KVMDomain/Create", "KVMDomain/Update", "KVMDomain/Delete"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			c := instrument[*v1alpha1.KVMDomain](managed.TypedExternalConnectorFn[*v1alpha1.KVMDomain](func(context.Context, *v1alpha1.KVMDomain) (managed.TypedExternalClient[*v1alpha1.KVMDomain], error) {
				if tc.connectErr {
					return nil, errors.New("no host")
				}
				return failingClient{fail: tc.fail}, nil
			}), "KVMDomain", rec)
			ctx, cr := context.Background(), &v1alpha1.KVMDomain{}
			if ec, err := c.Connect(ctx, cr); err == nil {
				_, _ = ec.Observe(ctx, cr)
				_, _ = ec.Create(ctx, cr)
				_, _ = ec.Update(ctx, cr)
				_, _ = ec.Delete(ctx, cr)
			}
			if diff := cmp.Diff(tc.wantFailed, rec.failed); diff != "" {
				t.Errorf("%s\nfailures: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantTimed, rec.timed); diff != "" {
				t.Errorf("%s\ntimed: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestJittered(t *testing.T) {
	ready := &v1alpha1.KVMDomain{}
	ready.SetConditions(xpv2.Available())
	booting := &v1alpha1.KVMDomain{}
	c := xpv2.Unavailable()
	c.LastTransitionTime = metav1.Now()
	booting.SetConditions(c)
	hook := PollHook(time.Now, nil)
	cases := map[string]struct {
		reason string
		mg     resource.Managed
		rnd    float64
		want   time.Duration
	}{
		"ReadyLowest":  {reason: "A Ready resource's poll moves down by up to 10 %.", mg: ready, rnd: 0, want: 54 * time.Second},
		"ReadyMiddle":  {reason: "The middle of the range is the poll itself.", mg: ready, rnd: 0.5, want: time.Minute},
		"ReadyHighest": {reason: "And up by up to 10 %.", mg: ready, rnd: 0.999999, want: 66 * time.Second},
		"NotReady":     {reason: "A resource not Ready keeps its short poll: no jitter.", mg: booting, rnd: 0, want: time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Jittered(hook, PollJitter, func() float64 { return tc.rnd })(tc.mg, time.Minute)
			if diff := cmp.Diff(tc.want, got.Round(time.Second)); diff != "" {
				t.Errorf("%s\nJittered: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
