package connection

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// The kind label of a resource's libvirt calls: its TypeMeta's kind, else its Go type's name
// (objects read from the cache carry no TypeMeta).
func TestKind(t *testing.T) {
	withGVK := &v1alpha1.KVMDomain{}
	withGVK.SetGroupVersionKind(v1alpha1.KVMDomainGroupVersionKind)
	cases := map[string]struct {
		mg   resource.Managed
		want string
	}{
		"TypeMeta":   {mg: withGVK, want: "KVMDomain"},
		"NoTypeMeta": {mg: &v1alpha1.SeedVolume{}, want: "SeedVolume"},
		"BaseImage":  {mg: &v1alpha1.BaseImage{}, want: "BaseImage"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Kind(tc.mg)); diff != "" {
				t.Errorf("Kind(): -want +got:\n%s", diff)
			}
		})
	}
}
