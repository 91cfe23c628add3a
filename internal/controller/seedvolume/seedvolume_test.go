package seedvolume

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// fakeStorage is a Storage made of function fields.
type fakeStorage struct {
	volume   func(pool, name string) (libvirt.Volume, error)
	create   func(pool, xml string) (libvirt.Volume, error)
	upload   func(pool, name string, data []byte) error
	download func(pool, name string, w io.Writer) error
	delete   func(pool, name string) error
	disks    func() ([]libvirt.DomainDisk, error)
	resize   func(pool, name string, size uint64) error
}

func (f *fakeStorage) Volume(_ context.Context, pool, name string) (libvirt.Volume, error) {
	return f.volume(pool, name)
}
func (f *fakeStorage) CreateVolume(_ context.Context, pool, xml string) (libvirt.Volume, error) {
	return f.create(pool, xml)
}
func (f *fakeStorage) Upload(_ context.Context, pool, name string, r io.Reader, _ uint64) error {
	b, _ := io.ReadAll(r)
	return f.upload(pool, name, b)
}
func (f *fakeStorage) Download(_ context.Context, pool, name string, w io.Writer, _, _ uint64) error {
	return f.download(pool, name, w)
}
func (f *fakeStorage) DeleteVolume(_ context.Context, pool, name string) error {
	return f.delete(pool, name)
}
func (f *fakeStorage) DomainDisks(context.Context) ([]libvirt.DomainDisk, error) { return f.disks() }
func (f *fakeStorage) ResizeVolume(_ context.Context, pool, name string, size uint64) error {
	return f.resize(pool, name, size)
}

var errNotFound = golibvirt.Error{Code: uint32(golibvirt.ErrNoStorageVol), Message: "no volume"}

func seedVolume(userData string) *v1alpha1.SeedVolume {
	sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "0b5e2c4a-1111-2222-3333-444455556666"}}
	sv.Spec.ForProvider.UserData = &userData
	meta.SetExternalName(sv, "ns_vm-0b5e2c4a.seed.iso")
	return sv
}

func TestObserve(t *testing.T) {
	// The ISO the spec asks for, to serve it back as the host's content.
	want, err := (&external{}).build(context.Background(), seedVolume("#cloud-config\n"))
	if err != nil {
		t.Fatal(err)
	}
	vol := libvirt.Volume{Name: "ns_vm-0b5e2c4a.seed.iso", Path: "/pool/ns_vm-0b5e2c4a.seed.iso", CapacityBytes: uint64(len(want.ISO))}
	serve := func(b []byte) func(string, string, io.Writer) error {
		return func(_, _ string, w io.Writer) error { _, err := w.Write(b); return err }
	}
	corrupt := append([]byte{}, want.ISO...)
	corrupt[len(corrupt)-1] ^= 0xff

	cases := map[string]struct {
		storage *fakeStorage
		want    managed.ExternalObservation
		wantErr string
	}{
		"Absent": {
			storage: &fakeStorage{volume: func(string, string) (libvirt.Volume, error) { return libvirt.Volume{}, errNotFound }},
			want:    managed.ExternalObservation{ResourceExists: false},
		},
		"Identical": {
			storage: &fakeStorage{volume: func(string, string) (libvirt.Volume, error) { return vol, nil }, download: serve(want.ISO)},
			want:    managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true},
		},
		"SameSizeOtherBytes": {
			storage: &fakeStorage{volume: func(string, string) (libvirt.Volume, error) { return vol, nil }, download: serve(corrupt)},
			want:    managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: false},
		},
		"Truncated": {
			storage: &fakeStorage{volume: func(string, string) (libvirt.Volume, error) {
				v := vol
				v.CapacityBytes = 4096
				return v, nil
			}},
			want: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: false},
		},
		"LookupFails": {
			storage: &fakeStorage{volume: func(string, string) (libvirt.Volume, error) { return libvirt.Volume{}, errors.New("boom") }},
			wantErr: errLookup,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := &external{storage: tc.storage, defaults: v1alpha1.HostDefaults{Pool: "default"}, recorder: event.NewNopRecorder()}
			got, err := e.Observe(context.Background(), seedVolume("#cloud-config\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Observe(): want error %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Observe(): %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Observe(): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestDeleteRefusesWhileAttached(t *testing.T) {
	vol := libvirt.Volume{Name: "ns_vm-0b5e2c4a.seed.iso", Path: "/pool/ns_vm-0b5e2c4a.seed.iso"}
	deleted := false
	e := &external{defaults: v1alpha1.HostDefaults{Pool: "default"}, storage: &fakeStorage{
		volume: func(string, string) (libvirt.Volume, error) { return vol, nil },
		disks: func() ([]libvirt.DomainDisk, error) {
			return []libvirt.DomainDisk{{Domain: "ns_vm", Target: "sda", Path: vol.Path}}, nil
		},
		delete: func(string, string) error { deleted = true; return nil },
	}}
	_, err := e.Delete(context.Background(), seedVolume(""))
	if err == nil || !strings.Contains(err.Error(), "attached to domain ns_vm") || deleted {
		t.Fatalf("Delete(): want refusal naming the domain and no delete, got err=%v deleted=%v", err, deleted)
	}
}
