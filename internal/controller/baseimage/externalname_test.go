package baseimage

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

func TestCheckExternalName(t *testing.T) {
	src := imagecache.Source{URL: "https://example.org/a.qcow2"}
	cases := map[string]struct {
		reason    string
		name      string
		published string
		wantErr   bool
	}{
		"None":            {reason: "no annotation yet: the initializer sets the derived one", name: ""},
		"Derived":         {reason: "the volume of the current source", name: imagecache.VolumeName(src)},
		"EarlierSource":   {reason: "the volume published before the source changed", name: "pkvm-base-old.qcow2", published: "pkvm-base-old.qcow2"},
		"AnotherVolume":   {reason: "any other name is refused", name: "pkvm-base-0123456789abcdef01234567.qcow2", wantErr: true},
		"AnotherTeamSeed": {reason: "a volume of another kind is refused", name: "team-a_web-6c1f0b6e.seed.iso", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cr := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "img"}}
			cr.Spec.ForProvider.Source.URL = src.URL
			cr.Status.AtProvider.VolumeName = tc.published
			if tc.name != "" {
				meta.SetExternalName(cr, tc.name)
			}
			err := checkExternalName(cr, src)
			if diff := cmp.Diff(tc.wantErr, err != nil); diff != "" {
				t.Errorf("%s\ncheckExternalName(): -want error, +got: %s (%v)", tc.reason, diff, err)
			}
		})
	}
}
