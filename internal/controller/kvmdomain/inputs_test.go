package kvmdomain

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// TestWaitForInputs covers Observe's check of a domain's inputs before it exists: an input
// that exists but is not Ready yet is a wait, reported as an error (so the reconcile is retried
// soon) and named in status.atProvider.waitingFor (so a composition can tell a wait from a
// failure). Anything else is left to Create. The host client is nil: reaching it would panic.
func TestWaitForInputs(t *testing.T) {
	readyBase := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "base"}}
	readyBase.SetConditions(xpv2.Available())
	readyBase.Status.AtProvider.Path = "/pool/pkvm-base-x.qcow2"
	pendingBase := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "base"}}
	pendingBase.SetConditions(xpv2.Creating())
	pendingSeed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "seed"}}
	pendingSeed.SetConditions(xpv2.Creating())

	cases := map[string]struct {
		objs           []client.Object
		wantWaitingFor string
		wantErr        error
	}{
		"BaseImageNotReady": {
			objs:           []client.Object{pendingBase, pendingSeed},
			wantWaitingFor: "BaseImage base",
			wantErr:        notReady{what: "BaseImage base", err: errors.Errorf(errBaseNotReady, "base")},
		},
		"SeedVolumeNotReady": {
			objs:           []client.Object{readyBase, pendingSeed},
			wantWaitingFor: "SeedVolume seed",
			wantErr:        notReady{what: "SeedVolume seed", err: errors.Errorf(errSeedNotReady, "seed")},
		},
		"SeedVolumeMissingIsLeftToCreate": {
			objs: []client.Object{readyBase},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			if err := v1alpha1.SchemeBuilder.AddToScheme(s); err != nil {
				t.Fatal(err)
			}
			e := &external{kube: fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...).Build()}
			cr := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm"}}
			cr.Spec.ForProvider.BaseImageName = ptr.To("base")
			cr.Spec.ForProvider.SeedVolumeName = ptr.To("seed")
			cr.Status.AtProvider.WaitingFor = "stale"

			err := e.waitForInputs(context.Background(), cr)
			if d := cmp.Diff(tc.wantErr, err, test.EquateErrors()); d != "" {
				t.Errorf("waitForInputs error (-want +got):\n%s", d)
			}
			// Anything but a wait clears a stale value, so a failure is shown as one.
			if d := cmp.Diff(tc.wantWaitingFor, cr.Status.AtProvider.WaitingFor); d != "" {
				t.Errorf("waitingFor (-want +got):\n%s", d)
			}
		})
	}
}
