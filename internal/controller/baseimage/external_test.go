package baseimage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

// fakeCache is a Cache made of function fields; a nil field fails the test if called.
type fakeCache struct {
	t            *testing.T
	lookup       func(pool string, src imagecache.Source) (imagecache.Image, error)
	lookupVolume func(pool, volume string) (imagecache.Image, error)
	publish      func(pool string, src imagecache.Source) (imagecache.Result, error)
	remove       func(pool, volume string) error
	owned        func(pool string) ([]imagecache.Image, error)
	removed      []string
}

func (f *fakeCache) Lookup(_ context.Context, pool string, src imagecache.Source, _ string) (imagecache.Image, error) {
	if f.lookup == nil {
		f.t.Fatal("unexpected Lookup")
	}
	return f.lookup(pool, src)
}
func (f *fakeCache) LookupVolume(_ context.Context, pool, volume, _ string) (imagecache.Image, error) {
	if f.lookupVolume == nil {
		f.t.Fatal("unexpected LookupVolume")
	}
	return f.lookupVolume(pool, volume)
}
func (f *fakeCache) Publish(_ context.Context, pool string, src imagecache.Source, _ imagecache.Owner, _ imagecache.ProgressFunc) (imagecache.Result, error) {
	if f.publish == nil {
		f.t.Error("unexpected Publish")
		return imagecache.Result{}, errors.New("unexpected")
	}
	return f.publish(pool, src)
}
func (f *fakeCache) Remove(_ context.Context, pool, volume, _ string) error {
	if f.remove == nil {
		f.t.Fatal("unexpected Remove")
	}
	err := f.remove(pool, volume)
	if err == nil {
		f.removed = append(f.removed, pool+"/"+volume)
	}
	return err
}
func (f *fakeCache) Owned(_ context.Context, pool, _ string) ([]imagecache.Image, error) {
	if f.owned == nil {
		f.t.Fatal("unexpected Owned")
	}
	return f.owned(pool)
}

const (
	testURL = "https://example.org/debian.qcow2"
	uid     = "4b1e6a2c-0000-0000-0000-000000000001"
)

var (
	src     = imagecache.Source{URL: testURL, Format: imagecache.Format(v1alpha1.ImageFormatQCOW2)}
	volume  = imagecache.VolumeName(src)
	errBoom = errors.New("boom")
)

func image(opts ...func(*v1alpha1.BaseImage)) *v1alpha1.BaseImage {
	b := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "debian", UID: types.UID(uid)}}
	b.Spec.ForProvider.Source.URL = testURL
	b.Spec.ForProvider.Format = v1alpha1.ImageFormatQCOW2
	meta.SetExternalName(b, volume)
	for _, o := range opts {
		o(b)
	}
	return b
}

func deleted(b *v1alpha1.BaseImage) { now := metav1.Now(); b.SetDeletionTimestamp(&now) }
func retaining(pv ...string) func(*v1alpha1.BaseImage) {
	return func(b *v1alpha1.BaseImage) { b.Status.AtProvider.RetainedVolumes = pv }
}

func published() imagecache.Image {
	return imagecache.Image{State: imagecache.StatePublished, Pool: "default", Volume: volume, Path: "/pool/" + volume,
		Marker: &imagecache.Record{SHA256: strings.Repeat("a", 64), Verified: true, SizeBytes: 10, VirtualSizeBytes: 20, SourceURL: testURL}}
}

func newExternal(c Cache) *external {
	return &external{jobs: newJobs(nil), recorder: event.NewNopRecorder(), defaults: v1alpha1.HostDefaults{Pool: "default"}, cache: c, now: time.Now}
}

// result is what the Observe tests compare.
type result struct {
	Obs      managed.ExternalObservation
	Err      string
	Ready    string // Ready condition reason
	Volume   string // status.atProvider.volumeName
	Retained []string
	Upload   bool
}

func observe(t *testing.T, e *external, cr *v1alpha1.BaseImage, errSub string) result {
	t.Helper()
	o, err := e.Observe(context.Background(), cr)
	r := result{Obs: o, Ready: string(cr.GetCondition(xpv2.TypeReady).Reason), Volume: cr.Status.AtProvider.VolumeName,
		Retained: cr.Status.AtProvider.RetainedVolumes, Upload: cr.Status.AtProvider.Upload != nil}
	if err != nil {
		r.Err = err.Error()
		if errSub != "" && strings.Contains(r.Err, errSub) {
			r.Err = errSub
		}
	}
	return r
}

