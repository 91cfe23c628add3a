package kvmdomain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestReferrers(t *testing.T) {
	dom := func(name string, base, seed *string) v1alpha1.KVMDomain {
		return v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Spec: v1alpha1.KVMDomainSpec{ForProvider: v1alpha1.KVMDomainParameters{BaseImageName: base, SeedVolumeName: seed}}}
	}
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: name}}
	}
	domains := []v1alpha1.KVMDomain{
		dom("a", ptr.To("debian"), ptr.To("a-seed")),
		dom("b", ptr.To("debian"), ptr.To("b-seed")),
		dom("c", ptr.To("alpine"), nil),
		dom("d", nil, ptr.To("debian")), // a seed that happens to share the image's name
	}
	cases := map[string]struct {
		name string
		ref  func(*v1alpha1.KVMDomain) *string
		want []reconcile.Request
	}{
		"EveryDomainOfAnImage": {name: "debian", ref: baseImageOf, want: []reconcile.Request{req("a"), req("b")}},
		"OneDomainOfASeed":     {name: "b-seed", ref: seedVolumeOf, want: []reconcile.Request{req("b")}},
		"SameNameOtherKind":    {name: "debian", ref: seedVolumeOf, want: []reconcile.Request{req("d")}},
		"Nobody":               {name: "ubuntu", ref: baseImageOf},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, referrers(domains, tc.name, tc.ref)); diff != "" {
				t.Errorf("referrers(): -want +got:\n%s", diff)
			}
		})
	}
}

func TestInputChanged(t *testing.T) {
	seed := func(c xpv2.Condition, sha string) *v1alpha1.SeedVolume {
		s := &v1alpha1.SeedVolume{}
		s.SetConditions(c)
		s.Status.AtProvider.VolumeName, s.Status.AtProvider.ISOSHA256 = "v", sha
		return s
	}
	image := func(c xpv2.Condition, vol string, done int64) *v1alpha1.BaseImage {
		b := &v1alpha1.BaseImage{}
		b.SetConditions(c)
		b.Status.AtProvider.VolumeName = vol
		b.Status.AtProvider.Upload = &v1alpha1.UploadProgress{BytesDone: done}
		return b
	}
	cases := map[string]struct {
		old, new client.Object
		want     bool
	}{
		"ImageTurnsReady":      {old: image(xpv2.Creating(), "", 10), new: image(xpv2.Available(), "pkvm-base-1", 0), want: true},
		"ImageUploadProgress":  {old: image(xpv2.Creating(), "", 10), new: image(xpv2.Creating(), "", 20)},
		"ImageNewVolume":       {old: image(xpv2.Available(), "pkvm-base-1", 0), new: image(xpv2.Available(), "pkvm-base-2", 0), want: true},
		"ImageStopsBeingReady": {old: image(xpv2.Available(), "pkvm-base-1", 0), new: image(xpv2.Unavailable(), "pkvm-base-1", 0), want: true},
		"SeedNewContent":       {old: seed(xpv2.Available(), "aa"), new: seed(xpv2.Available(), "bb"), want: true},
		"SeedUnchanged":        {old: seed(xpv2.Available(), "aa"), new: seed(xpv2.Available(), "aa")},
		"SeedTurnsReady":       {old: seed(xpv2.Creating(), ""), new: seed(xpv2.Available(), "aa"), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := inputChanged(ctrlevent.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
				t.Errorf("inputChanged() = %t, want %t", got, tc.want)
			}
		})
	}
}
