package imagecache

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

// The fake-host tables of Publish, Remove, Sweep and Users: every branch of the protocol on an
// in-memory host (fakestorage), no libvirt.

var _ Host = (*fakestorage.Storage)(nil)

const (
	tpool   = "default"
	holder  = "test-process"
	rawSize = 64 << 10
)

var (
	us    = Owner{UID: "uid-us", Namespace: "ns-a", Name: "a"}
	them  = Owner{UID: "uid-them", Namespace: "ns-b", Name: "b"}
	gone  = Owner{UID: "uid-gone", Namespace: "ns-c", Name: "c"}
	t0    = time.Unix(1_000_000, 0)
	sumA  = strings.Repeat("a", 64)
	volA  = DigestVolumeName(sumA, FormatQCOW2)
	pathA = fakestorage.Path(tpool, volA)
	// legacyVol is a volume name of a release before shared images (24 hex characters of a
	// URL's hash); a ".qcow2" one, the longer of the two legacy forms.
	legacyVol = "pkvm-base-" + strings.Repeat("b", 24) + ".qcow2"
)

// testShared is a Shared whose waits take no time, whose claims are never renewed during a
// test, and whose holder is holder.
func testShared() *Shared {
	s := NewShared()
	s.holder = holder
	s.timing.waitPoll, s.timing.settlePause, s.timing.tornGrace = time.Millisecond, 0, 0
	s.setClaimPeriods(time.Hour, 30*time.Second)
	return s
}

// inCluster is o as a BaseImage of the management cluster id.
func inCluster(o Owner, id string) Owner {
	o.ClusterID = id
	return o
}

// liveOnly is a Liveness that knows exactly the given owners.
func liveOnly(owners ...Owner) Liveness {
	return func(_ context.Context, uid string) (bool, error) {
		return slices.ContainsFunc(owners, func(o Owner) bool { return o.UID == uid }), nil
	}
}

// newFakeCache is a Cache on h with a fixed clock.
func newFakeCache(h Host, sh *Shared, dl Downloads, opts ...Option) *Cache {
	return New(h, sh, dl, append([]Option{WithClock(func() time.Time { return t0 })}, opts...)...)
}

// putRecord stores r, encoded, as volume name of tpool.
func putRecord(t *testing.T, h *fakestorage.Storage, name string, r Record) {
	t.Helper()
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	h.Put(tpool, name, b)
}

// published stores vol as published with size bytes of data, marked by its publisher o.
func published(t *testing.T, h *fakestorage.Storage, vol, digest string, f Format, o Owner, size int) {
	t.Helper()
	h.Put(tpool, vol, make([]byte, size))
	putRecord(t, h, MarkerName(vol), Record{State: RecordPublished, Volume: vol, Owner: o, SHA256: digest, Verified: true,
		Format: f, SizeBytes: int64(size), VirtualSizeBytes: int64(size), Time: t0})
}

// owns stores o's owner record of vol.
func owns(t *testing.T, h *fakestorage.Storage, vol string, o Owner) {
	t.Helper()
	putRecord(t, h, OwnerName(vol, o.UID), Record{State: RecordOwner, Volume: vol, Owner: o, Format: FormatQCOW2, Time: t0})
}

// claimed stores a claim of vol by o, held by the process h (state: RecordClaimed or
// RecordRemoving).
func claimed(t *testing.T, h *fakestorage.Storage, vol string, o Owner, by, state string) {
	t.Helper()
	putRecord(t, h, ClaimName(vol), Record{State: state, Volume: vol, Owner: o, Holder: by, Format: FormatQCOW2, Time: t0})
}

// staleClaim makes sh's claim clock have seen vol's claim unchanged since long ago.
func staleClaim(h *fakestorage.Storage, sh *Shared, vol string) {
	v, err := h.Volume(context.Background(), tpool, ClaimName(vol))
	if err != nil {
		panic(err)
	}
	sh.claims.seen[h.Address()+"\x00"+tpool+"\x00"+ClaimName(vol)] = claimSeen{mtime: v.ModifiedAt, since: t0.Add(-time.Hour)}
}

// sawProgress makes sh's progress clock have seen vol's data volume hold bytes at at, under
// the claim that holder wrote at t0 (claimed).
func sawProgress(h *fakestorage.Storage, sh *Shared, vol, holder string, bytes int64, at time.Time) {
	key := h.Address() + "\x00" + tpool + "\x00" + ClaimName(vol)
	sh.progress.seen[key] = claimProgress{claim: holder + "\x00" + t0.UTC().Format(time.RFC3339Nano), samples: []progressSample{{at: at, bytes: bytes}}}
}

// names lists the volumes of tpool, sorted.
func names(h *fakestorage.Storage) []string {
	n := h.Names(tpool)
	slices.Sort(n)
	return n
}

// hooked is a fake host that runs after, when set, once a volume was deleted: another
// process acting between two steps.
type hooked struct {
	*fakestorage.Storage
	after func(name string)
}

func (h *hooked) DeleteVolume(ctx context.Context, pool, name string) error {
	err := h.Storage.DeleteVolume(ctx, pool, name)
	if h.after != nil {
		h.after(name)
	}
	return err
}

// rawServer serves data at /img and counts the requests.
type rawServer struct {
	*httptest.Server
	hits atomic.Int32
}

func newRawServer(t *testing.T, data []byte) *rawServer {
	t.Helper()
	s := &rawServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.hits.Add(1)
		_, _ = w.Write(data)
	}))
	t.Cleanup(s.Close)
	return s
}

func failOn(op, name string, err error) func(string, string, string) error {
	return func(o, _, n string) error {
		if o == op && (name == "" || n == name) {
			return err
		}
		return nil
	}
}
