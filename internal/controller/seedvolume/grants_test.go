package seedvolume

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

// TestCreatePoolNotGranted: a seed in a pool the namespace was not granted is refused before
// its record or volume is made.
func TestCreatePoolNotGranted(t *testing.T) {
	s := fakestorage.New()
	e := newExternal(s)
	sv := cr(func(sv *v1alpha1.SeedVolume) { sv.Spec.ForProvider.Pool = "images" })
	want := errors.New(`pool "images" is not granted to namespace ns on ClusterProviderConfig/default: a namespace may use the config's defaults and what its spec.attachments grant it (nothing beyond the defaults)`)
	_, err := e.Observe(context.Background(), sv)
	if diff := cmp.Diff(want, err, test.EquateErrors()); diff != "" {
		t.Errorf("Observe(): -want, +got:\n%s", diff)
	}
	_, err = e.Create(context.Background(), sv)
	if diff := cmp.Diff(want, err, test.EquateErrors()); diff != "" {
		t.Errorf("Create(): -want, +got:\n%s", diff)
	}
	if n := s.Names("images"); len(n) != 0 {
		t.Errorf("a refused Create left %v in the pool", n)
	}
}
