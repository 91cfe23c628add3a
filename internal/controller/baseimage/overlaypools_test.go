package baseimage

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestOverlayPools(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.SchemeBuilder.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	domain := func(name, pool string) client.Object {
		d := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}
		d.Spec.ForProvider.Pool = pool
		return d
	}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "host"}}
	pc.Spec.Defaults.Pool = "team-a-vms"
	cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	cpc.Spec.Defaults.Pool = "vms"
	cases := map[string]struct {
		reason string
		objs   []client.Object
		want   map[string]bool
	}{
		"Nothing": {
			reason: "the CRD's default pool is always in",
			want:   map[string]bool{defaultPool: true},
		},
		"DomainsAndConfigs": {
			reason: "every KVMDomain's pool and every config's default pool",
			objs:   []client.Object{domain("a", "fast"), domain("b", ""), pc, cpc},
			want:   map[string]bool{defaultPool: true, "fast": true, "team-a-vms": true, "vms": true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...).Build()
			got, err := overlayPools(r)(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\noverlayPools(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
