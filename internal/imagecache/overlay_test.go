package imagecache

import (
	"context"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

func TestCreateOverlay(t *testing.T) {
	boom := errors.New("boom")
	const ov = "vm.root.qcow2"
	type want struct {
		err error
		// basePath is what create was given ("": not called).
		basePath string
		names    []string
	}
	cases := map[string]struct {
		reason string
		setup  func(t *testing.T, h *fakestorage.Storage)
		// during runs inside create, after the overlay exists.
		during func(h *fakestorage.Storage)
		want   want
	}{
		"Published": {
			reason: "a published base gets its overlay, onto its own file",
			setup:  func(t *testing.T, h *fakestorage.Storage) { published(t, h, volA, sumA, FormatQCOW2, us, rawSize) },
			want:   want{basePath: pathA, names: sortedNames(volA, MarkerName(volA), ov)},
		},
		"Unpublished": {
			reason: "a base without its marker (being removed) gets no overlay",
			setup:  func(_ *testing.T, h *fakestorage.Storage) { h.Put(tpool, volA, nil) },
			want:   want{err: &UnpublishedError{Volume: volA, Err: fakestorage.NotFound}, names: []string{volA}},
		},
		"UnpublishedMeanwhile": {
			reason: "a base another process unpublished while the overlay was made: the overlay is deleted again",
			setup:  func(t *testing.T, h *fakestorage.Storage) { published(t, h, volA, sumA, FormatQCOW2, us, rawSize) },
			during: func(h *fakestorage.Storage) { _ = h.DeleteVolume(context.Background(), tpool, MarkerName(volA)) },
			want:   want{err: &UnpublishedError{Volume: volA, Err: fakestorage.NotFound}, basePath: pathA, names: []string{volA}},
		},
		"UndoFails": {
			reason: "an overlay that cannot be deleted again says so",
			setup:  func(t *testing.T, h *fakestorage.Storage) { published(t, h, volA, sumA, FormatQCOW2, us, rawSize) },
			during: func(h *fakestorage.Storage) {
				_ = h.DeleteVolume(context.Background(), tpool, MarkerName(volA))
				h.Fail = failOn("DeleteVolume", ov, boom)
			},
			want: want{err: errors.Wrapf(boom, errOverlayUndo, volA), basePath: pathA, names: sortedNames(volA, ov)},
		},
		"BaseLookupFails": {
			reason: "a base whose file cannot be looked up gets no overlay",
			setup: func(t *testing.T, h *fakestorage.Storage) {
				published(t, h, volA, sumA, FormatQCOW2, us, rawSize)
				h.Fail = failOn("Volume", volA, boom)
			},
			want: want{err: errors.Wrapf(boom, errOverlayBase, volA), names: sortedNames(volA, MarkerName(volA))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h, sh := fakestorage.New(), testShared()
			tc.setup(t, h)
			basePath := ""
			create := func(p string) error {
				basePath = p
				h.PutOverlay(tpool, ov, p)
				if tc.during != nil {
					tc.during(h)
				}
				return nil
			}
			undo := func() error { return h.DeleteVolume(context.Background(), tpool, ov) }
			err := sh.CreateOverlay(context.Background(), h, tpool, volA, create, undo)
			h.Fail = nil
			if diff := cmp.Diff(tc.want.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nCreateOverlay(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			got := want{err: tc.want.err, basePath: basePath, names: names(h)}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), test.EquateErrors()); diff != "" {
				t.Errorf("%s\nCreateOverlay(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// A removal holds the base lock from its check for users to its delete: an overlay of the
// same process waits for it, and then finds the base unpublished.
func TestCreateOverlayWaitsForRemoval(t *testing.T) {
	h, sh := fakestorage.New(), testShared()
	published(t, h, volA, sumA, FormatQCOW2, us, rawSize)
	owns(t, h, volA, us)
	c := newFakeCache(h, sh, Downloads{})
	unlock, err := c.lock(context.Background(), tpool)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- sh.CreateOverlay(context.Background(), h, tpool, volA, func(string) error { return nil }, func() error { return nil })
	}()
	select {
	case err := <-done:
		t.Fatalf("CreateOverlay returned %v while the base lock was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	// The removal (here: its deletes) completes under the lock.
	for _, n := range []string{MarkerName(volA), volA, OwnerName(volA, us.UID)} {
		_ = h.DeleteVolume(context.Background(), tpool, n)
	}
	unlock()
	want := &UnpublishedError{Volume: volA, Err: fakestorage.NotFound}
	if diff := cmp.Diff(want, <-done, test.EquateErrors()); diff != "" {
		t.Errorf("CreateOverlay after a removal: -want error, +got error:\n%s", diff)
	}
}
