package baseimage

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// recorder keeps the events it is given.
type recorder struct{ events []event.Event }

func (r *recorder) Event(_ runtime.Object, e event.Event)    { r.events = append(r.events, e) }
func (r *recorder) WithAnnotations(...string) event.Recorder { return r }

var _ event.Recorder = (*recorder)(nil)

// TestRequireSHA256: a BaseImage without source.sha256 on a host that requires one is refused
// with the rule named, before the host or a download is asked.
func TestRequireSHA256(t *testing.T) {
	rule := "the provider's flag --require-image-sha256"
	cases := map[string]struct {
		reason  string
		rule    string
		cr      *v1alpha1.BaseImage
		cache   func(t *testing.T) *fakeCache
		wantErr error
		want    string // Ready reason
	}{
		"UnpinnedRefused": {
			reason:  "an unpinned image is refused, naming the rule; the cache is not asked",
			rule:    rule,
			cr:      image(unpinned),
			cache:   func(t *testing.T) *fakeCache { return &fakeCache{t: t} },
			wantErr: errors.Errorf(errSHA256, rule),
			want:    string(xpv2.ReasonUnavailable),
		},
		"PinnedGoesOn": {
			reason: "a pinned image goes on",
			rule:   rule,
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateAbsent}, nil
				}}
			},
		},
		"UnpinnedWithoutRule": {
			reason: "without the rule an unpinned image goes on",
			cr:     image(unpinned),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, nil }}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newExternal(tc.cache(t))
			e.requireSHA256 = tc.rule
			_, err := e.Observe(context.Background(), tc.cr)
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nObserve(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want, string(tc.cr.GetCondition(xpv2.TypeReady).Reason)); diff != "" {
				t.Errorf("%s\nReady reason: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestDownloadsOfNamespacedConfig: a namespaced ProviderConfig's imageSources cannot lift the
// built-in denial, while a ClusterProviderConfig's can.
func TestDownloadsOfNamespacedConfig(t *testing.T) {
	lift := v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "127.0.0.1/32"}, {CIDR: "169.254.169.254/32"}, {CIDR: "10.0.0.0/8"}}}
	for _, u := range []string{"http://127.0.0.1:8080/img", "http://169.254.169.254/latest", "http://10.1.2.3/img"} {
		for _, namespaced := range []bool{false, true} {
			dl, _, err := downloads(sourcepolicy.Platform{}, "ProviderConfig/mine", lift, namespaced)
			if err != nil {
				t.Fatal(err)
			}
			pu, _ := url.Parse(u)
			if got := dl.Policy.Check(sourcepolicy.Target{URL: pu}).Allowed; got == namespaced {
				t.Errorf("namespaced=%v: Check(%s).Allowed = %v", namespaced, u, got)
			}
		}
	}
	cr := image()
	cr.Spec.ProviderConfigReference = &xpv2.ProviderConfigReference{Kind: v1alpha1.ProviderConfigKind, Name: "mine"}
	if !namespacedConfig(cr) {
		t.Error("namespacedConfig(ProviderConfig) = false")
	}
	cr.Spec.ProviderConfigReference.Kind = v1alpha1.ClusterProviderConfigKind
	if namespacedConfig(cr) {
		t.Error("namespacedConfig(ClusterProviderConfig) = true")
	}
}

// TestDeleteLeavesSharedVolume: the last owner of a volume only other namespaces' disks use
// is deleted, with an event that counts those disks and names none.
func TestDeleteLeavesSharedVolume(t *testing.T) {
	c := &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return []imagecache.Image{published()}, nil },
		remove: func(string, string) (imagecache.Removal, error) {
			return imagecache.Removal{Left: true, OtherUsers: 2}, nil
		}}
	rec := &recorder{}
	e := newExternal(c)
	e.recorder = rec
	if _, err := e.Delete(context.Background(), image(deleted)); err != nil {
		t.Fatalf("Delete(): %v", err)
	}
	var msgs []string
	for _, ev := range rec.events {
		msgs = append(msgs, ev.Message)
	}
	want := []string{"Detached from default/" + volume + ", which 2 disk(s) of other namespaces still use; it is removed once unused"}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("Delete() events: -want, +got:\n%s", diff)
	}
	if !strings.Contains(msgs[0], "2 disk(s)") {
		t.Error("the event counts the other namespaces' disks")
	}
}
