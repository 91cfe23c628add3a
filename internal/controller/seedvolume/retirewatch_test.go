package seedvolume

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestRetiringSeedOf(t *testing.T) {
	seed := func(name string, retired ...string) *v1alpha1.SeedVolume {
		sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		sv.Status.AtProvider.RetiredVolumes = retired
		return sv
	}
	domain := func(seed string) *v1alpha1.KVMDomain {
		d := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm"}}
		if seed != "" {
			d.Spec.ForProvider.SeedVolumeName = &seed
		}
		return d
	}
	s := runtime.NewScheme()
	_ = v1alpha1.SchemeBuilder.AddToScheme(s)
	kube := fake.NewClientBuilder().WithScheme(s).WithObjects(seed("retiring", "old.seed.iso"), seed("settled")).Build()
	cases := map[string]struct {
		reason string
		obj    client.Object
		want   []reconcile.Request
	}{
		"Retiring":   {reason: "a seed with retired volumes is reconciled", obj: domain("retiring"), want: []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "retiring"}}}},
		"Settled":    {reason: "a seed without retired volumes is not", obj: domain("settled")},
		"Missing":    {reason: "a seed that does not exist is not", obj: domain("missing")},
		"NoSeed":     {reason: "a KVMDomain without a seed names none", obj: domain("")},
		"NotADomain": {reason: "anything else is ignored", obj: seed("retiring", "x")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, retiringSeedOf(context.Background(), kube, tc.obj)); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