func TestObserve(t *testing.T) {
	cases := map[string]struct {
		reason string
		cr     *v1alpha1.BaseImage
		cache  func(t *testing.T) *fakeCache
		job    func(e *external) // a job to have started before Observe
		errSub string
		want   result
	}{
		"ForeignExternalName": {
			reason: "an external name of another volume is refused before the host is asked",
			cr:     image(func(b *v1alpha1.BaseImage) { meta.SetExternalName(b, "team-b_x-12345678.seed.iso") }),
			cache:  func(t *testing.T) *fakeCache { return &fakeCache{t: t} },
			errSub: "is not the name of this BaseImage's volume", want: result{Err: "is not the name of this BaseImage's volume"},
		},
		"Absent": {
			reason: "nothing on the host and no job: Create publishes",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateAbsent}, nil
				}}
			},
			want: result{},
		},
		"Published": {
			reason: "a published image is Ready with its volume in status",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) { return published(), nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(xpv2.ReasonAvailable), Volume: volume},
		},
		"PublishedNewSourceRetainsOld": {
			reason: "after a source change the old volume is retained and Update removes it",
			cr: image(func(b *v1alpha1.BaseImage) {
				b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool = "pkvm-base-old.qcow2", "default"
			}),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) { return published(), nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true}, Ready: string(xpv2.ReasonAvailable), Volume: volume, Retained: []string{"default/pkvm-base-old.qcow2"}},
		},
		"OwnedByOther": {
			reason: "an image another BaseImage owns is refused",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) {
					return imagecache.Image{}, &imagecache.OwnedByOtherError{Volume: volume, Owner: imagecache.Owner{UID: "other"}}
				}}
			},
			errSub: errOtherOwner, want: result{Err: errOtherOwner},
		},
		"LookupFails": {
			reason: "a failed lookup is an error",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) { return imagecache.Image{}, errBoom }}
			},
			errSub: errLookup, want: result{Err: errLookup},
		},
		"UploadRunning": {
			reason: "a running upload shows progress and is up to date",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				block := make(chan struct{})
				e.jobs.start(types.UID(uid), types.NamespacedName{}, src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					<-block
					return imagecache.Result{}, nil
				})
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(xpv2.ReasonCreating), Upload: true},
		},
		"JobOfEarlierSource": {
			reason: "a job for another source is not this one's: publish again",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateAbsent}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, imagecache.Source{URL: "https://example.org/old.qcow2"}, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					return imagecache.Result{}, nil
				})
				<-j.done
			},
			want: result{},
		},
		"RetryableFailureShown": {
			reason: "a failed upload worth retrying is shown, Synced=False with the reason, until its backoff has passed",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					return imagecache.Result{}, errBoom
				})
				<-j.done
			},
			want: result{Err: "cannot publish the image; it is tried again 10s after this attempt failed (failed attempts in a row: 1): boom", Ready: string(xpv2.Unavailable().Reason)},
		},
		"RetryableFailureRetried": {
			reason: "a failed upload worth retrying starts again once its backoff has passed",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookup: func(string, imagecache.Source) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					return imagecache.Result{}, errBoom
				})
				<-j.done
				j.finishedAt = time.Now().Add(-publishRetryInitial)
			},
			want: result{},
		},
		"DeletingOwned": {
			reason: "while deleting, volumes this BaseImage owns exist",
			cr:     image(deleted),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return []imagecache.Image{published()}, nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true}},
		},
		"DeletingRetainedOnly": {
			reason: "while deleting, a retained volume still present exists",
			cr:     image(deleted, retaining("default/pkvm-base-old.qcow2")),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, nil },
					lookupVolume: func(string, string) (imagecache.Image, error) { return published(), nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true}, Retained: []string{"default/pkvm-base-old.qcow2"}},
		},
		"DeletingRetainedOfAnother": {
			reason: "while deleting, a retained volume another owns is not ours",
			cr:     image(deleted, retaining("default/pkvm-base-old.qcow2")),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, nil },
					lookupVolume: func(string, string) (imagecache.Image, error) {
						return imagecache.Image{}, &imagecache.OwnedByOtherError{Owner: imagecache.Owner{UID: "x"}}
					}}
			},
			want: result{Retained: []string{"default/pkvm-base-old.qcow2"}},
		},
		"DeletingIgnoresExternalName": {
			reason: "while deleting, the annotation does not matter",
			cr:     image(deleted, func(b *v1alpha1.BaseImage) { meta.SetExternalName(b, "other") }),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, nil }}
			},
			want: result{},
		},
		"DeletingOwnedFails": {
			reason: "while deleting, a failed listing is an error",
			cr:     image(deleted),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, errBoom }}
			},
			errSub: errOwned, want: result{Err: errOwned},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newExternal(tc.cache(t))
			if tc.job != nil {
				tc.job(e)
			}
			got := observe(t, e, tc.cr, tc.errSub)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nObserve(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCreate(t *testing.T) {
	published := make(chan imagecache.Source, 1)
	c := &fakeCache{t: t, publish: func(_ string, s imagecache.Source) (imagecache.Result, error) {
		published <- s
		return imagecache.Result{}, nil
	}}
	e := newExternal(c)
	cr := image(func(b *v1alpha1.BaseImage) { meta.SetExternalName(b, "pkvm-base-old.qcow2") })
	if _, err := e.Create(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-published:
		if s != src {
			t.Errorf("Create() published %+v, want %+v", s, src)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Create() started no publish job")
	}
	if got := meta.GetExternalName(cr); got != volume {
		t.Errorf("Create() external name %q, want the current source's volume %q", got, volume)
	}
	if r := cr.GetCondition(xpv2.TypeReady).Reason; r != xpv2.ReasonCreating {
		t.Errorf("Create() Ready reason %q, want Creating", r)
	}
}

func TestUpdate(t *testing.T) {
	cases := map[string]struct {
		reason   string
		retained []string
		remove   func(pool, volume string) error
		wantErr  string
		wantKeep []string
		wantGone []string
	}{
		"Unused": {
			reason: "an old volume nothing uses goes", retained: []string{"default/a"},
			remove: func(string, string) error { return nil }, wantGone: []string{"default/a"},
		},
		"InUse": {
			reason: "an old volume an overlay uses is kept", retained: []string{"default/a"},
			remove:   func(string, string) error { return &imagecache.InUseError{Volume: "a", Users: []string{"ns_vm"}} },
			wantKeep: []string{"default/a"},
		},
		"OwnedByOther": {
			reason: "an old volume another owns is forgotten, not removed", retained: []string{"default/a"},
			remove: func(string, string) error { return &imagecache.OwnedByOtherError{Owner: imagecache.Owner{UID: "x"}} },
		},
		"Fails": {
			reason: "a failed removal is an error", retained: []string{"default/a"},
			remove: func(string, string) error { return errBoom }, wantErr: "cannot remove volume default/a",
			wantKeep: []string{"default/a"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &fakeCache{t: t, remove: tc.remove}
			cr := image(retaining(tc.retained...))
			_, err := newExternal(c).Update(context.Background(), cr)
			gotErr := ""
			if err != nil {
				gotErr = tc.wantErr
				if !strings.Contains(err.Error(), tc.wantErr) {
					gotErr = err.Error()
				}
			}
			if diff := cmp.Diff([]any{tc.wantErr, tc.wantKeep, tc.wantGone}, []any{gotErr, cr.Status.AtProvider.RetainedVolumes, c.removed}); diff != "" {
				t.Errorf("%s\nUpdate(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	cases := map[string]struct {
		reason   string
		retained []string
		owned    []imagecache.Image
		remove   func(pool, volume string) error
		wantErr  string
		wantGone []string
	}{
		"OwnedAndRetained": {
			reason: "every volume of this BaseImage goes", retained: []string{"default/old"}, owned: []imagecache.Image{published()},
			remove: func(string, string) error { return nil }, wantGone: []string{"default/old", "default/" + volume},
		},
		"Held": {
			reason: "deletion is held while an overlay uses the image", owned: []imagecache.Image{published()},
			remove:  func(string, string) error { return &imagecache.InUseError{Volume: volume, Users: []string{"ns_vm"}} },
			wantErr: "deletion is held: the image is still in use by ns_vm",
		},
		"OwnedByOther": {
			reason: "a retained volume another owns is left alone", retained: []string{"default/old"},
			remove: func(string, string) error { return &imagecache.OwnedByOtherError{Owner: imagecache.Owner{UID: "x"}} },
		},
		"Fails": {
			reason: "a failed removal is an error", owned: []imagecache.Image{published()},
			remove: func(string, string) error { return errBoom }, wantErr: "cannot remove volume default/" + volume,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &fakeCache{t: t, remove: tc.remove, owned: func(string) ([]imagecache.Image, error) { return tc.owned, nil }}
			_, err := newExternal(c).Delete(context.Background(), image(deleted, retaining(tc.retained...)))
			gotErr := ""
			if err != nil {
				gotErr = tc.wantErr
				if !strings.Contains(err.Error(), tc.wantErr) {
					gotErr = err.Error()
				}
			}
			gone := c.removed
			if len(gone) == 2 && gone[0] > gone[1] {
				gone[0], gone[1] = gone[1], gone[0]
			}
			if diff := cmp.Diff([]any{tc.wantErr, tc.wantGone}, []any{gotErr, gone}); diff != "" {
				t.Errorf("%s\nDelete(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
