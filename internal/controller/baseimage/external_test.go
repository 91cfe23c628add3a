package baseimage

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/publishqueue"
)

// fakeCache is a Cache made of function fields; a nil field fails the test if called.
type fakeCache struct {
	t            *testing.T
	lookupVolume func(pool, volume string) (imagecache.Image, error)
	publish      func(pool string, src imagecache.Source) (imagecache.Result, error)
	remove       func(pool, volume string) (imagecache.Removal, error)
	owned        func(pool string) ([]imagecache.Image, error)
	images       func(pool, namespace, except string) (int, error)
	removed      []string
	swept        int
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
func (f *fakeCache) Remove(_ context.Context, pool, volume, _ string) (imagecache.Removal, error) {
	if f.remove == nil {
		f.t.Fatal("unexpected Remove")
	}
	r, err := f.remove(pool, volume)
	if err == nil {
		f.removed = append(f.removed, pool+"/"+volume)
	}
	return r, err
}

// removes is a remove func that returns err (nil: the volume went).
func removes(err error) func(string, string) (imagecache.Removal, error) {
	return func(string, string) (imagecache.Removal, error) { return imagecache.Removal{}, err }
}
func (f *fakeCache) Sweep(context.Context, string) ([]string, map[string]error, error) {
	f.swept++
	return nil, nil, nil
}
func (f *fakeCache) NamespaceImages(_ context.Context, pool, namespace, except string) (int, error) {
	if f.images == nil {
		f.t.Fatal("unexpected NamespaceImages")
	}
	return f.images(pool, namespace, except)
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
	digest  = strings.Repeat("a", 64)
	src     = imagecache.Source{URL: testURL, SHA256: digest, Format: imagecache.Format(v1alpha1.ImageFormatQCOW2)}
	volume  = imagecache.VolumeName(src)
	errBoom = errors.New("boom")
)

func image(opts ...func(*v1alpha1.BaseImage)) *v1alpha1.BaseImage {
	b := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "debian", UID: types.UID(uid)}}
	b.Spec.ForProvider.Source.URL = testURL
	b.Spec.ForProvider.Source.SHA256 = digest
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

// unpinned drops the sha256 of the source.
func unpinned(b *v1alpha1.BaseImage) {
	b.Spec.ForProvider.Source.SHA256 = ""
	meta.SetExternalName(b, imagecache.ExternalName(source(b)))
}

// published is the image published by another namespace's BaseImage from another URL, with an
// owner record of ours for src.
func published() imagecache.Image {
	return imagecache.Image{State: imagecache.StatePublished, Pool: "default", Volume: volume, Path: "/pool/" + volume, HasOwn: true,
		Owner:  imagecache.Owner{UID: "other-uid", Namespace: "team-b", Name: "theirs"},
		Marker: &imagecache.Record{SHA256: digest, Verified: true, SizeBytes: 10, VirtualSizeBytes: 20, SourceURL: "https://mirror.team-b.internal/secret-path.qcow2", Owner: imagecache.Owner{UID: "other-uid"}},
		Own:    &imagecache.Record{State: imagecache.RecordOwner, SourceURL: testURL, ExpectedSHA256: digest, Format: imagecache.FormatQCOW2}}
}

// withOwn is img with the owner record asking for s, or none (nil).
func withOwn(img imagecache.Image, s *imagecache.Source) imagecache.Image {
	if s == nil {
		img.Own, img.HasOwn = nil, false
		return img
	}
	img.Own = &imagecache.Record{State: imagecache.RecordOwner, SourceURL: s.URL, ExpectedSHA256: s.SHA256, Format: s.Format}
	return img
}

func newExternal(c Cache) *external {
	d := v1alpha1.HostDefaults{Pool: "default"}
	g, _ := hostgrants.For("ClusterProviderConfig/default", v1alpha1.ProviderConfigSpec{Defaults: d}, hostgrants.Namespace{Name: "ns"}, false)
	return &external{jobs: newJobs(nil, nil), recorder: event.NewNopRecorder(), defaults: d, grant: g, cache: c, now: time.Now}
}

// result is what the Observe tests compare.
type result struct {
	Obs      managed.ExternalObservation
	Ready    string // Ready condition reason
	Volume   string // status.atProvider.volumeName
	Retained []string
	Upload   bool
}

// observe runs Observe and returns what the tests compare and its error.
func observe(e *external, cr *v1alpha1.BaseImage) (result, error) {
	o, err := e.Observe(context.Background(), cr)
	r := result{Obs: o, Ready: string(cr.GetCondition(xpv2.TypeReady).Reason), Volume: cr.Status.AtProvider.VolumeName,
		Retained: cr.Status.AtProvider.RetainedVolumes, Upload: cr.Status.AtProvider.Upload != nil}
	return r, err
}

