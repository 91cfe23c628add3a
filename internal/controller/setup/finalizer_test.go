package setup

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestFinalizerRemove(t *testing.T) {
	gr := schema.GroupResource{Group: "kvm.crossplane.io", Resource: "kvmdomains"}
	conflict := kerrors.NewConflict(gr, "vm", nil)
	other := "example.org/other"
	stale := func() *v1alpha1.KVMDomain {
		return &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "vm", ResourceVersion: "1", Finalizers: []string{managed.FinalizerName}}}
	}
	cases := map[string]struct {
		updates []error // what each Update answers, in turn
		get     error
		fresh   []string // finalizers of the fresh copy
		// want
		err        bool
		updateRVs  []string // resource versions sent, in turn
		finalizers []string // of the object afterwards
	}{
		"FirstUpdateWorks": {
			updates: []error{nil}, updateRVs: []string{"1"}, finalizers: []string{},
		},
		"ConflictRetriesOnFreshCopy": {
			updates: []error{conflict, nil}, fresh: []string{managed.FinalizerName, other},
			updateRVs: []string{"1", "2"}, finalizers: []string{other},
		},
		"FreshCopyHasNoFinalizer": {
			updates: []error{conflict}, fresh: []string{other},
			updateRVs: []string{"1"}, finalizers: []string{other},
		},
		"GoneMeanwhile": {
			updates: []error{conflict}, get: kerrors.NewNotFound(gr, "vm"),
			updateRVs: []string{"1"}, finalizers: []string{},
		},
		"GoneOnUpdate": {
			updates: []error{kerrors.NewNotFound(gr, "vm")}, updateRVs: []string{"1"}, finalizers: []string{},
		},
		"OtherErrorIsReturned": {
			updates: []error{kerrors.NewForbidden(gr, "vm", nil)}, err: true,
			updateRVs: []string{"1"}, finalizers: []string{},
		},
		"GivesUpAfterAttempts": {
			updates: []error{conflict, conflict, conflict, conflict, conflict}, fresh: []string{managed.FinalizerName},
			err: true, updateRVs: []string{"1", "2", "2", "2", "2"}, finalizers: []string{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var sent []string
			kube := &test.MockClient{MockUpdate: func(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
				sent = append(sent, obj.GetResourceVersion())
				if len(sent) > len(tc.updates) {
					t.Fatalf("update %d not expected", len(sent))
				}
				return tc.updates[len(sent)-1]
			}}
			reader := &test.MockClient{MockGet: func(_ context.Context, _ client.ObjectKey, obj client.Object) error {
				if tc.get != nil {
					return tc.get
				}
				obj.SetResourceVersion("2")
				obj.SetFinalizers(append([]string(nil), tc.fresh...))
				return nil
			}}
			cr := stale()
			err := Finalizer{Client: kube, Reader: reader}.RemoveFinalizer(context.Background(), cr)
			if (err != nil) != tc.err {
				t.Errorf("RemoveFinalizer: error %v, want error %v", err, tc.err)
			}
			if diff := cmp.Diff(tc.updateRVs, sent); diff != "" {
				t.Errorf("resource versions sent (-want +got):\n%s", diff)
			}
			got := cr.GetFinalizers()
			if got == nil {
				got = []string{}
			}
			if diff := cmp.Diff(tc.finalizers, got); diff != "" {
				t.Errorf("finalizers afterwards (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFinalizerAdd(t *testing.T) {
	cr := &v1alpha1.KVMDomain{}
	calls := 0
	kube := &test.MockClient{MockUpdate: func(context.Context, client.Object, ...client.UpdateOption) error {
		calls++
		return nil
	}}
	f := Finalizer{Client: kube, Reader: kube}
	for range 2 {
		if err := f.AddFinalizer(context.Background(), cr); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{managed.FinalizerName}, cr.GetFinalizers()); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	if calls != 1 {
		t.Errorf("%d updates, want 1 (the second add finds the finalizer)", calls)
	}
}
