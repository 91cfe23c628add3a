package kvmdomain

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

func TestCordoned(t *testing.T) {
	cases := map[string]struct {
		reason        string
		unschedulable bool
		want          error
	}{
		"Schedulable": {reason: "an uncordoned host takes new domains"},
		"Cordoned": {reason: "a cordoned host refuses new domains, naming the host and the config",
			unschedulable: true, want: errors.Errorf(errCordoned, "root@h:22", "ClusterProviderConfig/a")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := cordoned(tc.unschedulable, "root@h:22", "ClusterProviderConfig/a")
			if diff := cmp.Diff(tc.want, got, test.EquateErrors()); diff != "" {
				t.Errorf("%s\ncordoned(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestCordonedHost: on a cordoned host a new KVMDomain is refused before anything is made; one
// whose domain exists is observed, updated and deleted as on any host.
func TestCordonedHost(t *testing.T) {
	refusal := errors.Errorf(errCordoned, "root@h:22", "ClusterProviderConfig/default")

	t.Run("CreateRefused", func(t *testing.T) {
		h := newFakeHost()
		e := newExt(h, false)
		e.unschedulable = true
		cr := kvm()
		_, err := e.Create(context.Background(), cr)
		if diff := cmp.Diff(refusal, err, test.EquateErrors()); diff != "" {
			t.Fatalf("Create(): -want error, +got error:\n%s", diff)
		}
		if len(h.domains) != 0 || len(h.Created) != 0 {
			t.Errorf("a refused Create made domains %v, volumes %v", h.domains, h.Created)
		}
	})

	t.Run("ExistingObserved", func(t *testing.T) {
		h := newFakeHost()
		withDomain(ourDomain, uid, libvirt.StateRunning)(t, h)
		withOverlay(true)(t, h)
		e := newExt(h, false)
		e.unschedulable = true
		o, err := e.Observe(context.Background(), kvm())
		if err != nil {
			t.Fatalf("Observe(): %v", err)
		}
		if !o.ResourceExists {
			t.Error("Observe(): an existing domain on a cordoned host is reported missing")
		}
	})

	t.Run("ExistingUpdated", func(t *testing.T) {
		h := newFakeHost()
		withDomain(ourDomain, uid, libvirt.StateRunning)(t, h)
		withOverlay(true)(t, h)
		e := newExt(h, false)
		e.unschedulable = true
		if _, err := e.Update(context.Background(), kvm()); err != nil && strings.Contains(err.Error(), "cordoned") {
			t.Errorf("Update() of an existing domain on a cordoned host refused: %v", err)
		}
	})

	t.Run("ExistingDeleted", func(t *testing.T) {
		h := newFakeHost()
		withDomain(ourDomain, uid, libvirt.StateShutOff)(t, h)
		withOverlay(true)(t, h)
		e := newExt(h, false)
		e.unschedulable = true
		if _, err := e.Delete(context.Background(), kvm(deletingNow)); err != nil {
			t.Fatalf("Delete(): %v", err)
		}
		if _, ok := h.domains[ourDomain]; ok {
			t.Error("Delete() on a cordoned host left the domain")
		}
	})
}
