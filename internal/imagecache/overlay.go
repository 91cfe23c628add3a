package imagecache

import (
	"context"
	"fmt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	errOverlayUndo = "the base image volume %s is being removed, and the overlay onto it cannot be deleted"
	errOverlayBase = "cannot look up the base image volume %s"
	errOverlayLock = "cannot lock the base images of pool %s"
)

// UnpublishedError says a base image volume is not published on the host (its marker is gone:
// it is being removed, or not yet published again), so no overlay is created onto it. Err is
// why the marker could not be found.
type UnpublishedError struct {
	Volume string
	Err    error
}

func (e *UnpublishedError) Error() string {
	return fmt.Sprintf("the base image volume %s is not published on the host (it is being removed, or not yet re-published): %v", e.Volume, e.Err)
}

// Unwrap returns Err.
func (e *UnpublishedError) Unwrap() error { return e.Err }

// OverlayHost is what CreateOverlay needs of a host; *libvirt.Client is one.
type OverlayHost interface {
	Address() string
	Volume(ctx context.Context, pool, name string) (libvirt.Volume, error)
	VolumeInfo(ctx context.Context, pool, name string) (libvirt.VolumeInfo, error)
}

// CreateOverlay is the one way to create an overlay backing onto the base volume base of pool
// on host h: create makes it, given the base's file; undo deletes it again. It holds the
// pool's base lock, which Remove takes between its check for overlays and its delete, so no
// overlay of this process appears in between; and it runs create only while base is published
// (its marker exists). Another process's removal unpublishes before its last check, so the
// marker is looked at again once the overlay exists: an overlay onto a base going away is
// deleted again (undo; nothing booted from it yet) and CreateOverlay fails. One of the two
// sides always sees the other.
func (s *Shared) CreateOverlay(ctx context.Context, h OverlayHost, pool, base string, create func(basePath string) error, undo func() error) error {
	unlock, err := s.bases.lock(ctx, h.Address(), pool)
	if err != nil {
		return errors.Wrapf(err, errOverlayLock, pool)
	}
	defer unlock()
	if _, err := h.VolumeInfo(ctx, pool, MarkerName(base)); err != nil {
		return &UnpublishedError{Volume: base, Err: err}
	}
	bv, err := h.Volume(ctx, pool, base)
	if err != nil {
		return errors.Wrapf(err, errOverlayBase, base)
	}
	if err := create(bv.Path); err != nil {
		return err
	}
	if _, err := h.VolumeInfo(ctx, pool, MarkerName(base)); err != nil {
		if derr := undo(); derr != nil {
			return errors.Wrapf(derr, errOverlayUndo, base)
		}
		return &UnpublishedError{Volume: base, Err: err}
	}
	return nil
}
