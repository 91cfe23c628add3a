package baseimage

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// TestCreatePoolNotGranted: a BaseImage in a pool the namespace was not granted is refused
// before the pool is looked at (Observe) and before a publish job (a download, a volume)
// starts (Create).
func TestCreatePoolNotGranted(t *testing.T) {
	e := newExternal(absentCache{})
	b := image(func(b *v1alpha1.BaseImage) { b.Spec.ForProvider.Pool = "images" })
	want := errors.New(`pool "images" is not granted to namespace ns on ClusterProviderConfig/default: a namespace may use the config's defaults and what its spec.attachments grant it (nothing beyond the defaults)`)
	_, err := e.Observe(context.Background(), b)
	if diff := cmp.Diff(want, err, test.EquateErrors()); diff != "" {
		t.Errorf("Observe(): -want, +got:\n%s", diff)
	}
	_, err = e.Create(context.Background(), b)
	if diff := cmp.Diff(want, err, test.EquateErrors()); diff != "" {
		t.Errorf("Create(): -want, +got:\n%s", diff)
	}
	if j := e.jobs.get(b.GetUID()); j != nil {
		t.Error("a refused Create started a publish job")
	}
}
