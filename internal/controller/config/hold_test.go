package config

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

var errBoom = errors.New("boom")

func TestHold(t *testing.T) {
	now := metav1.Now()
	fin := SecretFinalizer("host")
	config := func(deleted bool, finalizers []string, held string) *v1alpha1.ProviderConfig {
		pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "host", Finalizers: finalizers}}
		if held != "" {
			pc.SetAnnotations(map[string]string{annotationHeld: held})
		}
		if deleted {
			pc.SetDeletionTimestamp(&now)
		}
		pc.Spec.Credentials = &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Name: "ssh", Key: "key"}}
		pc.Spec.KnownHosts = &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Name: "ssh", Key: "known_hosts"}}
		return pc
	}
	gone := kerrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "x")
	cases := map[string]struct {
		pc        *v1alpha1.ProviderConfig // nil: not found
		secrets   map[string][]string      // existing Secrets and their finalizers
		users     []string
		usersErr  error
		wantRes   reconcile.Result
		wantErr   error
		wantPC    []string          // finalizers of the config written (nil: not written)
		wantHeld  string            // its held-secrets annotation when written
		wantPatch map[string]string // Secret -> "add" or "remove"
	}{
		"ConfigGone": {},
		"NewConfigHoldsItsSecret": {
			pc: config(false, nil, ""), secrets: map[string][]string{"ssh": nil},
			wantPC: []string{HoldFinalizer}, wantHeld: "ssh", wantPatch: map[string]string{"ssh": "add"},
		},
		"AlreadyHeld": {
			pc: config(false, []string{HoldFinalizer}, "ssh"), secrets: map[string][]string{"ssh": {fin}},
		},
		"SecretNoLongerNamedIsLetGo": {
			pc: config(false, []string{HoldFinalizer}, "old,ssh"), secrets: map[string][]string{"ssh": {fin}, "old": {fin}},
			wantPC: []string{HoldFinalizer}, wantHeld: "ssh", wantPatch: map[string]string{"old": "remove"},
		},
		"MissingSecretIsLeftToTheConnection": {
			pc: config(false, nil, ""), wantPC: []string{HoldFinalizer}, wantHeld: "ssh",
		},
		"DeletedWhileResourcesNameIt": {
			pc: config(true, []string{HoldFinalizer}, "ssh"), secrets: map[string][]string{"ssh": {fin}},
			users: []string{"KVMDomain vm"}, wantRes: reconcile.Result{RequeueAfter: recheck},
		},
		"DeletedAndUnused": {
			pc: config(true, []string{HoldFinalizer, "in-use.crossplane.io"}, "ssh"), secrets: map[string][]string{"ssh": {fin, "other"}},
			wantPC: []string{"in-use.crossplane.io"}, wantHeld: "ssh", wantPatch: map[string]string{"ssh": "remove"},
		},
		"DeletedWithoutOurFinalizer": {
			pc: config(true, []string{"in-use.crossplane.io"}, ""),
		},
		"CannotListUsers": {
			pc: config(true, []string{HoldFinalizer}, "ssh"), usersErr: errBoom, wantErr: errors.Wrap(errBoom, errListUsers),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var written *v1alpha1.ProviderConfig
			patched := map[string]string{}
			kube := &test.MockClient{
				MockGet: func(_ context.Context, _ client.ObjectKey, obj client.Object) error {
					if tc.pc == nil {
						return kerrors.NewNotFound(schema.GroupResource{Resource: "providerconfigs"}, "host")
					}
					tc.pc.DeepCopyInto(obj.(*v1alpha1.ProviderConfig))
					return nil
				},
				MockUpdate: func(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
					written = obj.(*v1alpha1.ProviderConfig).DeepCopy()
					return nil
				},
				MockPatch: func(_ context.Context, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
					had := tc.secrets[obj.GetName()]
					op := "remove"
					if len(obj.GetFinalizers()) > len(had) {
						op = "add"
					}
					patched[obj.GetName()] = op
					return nil
				},
			}
			secrets := &test.MockClient{MockGet: func(_ context.Context, key client.ObjectKey, obj client.Object) error {
				f, ok := tc.secrets[key.Name]
				if !ok {
					return gone
				}
				obj.SetNamespace(key.Namespace)
				obj.SetName(key.Name)
				obj.(*corev1.Secret).SetFinalizers(append([]string(nil), f...))
				return nil
			}}
			h := &holder{kube: kube, secrets: secrets, log: logging.NewNopLogger(), recorder: event.NewNopRecorder(),
				users: func(context.Context, string, string) ([]string, error) { return tc.users, tc.usersErr }}
			res, err := h.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: "host"}})
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Fatalf("Reconcile: -want error, +got error:\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRes, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			var gotPC []string
			held := ""
			if written != nil {
				gotPC = written.GetFinalizers()
				if gotPC == nil {
					gotPC = []string{}
				}
				held = written.GetAnnotations()[annotationHeld]
			}
			if diff := cmp.Diff(tc.wantPC, gotPC); diff != "" {
				t.Errorf("config finalizers written (-want +got):\n%s", diff)
			}
			if held != tc.wantHeld {
				t.Errorf("held-secrets annotation %q, want %q", held, tc.wantHeld)
			}
			want := tc.wantPatch
			if want == nil {
				want = map[string]string{}
			}
			if diff := cmp.Diff(want, patched); diff != "" {
				t.Errorf("Secret patches (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSecretFinalizer(t *testing.T) {
	long := SecretFinalizer(string(make([]byte, 253)))
	if len(long) > 63+len("kvm.crossplane.io/") {
		t.Errorf("finalizer %q too long for a qualified name", long)
	}
	if SecretFinalizer("a") == SecretFinalizer("b") {
		t.Error("two configs share a Secret finalizer")
	}
}