func TestObserve(t *testing.T) {
	cases := map[string]struct {
		reason  string
		cr      *v1alpha1.BaseImage
		cache   func(t *testing.T) *fakeCache
		job     func(e *external) // a job to have started before Observe
		wantErr error             // compared with test.EquateErrors
		want    result
	}{
		"ForeignExternalName": {
			reason:  "an external name of another volume is refused before the host is asked",
			cr:      image(func(b *v1alpha1.BaseImage) { meta.SetExternalName(b, "team-b_x-12345678.seed.iso") }),
			cache:   func(t *testing.T) *fakeCache { return &fakeCache{t: t} },
			wantErr: errors.Errorf(errExtName, "team-b_x-12345678.seed.iso", volume, volume),
		},
		"Absent": {
			reason: "nothing on the host and no job: Create publishes",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateAbsent}, nil
				}}
			},
			want: result{},
		},
		"Published": {
			reason: "a published image is Ready with its volume in status",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) { return published(), nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(xpv2.ReasonAvailable), Volume: volume},
		},
		"PublishedNewSourceRetainsOld": {
			reason: "after a source change the old volume is retained and Update removes it",
			cr: image(func(b *v1alpha1.BaseImage) {
				b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool = "pkvm-base-0123456789abcdef01234567.qcow2", "default"
			}),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) { return published(), nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true}, Ready: string(xpv2.ReasonAvailable), Volume: volume, Retained: []string{"default/pkvm-base-0123456789abcdef01234567.qcow2"}},
		},
		"PublishedNotAttached": {
			reason: "a volume of the digest cached for other BaseImages: Create attaches this one",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) { return withOwn(published(), nil), nil }}
			},
			want: result{},
		},
		"AttachedForAnotherSource": {
			reason: "an owner record for an earlier URL: Create records the current one",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return withOwn(published(), &imagecache.Source{URL: "https://example.org/old.qcow2", SHA256: digest, Format: imagecache.FormatQCOW2}), nil
				}}
			},
			want: result{},
		},
		"UnpinnedFromStatus": {
			reason: "an unpinned image is observed on the volume in status, attached for this URL",
			cr: image(unpinned, func(b *v1alpha1.BaseImage) {
				b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool = volume, "default"
			}),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(_, v string) (imagecache.Image, error) {
					if v != volume {
						t.Errorf("LookupVolume(%s), want the volume in status", v)
					}
					return withOwn(published(), &imagecache.Source{URL: testURL, Format: imagecache.FormatQCOW2}), nil
				}}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(xpv2.ReasonAvailable), Volume: volume},
		},
		"UnpinnedURLChanged": {
			reason: "an unpinned image whose URL changed: its volume was published for the old one, publish again",
			cr: image(unpinned, func(b *v1alpha1.BaseImage) {
				b.Status.AtProvider.VolumeName, b.Status.AtProvider.Pool = volume, "default"
			}),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return withOwn(published(), &imagecache.Source{URL: "https://example.org/old.qcow2", Format: imagecache.FormatQCOW2}), nil
				}}
			},
			want: result{Volume: volume},
		},
		"UnpinnedStatusLost": {
			reason: "an unpinned image without status finds its volume by its owner record",
			cr:     image(unpinned),
			cache: func(t *testing.T) *fakeCache {
				img := withOwn(published(), &imagecache.Source{URL: testURL, Format: imagecache.FormatQCOW2})
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return []imagecache.Image{img}, nil },
					lookupVolume: func(string, string) (imagecache.Image, error) { return img, nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(xpv2.ReasonAvailable), Volume: volume},
		},
		"JobFoundOwnedByOther": {
			reason: "a data volume of the digest's name that no record names is refused",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, "", src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					return imagecache.Result{}, &imagecache.OwnedByOtherError{Volume: volume}
				})
				<-j.done
			},
			wantErr: errors.Wrap(&imagecache.OwnedByOtherError{Volume: volume}, errOtherOwner), want: result{Ready: string(xpv2.ReasonUnavailable)},
		},
		"LookupFails": {
			reason: "a failed lookup is an error",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) { return imagecache.Image{}, errBoom }}
			},
			wantErr: errors.Wrap(errBoom, errLookup),
		},
		"UploadRunning": {
			reason: "a running upload shows progress and is up to date",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				block := make(chan struct{})
				e.jobs.start(types.UID(uid), types.NamespacedName{}, "", src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					<-block
					return imagecache.Result{}, nil
				})
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(xpv2.ReasonCreating), Upload: true},
		},
		"Queued": {
			reason: "a job waiting for its turn in the publish queue says so, with its place, and is up to date",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				e.jobs = newJobs(publishqueue.New(publishqueue.Limits{Total: 1}), nil)
				block := make(chan struct{})
				blocked := func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					<-block
					return imagecache.Result{}, nil
				}
				entered := func(j *job) *job {
					for j.ticket.Load() == nil { // it enters the queue in its goroutine
						runtime.Gosched()
					}
					return j
				}
				entered(e.jobs.start("uid-of-another", types.NamespacedName{}, "h", src, e.policy, blocked))
				entered(e.jobs.start(types.UID(uid), types.NamespacedName{}, "h", src, e.policy, blocked))
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true, ResourceUpToDate: true}, Ready: string(ReasonQueued)},
		},
		"JobOfEarlierSource": {
			reason: "a job for another source is not this one's: publish again",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateAbsent}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, "", imagecache.Source{URL: "https://example.org/old.qcow2"}, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
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
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, "", src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
					return imagecache.Result{}, errBoom
				})
				<-j.done
			},
			wantErr: errors.Wrapf(errBoom, errRetryLater, 10*time.Second, 1),
			want:    result{Ready: string(xpv2.Unavailable().Reason)},
		},
		"RetryableFailureRetried": {
			reason: "a failed upload worth retrying starts again once its backoff has passed",
			cr:     image(),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, lookupVolume: func(string, string) (imagecache.Image, error) {
					return imagecache.Image{State: imagecache.StateDebris}, nil
				}}
			},
			job: func(e *external) {
				j := e.jobs.start(types.UID(uid), types.NamespacedName{}, "", src, e.policy, func(context.Context, imagecache.ProgressFunc) (imagecache.Result, error) {
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
			cr:     image(deleted, retaining("default/pkvm-base-0123456789abcdef01234567.qcow2")),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, nil },
					lookupVolume: func(string, string) (imagecache.Image, error) { return published(), nil }}
			},
			want: result{Obs: managed.ExternalObservation{ResourceExists: true}, Retained: []string{"default/pkvm-base-0123456789abcdef01234567.qcow2"}},
		},
		"DeletingRetainedOfAnother": {
			reason: "while deleting, a retained volume another owns is not ours",
			cr:     image(deleted, retaining("default/pkvm-base-0123456789abcdef01234567.qcow2")),
			cache: func(t *testing.T) *fakeCache {
				return &fakeCache{t: t, owned: func(string) ([]imagecache.Image, error) { return nil, nil },
					lookupVolume: func(string, string) (imagecache.Image, error) { return withOwn(published(), nil), nil }}
			},
			want: result{Retained: []string{"default/pkvm-base-0123456789abcdef01234567.qcow2"}},
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
			wantErr: errors.Wrap(errBoom, errOwned),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newExternal(tc.cache(t))
			if tc.job != nil {
				tc.job(e)
			}
			got, err := observe(e, tc.cr)
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nObserve(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nObserve(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestPublishedShowsOwnRecords: a BaseImage attached to a volume another namespace's
// BaseImage published shows the digest and sizes of the bytes, its own URL (never where the
// other one downloaded from), and whether its own spec pinned the digest.
func TestPublishedShowsOwnRecords(t *testing.T) {
	cases := map[string]struct {
		cr           *v1alpha1.BaseImage
		img          imagecache.Image
		wantURL      string
		wantVerified bool
	}{
		"PinnedAttached": {cr: image(), img: published(), wantURL: testURL, wantVerified: true},
		"UnpinnedAttached": {cr: image(unpinned), img: withOwn(published(), &imagecache.Source{URL: testURL, Format: imagecache.FormatQCOW2}),
			wantURL: testURL, wantVerified: false},
		"PublishedByUs": {cr: image(), img: func() imagecache.Image {
			img := published()
			img.Marker.Owner, img.Marker.FinalURL = imagecache.Owner{UID: uid}, "https://cdn.example.org/debian.qcow2"
			return img
		}(), wantURL: "https://cdn.example.org/debian.qcow2", wantVerified: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			newExternal(&fakeCache{t: t}).published(tc.cr, "default", source(tc.cr), tc.img)
			at := tc.cr.Status.AtProvider
			if diff := cmp.Diff([]any{tc.wantURL, tc.wantVerified, digest, int64(10)}, []any{at.SourceURL, at.Verified, at.SHA256, at.SizeBytes}); diff != "" {
				t.Errorf("published(): -want, +got:\n%s", diff)
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
	cr := image(func(b *v1alpha1.BaseImage) { meta.SetExternalName(b, "pkvm-base-0123456789abcdef01234567.qcow2") })
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
		remove   func(pool, volume string) (imagecache.Removal, error)
		wantErr  error
		wantKeep []string
		wantGone []string
	}{
		"Unused": {
			reason: "an old volume nothing uses goes", retained: []string{"default/a"},
			remove: removes(nil), wantGone: []string{"default/a"},
		},
		"InUse": {
			reason: "an old volume an overlay uses is kept", retained: []string{"default/a"},
			remove:   removes(&imagecache.InUseError{Volume: "a", Users: []string{"ns_vm"}}),
			wantKeep: []string{"default/a"},
		},
		"OwnedByOther": {
			reason: "an old volume another owns is forgotten, not removed", retained: []string{"default/a"},
			remove: removes(&imagecache.OwnedByOtherError{Owner: imagecache.Owner{UID: "x"}}),
		},
		"Fails": {
			reason: "a failed removal is an error", retained: []string{"default/a"},
			remove: removes(errBoom), wantErr: errors.Wrapf(errBoom, errRemove, "default/a"),
			wantKeep: []string{"default/a"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &fakeCache{t: t, remove: tc.remove}
			cr := image(retaining(tc.retained...))
			_, err := newExternal(c).Update(context.Background(), cr)
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nUpdate(): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff([]any{tc.wantKeep, tc.wantGone}, []any{cr.Status.AtProvider.RetainedVolumes, c.removed}); diff != "" {
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
		remove   func(pool, volume string) (imagecache.Removal, error)
		wantErr  error
		wantGone []string
	}{
		"OwnedAndRetained": {
			reason: "every volume of this BaseImage goes", retained: []string{"default/old"}, owned: []imagecache.Image{published()},
			remove: removes(nil), wantGone: []string{"default/old", "default/" + volume},
		},
		"Held": {
			reason: "deletion is held while an overlay uses the image", owned: []imagecache.Image{published()},
			remove:  removes(&imagecache.InUseError{Volume: volume, Users: []string{"ns_vm"}}),
			wantErr: errors.Errorf(errHeld, (&imagecache.InUseError{Volume: volume, Users: []string{"ns_vm"}}).Error()),
		},
		"HeldUnsure": {
			reason: "deletion is held while an overlay cannot be ruled out", owned: []imagecache.Image{published()},
			remove:  removes(&imagecache.InUseError{Volume: volume, Doubts: []string{"pool cold is inactive"}}),
			wantErr: errors.Errorf(errHeld, (&imagecache.InUseError{Volume: volume, Doubts: []string{"pool cold is inactive"}}).Error()),
		},
		"LeftToSweep": {
			reason: "the last owner of a volume nothing is seen to use lets go of it despite a doubt: the deletion goes on, the volume waits for the sweep",
			owned:  []imagecache.Image{published()},
			remove: func(string, string) (imagecache.Removal, error) {
				return imagecache.Removal{Left: true, Doubts: []string{"pool cold is inactive"}}, nil
			},
			wantGone: []string{"default/" + volume},
		},
		"SharedKept": {
			reason: "a volume other BaseImages own: only this one's owner record goes", owned: []imagecache.Image{published()},
			remove: func(string, string) (imagecache.Removal, error) {
				return imagecache.Removal{Kept: true, Owners: 2}, nil
			},
			wantGone: []string{"default/" + volume},
		},
		"OwnedByOther": {
			reason: "a retained volume another owns is left alone", retained: []string{"default/old"},
			remove: removes(&imagecache.OwnedByOtherError{Owner: imagecache.Owner{UID: "x"}}),
		},
		"Fails": {
			reason: "a failed removal is an error", owned: []imagecache.Image{published()},
			remove: removes(errBoom), wantErr: errors.Wrapf(errBoom, errRemove, "default/"+volume),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &fakeCache{t: t, remove: tc.remove, owned: func(string) ([]imagecache.Image, error) { return tc.owned, nil }}
			_, err := newExternal(c).Delete(context.Background(), image(deleted, retaining(tc.retained...)))
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nDelete(): -want error, +got error:\n%s", tc.reason, diff)
			}
			gone := c.removed
			if len(gone) == 2 && gone[0] > gone[1] {
				gone[0], gone[1] = gone[1], gone[0]
			}
			if diff := cmp.Diff(tc.wantGone, gone); diff != "" {
				t.Errorf("%s\nDelete(): -want, +got:\n%s", tc.reason, diff)
			}
			// The pool is swept of stale owners once this BaseImage is detached from everything.
			if wantSwept := tc.wantErr == nil; (c.swept == 1) != wantSwept {
				t.Errorf("%s\nDelete() swept the pool %d times, want it swept: %v", tc.reason, c.swept, wantSwept)
			}
		})
	}
}
