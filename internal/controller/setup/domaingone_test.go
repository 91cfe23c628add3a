package setup

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestInputOf(t *testing.T) {
	seed := func(d *v1alpha1.KVMDomain) *string { return d.Spec.ForProvider.SeedVolumeName }
	dom := func(s *string) *v1alpha1.KVMDomain {
		d := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "vm"}}
		d.Spec.ForProvider.SeedVolumeName = s
		return d
	}
	cases := map[string]struct {
		o    client.Object
		want []reconcile.Request
	}{
		"NamesASeed":    {o: dom(ptr.To("vm-seed")), want: []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "vm-seed"}}}},
		"NamesNone":     {o: dom(nil)},
		"EmptyName":     {o: dom(ptr.To(""))},
		"NotAKVMDomain": {o: &v1alpha1.SeedVolume{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, inputOf(tc.o, seed)); d != "" {
				t.Errorf("inputOf() (-want +got):\n%s", d)
			}
		})
	}
}
