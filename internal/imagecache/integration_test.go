package imagecache

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

const testVirtualSize = 96 << 20

var (
	qcow2Once sync.Once
	qcow2Data []byte
	qcow2Err  error
)

// testQCOW2 returns a real qcow2 image made by qemu-img, 96 MiB virtual
// size, with 27 MiB written (so that a throttled upload takes seconds).
func testQCOW2(t testing.TB) []byte {
	t.Helper()
	qcow2Once.Do(func() {
		dir, err := os.MkdirTemp("", "pkvm-imagecache-")
		if err != nil {
			qcow2Err = err
			return
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "img.qcow2")
		for _, cmd := range [][]string{
			{"qemu-img", "create", "-q", "-f", "qcow2", p, strconv.Itoa(testVirtualSize)},
			{"qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 3M", "-c", "write -P 0x5c 40M 24M", p},
		} {
			if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
				qcow2Err = &exec.Error{Name: strings.Join(cmd, " ") + ": " + string(out), Err: err}
				return
			}
		}
		qcow2Data, qcow2Err = os.ReadFile(p)
	})
	if qcow2Err != nil {
		t.Fatalf("making a qcow2 image: %v", qcow2Err)
	}
	return qcow2Data
}

// uniqueQCOW2 is testQCOW2 with random bytes appended (still a valid qcow2): its digest, and
// so its volume, is this test's alone, whatever other tests left in the pool.
func uniqueQCOW2(t testing.TB) []byte {
	t.Helper()
	tail := make([]byte, 4096)
	_, _ = crand.Read(tail)
	return append(slices.Clone(testQCOW2(t)), tail...)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// imageServer serves one image on 127.0.0.1 (inside the test bed's
// namespace) in several ways.
type imageServer struct {
	*httptest.Server
	data     []byte
	throttle atomic.Bool // /slow sends 256 KiB every 30 ms while set
	quit     chan struct{}
}

func newImageServer(t testing.TB, data []byte) *imageServer {
	t.Helper()
	s := &imageServer{data: data, quit: make(chan struct{})}
	s.throttle.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "img", time.Time{}, bytes.NewReader(data))
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, _ *http.Request) {
		for off := 0; off < len(data); off += 64 << 10 {
			_, _ = w.Write(data[off:min(off+64<<10, len(data))])
			w.(http.Flusher).Flush() // net/http's writer
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/img", http.StatusFound)
	})
	mux.HandleFunc("/redirect-to", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("url"), http.StatusFound)
	})
	mux.HandleFunc("/cut", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()    // net/http's writer
		panic(http.ErrAbortHandler) // closes the connection mid-body
	})
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush() // net/http's writer
		select {
		case <-r.Context().Done():
		case <-s.quit:
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		for off := 0; off < len(data); off += 256 << 10 {
			if _, err := w.Write(data[off:min(off+256<<10, len(data))]); err != nil {
				return
			}
			w.(http.Flusher).Flush() // net/http's writer
			if s.throttle.Load() {
				select {
				case <-time.After(30 * time.Millisecond):
				case <-r.Context().Done():
					return
				case <-s.quit:
					return
				}
			}
		}
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(s.quit)
		s.Close()
	})
	return s
}

// env is one test's cache on the test bed, with owners whose volumes are
// removed when the test ends.
type env struct {
	tb    *testbed
	sh    *Shared
	lvsh  *libvirt.Shared
	lv    *libvirt.Client
	dl    Downloads
	cache *Cache
}

// bedClusterID is the cluster ID of this package's caches on the test bed.
const bedClusterID = "imagecache-tests"

// newEnv is a cache with the default policy: it refuses loopback servers
// until serve allows one.
func newEnv(t *testing.T) *env {
	tb := requireTestbed(t)
	lvsh := libvirt.NewShared()
	lv := libvirt.New(tb.conn, lvsh, libvirt.WithSocket(tb.cfg.Socket))
	// The bed's pool is shared with the other packages' tests, each a cluster of its own: this
	// package's records name its cluster, which their sweeps leave alone.
	sh := NewShared(InCluster(bedClusterID))
	return &env{tb: tb, sh: sh, lvsh: lvsh, lv: lv, cache: New(lv, sh, Downloads{Config: testConfig})}
}

// serve makes e's cache download from srv, allowing exactly its address and
// port, as a ClusterProviderConfig's imageSources would.
func (e *env) serve(t *testing.T, srv *imageServer, mods ...func(*Downloads)) {
	e.dl = downloadsFor(t, allowServers(t, srv.Server), mods...)
	e.cache = New(e.lv, e.sh, e.dl)
}

func (e *env) owner(t *testing.T, name string) Owner {
	// Of this package's cluster, as Publish records it (bedClusterID).
	o := Owner{UID: uniqueName("uid"), Namespace: "default", Name: name, ClusterID: bedClusterID}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := retryTransient(ctx, t, func() error {
			imgs, err := e.cache.Owned(ctx, e.tb.pool, o.UID)
			if err != nil {
				return err
			}
			for _, img := range imgs {
				if _, err := e.cache.Remove(ctx, e.tb.pool, img.Volume, o.UID); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return o
}

// requireAbsent checks that nothing of src (given with the digest of its bytes) is left in the
// pool: no data, marker or claim, and no owner record.
func (e *env) requireAbsent(t *testing.T, ctx context.Context, src Source) {
	t.Helper()
	img, err := e.cache.Lookup(ctx, e.tb.pool, src, "")
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if img.State != StateAbsent {
		t.Fatalf("Lookup = %s (%s), data %v marker %v claim %v; want Absent", img.State, img.Reason, img.HasData, img.HasMarker, img.HasClaim)
	}
	if owners := e.ownerRecords(t, ctx, img.Volume); len(owners) > 0 {
		t.Fatalf("owner records left of %s: %v", img.Volume, owners)
	}
}

// ownerRecords lists the owner record volumes of vol.
func (e *env) ownerRecords(t *testing.T, ctx context.Context, vol string) []string {
	t.Helper()
	names, err := e.lv.VolumeNames(ctx, e.tb.pool)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if v, ok := ownerRecordOf(n); ok && v == vol {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func TestIntegrationPublishQCOW2(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	owner := e.owner(t, "debian")
	src := Source{URL: srv.URL + "/img", SHA256: sha(data), Format: FormatQCOW2}

	var mu sync.Mutex
	var progress [][2]int64
	res, err := e.cache.Publish(ctx, e.tb.pool, src, owner, func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, [2]int64{done, total})
	})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	img := res.Image
	if img.State != StatePublished || res.Reused || res.Bytes != int64(len(data)) || res.Duration <= 0 {
		t.Fatalf("Publish = %+v", res)
	}
	m := img.Marker
	if m.SHA256 != sha(data) || !m.Verified || m.VirtualSizeBytes != testVirtualSize || m.SizeBytes != int64(len(data)) ||
		m.Owner != owner || m.SourceURL != src.URL || m.Format != FormatQCOW2 || img.Volume != VolumeName(src) {
		t.Errorf("marker = %+v", m)
	}
	if len(progress) == 0 || progress[len(progress)-1] != [2]int64{int64(len(data)), int64(len(data))} {
		t.Errorf("progress = %v, want a last call with done == total", progress)
	}
	t.Logf("published %d bytes in %v (%.1f MB/s)", res.Bytes, res.Duration, res.BytesPerSecond()/1e6)

	// libvirt sees a qcow2 of the right virtual size.
	v, err := e.lv.Volume(ctx, e.tb.pool, img.Volume)
	if err != nil {
		t.Fatal(err)
	}
	if v.Format != "qcow2" || v.CapacityBytes != testVirtualSize || v.Path != img.Path {
		t.Errorf("libvirt volume = %+v, want qcow2 of %d bytes", v, testVirtualSize)
	}
	var back bytes.Buffer
	if err := e.lv.Download(ctx, e.tb.pool, img.Volume, &back, 0, 0); err != nil || !bytes.Equal(back.Bytes(), data) {
		t.Errorf("volume content differs from the image (%v)", err)
	}

	// A restarted provider (new connection, new objects, no status) finds it.
	fresh := New(libvirt.New(e.tb.connect(t), e.lvsh, libvirt.WithSocket(e.tb.cfg.Socket)), e.sh, e.dl)
	got, err := fresh.Lookup(ctx, e.tb.pool, src, owner.UID)
	if err != nil {
		t.Fatalf("Lookup after restart: %v", err)
	}
	if got.State != StatePublished || got.Owner != owner || got.Marker.SHA256 != sha(data) || got.Path != img.Path || got.HasClaim ||
		got.Own == nil || got.Own.Owner != owner || got.Own.SourceURL != src.URL || got.Own.ExpectedSHA256 != src.SHA256 {
		t.Errorf("Lookup after restart = %+v", got)
	}
	owned, err := fresh.Owned(ctx, e.tb.pool, owner.UID)
	if err != nil || len(owned) != 1 || owned[0].Volume != img.Volume {
		t.Errorf("Owned = %+v, %v", owned, err)
	}

	// Publishing again downloads nothing.
	srv.Close()
	again, err := fresh.Publish(ctx, e.tb.pool, src, owner, nil)
	if err != nil || !again.Reused || again.Image.State != StatePublished {
		t.Errorf("second Publish = %+v, %v; want Reused", again, err)
	}

	if r, err := fresh.Remove(ctx, e.tb.pool, img.Volume, owner.UID); err != nil || r.Kept {
		t.Fatalf("Remove = %+v, %v", r, err)
	}
	e.requireAbsent(t, ctx, src)
	if _, err := fresh.Remove(ctx, e.tb.pool, img.Volume, owner.UID); err != nil {
		t.Errorf("Remove of a removed volume: %v", err)
	}
}

func TestIntegrationPublishChunkedUnverified(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	owner := e.owner(t, "chunked")
	src := Source{URL: srv.URL + "/chunked"}
	res, err := e.cache.Publish(ctx, e.tb.pool, src, owner, func(_, total int64) {
		if total != 0 {
			t.Errorf("progress total = %d, want 0 without Content-Length", total)
		}
	})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	m := res.Image.Marker
	if m.Verified || m.SHA256 != sha(data) || m.ExpectedSHA256 != "" || m.VirtualSizeBytes != testVirtualSize || m.SizeBytes != int64(len(data)) {
		t.Errorf("marker = %+v", m)
	}
	// Shared by digest: the volume is the digest's, and the owner record says no digest was asked.
	if res.Image.Volume != DigestVolumeName(sha(data), FormatQCOW2) || res.Image.Own == nil || res.Image.Own.ExpectedSHA256 != "" {
		t.Errorf("Publish of an unpinned image = volume %s, own %+v", res.Image.Volume, res.Image.Own)
	}
}

func TestIntegrationPublishRedirectRaw(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := bytes.Repeat([]byte("raw disk image. "), 3<<16) // 3 MiB
	srv := newImageServer(t, data)
	e.serve(t, srv)
	owner := e.owner(t, "raw")
	src := Source{URL: srv.URL + "/redirect", SHA256: sha(data), Format: FormatRaw}
	res, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	m := res.Image.Marker
	if !strings.HasSuffix(res.Image.Volume, ".img") || m.FinalURL != srv.URL+"/img" || m.SourceURL != src.URL ||
		m.VirtualSizeBytes != int64(len(data)) || !m.Verified || m.Format != FormatRaw {
		t.Errorf("Publish = %+v, marker %+v", res.Image, m)
	}
	v, err := e.lv.Volume(ctx, e.tb.pool, res.Image.Volume)
	if err != nil || v.Format != "raw" || v.CapacityBytes != uint64(len(data)) {
		t.Errorf("libvirt volume = %+v, %v", v, err)
	}
}

func TestIntegrationDigestMismatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	owner := e.owner(t, "mismatch")
	wrong := strings.Repeat("0", 64)
	src := Source{URL: srv.URL + "/img", SHA256: wrong}
	_, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil)
	if !IsDigestMismatch(err) || !IsTerminal(err) {
		t.Fatalf("Publish error = %v, want a digest mismatch", err)
	}
	if !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), sha(data)) {
		t.Errorf("error does not name both digests: %v", err)
	}
	e.requireAbsent(t, ctx, src)
}

func TestIntegrationFormatMismatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	notQCOW2 := bytes.Repeat([]byte{1}, 2<<20)
	srv := newImageServer(t, notQCOW2)
	e.serve(t, srv)
	for _, src := range []Source{{URL: srv.URL + "/img", Format: FormatQCOW2}, {URL: srv.URL + "/img", SHA256: sha(notQCOW2), Format: FormatQCOW2}} {
		_, err := e.cache.Publish(ctx, e.tb.pool, src, e.owner(t, "notqcow2"), nil)
		if !IsFormatError(err) || !IsTerminal(err) {
			t.Fatalf("Publish error = %v, want a FormatError", err)
		}
		e.requireAbsent(t, ctx, Source{SHA256: sha(notQCOW2), Format: FormatQCOW2})
	}
}

// TestIntegrationOutsideInput publishes what the image source policy or the
// download limits refuse: nothing is left on the host, and the error names
// the rule or the limit and the config.
func TestIntegrationOutsideInput(t *testing.T) {
	e := newEnv(t)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	other := newImageServer(t, data)

	t.Run("LoopbackRefusedByDefault", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		src := Source{URL: srv.URL + "/img", SHA256: sha(data)}
		_, err := e.cache.Publish(ctx, e.tb.pool, src, e.owner(t, "refused"), nil)
		var re *RefusedError
		if !errorsAs(err, &re) || !IsTerminal(err) || re.Rule != "built-in: loopback 127.0.0.0/8" || re.Config != testConfig ||
			!strings.Contains(err.Error(), "cidr: 127.0.0.1/32") {
			t.Fatalf("Publish error = %v, want a terminal refusal by the built-in loopback denial of %s", err, testConfig)
		}
		e.requireAbsent(t, ctx, src)
	})

	e.serve(t, srv, func(d *Downloads) { d.Limits.MaxBytes = 8 << 20 })

	t.Run("RedirectToRefusedServer", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		src := Source{URL: srv.URL + "/redirect-to?url=" + other.URL + "/img", SHA256: sha(data)}
		_, err := e.cache.Publish(ctx, e.tb.pool, src, e.owner(t, "redirect"), nil)
		var re *RefusedError
		if !errorsAs(err, &re) || re.RedirectFrom == "" || !strings.HasPrefix(re.URL, other.URL) {
			t.Fatalf("Publish error = %v, want the redirect to %s refused", err, other.URL)
		}
		e.requireAbsent(t, ctx, src)
	})

	t.Run("TooLargeAnnounced", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		src := Source{URL: srv.URL + "/img?large", SHA256: sha(data)}
		_, err := e.cache.Publish(ctx, e.tb.pool, src, e.owner(t, "large"), nil)
		var le *LimitError
		if !errorsAs(err, &le) || le.Limit != LimitSize || le.Announced != int64(len(data)) || !IsTerminal(err) ||
			!strings.Contains(err.Error(), "exceeds maxImageSizeMiB 8 of "+testConfig) {
			t.Fatalf("Publish error = %v, want the announced size refused", err)
		}
		e.requireAbsent(t, ctx, src)
	})

	t.Run("TooLargeChunked", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		src := Source{URL: srv.URL + "/chunked?large"}
		_, err := e.cache.Publish(ctx, e.tb.pool, src, e.owner(t, "chunked"), nil)
		var le *LimitError
		if !errorsAs(err, &le) || le.Limit != LimitSize || le.Announced != 0 || !IsTerminal(err) ||
			!strings.Contains(err.Error(), "exceeds maxImageSizeMiB 8 of "+testConfig+": more than 8388608 bytes arrived") {
			t.Fatalf("Publish error = %v, want the stream cut at the size limit", err)
		}
		e.requireAbsent(t, ctx, Source{SHA256: sha(data)})
	})
}

// TestIntegrationInterrupted cuts uploads in several ways: nothing is ever
// published, and a retry publishes cleanly.
func TestIntegrationInterrupted(t *testing.T) {
	e := newEnv(t)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv, func(d *Downloads) { d.Limits.StallTimeout = time.Second })

	publishOK := func(t *testing.T, ctx context.Context, src Source, owner Owner) {
		t.Helper()
		srv.throttle.Store(false)
		defer srv.throttle.Store(true)
		res, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil)
		if err != nil || res.Image.State != StatePublished || res.Image.Marker.SHA256 != sha(data) {
			t.Fatalf("retry Publish = %+v, %v", res, err)
		}
	}

	t.Run("ServerClosesMidBody", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "cut")
		src := Source{URL: srv.URL + "/cut", SHA256: sha(data)}
		_, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil)
		if err == nil || IsTerminal(err) {
			t.Fatalf("Publish error = %v, want a retryable error", err)
		}
		t.Logf("cut: %v", err)
		e.requireAbsent(t, ctx, src)
	})

	t.Run("ServerStalls", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		src := Source{URL: srv.URL + "/stall", SHA256: sha(data)}
		_, err := e.cache.Publish(ctx, e.tb.pool, src, e.owner(t, "stall"), nil)
		var le *LimitError
		if !errorsAs(err, &le) || le.Limit != LimitStall || IsTerminal(err) ||
			!strings.Contains(err.Error(), "download stalled: no data for 1 s (imageSources.stallTimeoutSeconds of "+testConfig+")") {
			t.Fatalf("Publish error = %v, want a stall after 1 s, naming the limit and the config", err)
		}
		t.Logf("stall: %v", err)
		e.requireAbsent(t, ctx, src)
	})

	t.Run("ContextCancelled", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "cancel")
		src := Source{URL: srv.URL + "/slow", SHA256: sha(data)}
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, err := e.cache.Publish(pctx, e.tb.pool, src, owner, func(done, total int64) {
			if done < total {
				cancel()
			}
		})
		if err == nil || pctx.Err() == nil || !strings.Contains(err.Error(), "cannot stream the image") {
			t.Fatalf("Publish = %v, want an upload error after cancel", err)
		}
		t.Logf("cancelled: %v", err)
		e.requireAbsent(t, ctx, src)
		publishOK(t, ctx, src, owner)
	})

	t.Run("SSHSessionsKilled", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "killssh")
		src := Source{URL: srv.URL + "/slow?kill", SHA256: sha(data)}
		var once sync.Once
		killed := make(chan struct{})
		_, err := e.cache.Publish(ctx, e.tb.pool, src, owner, func(done, total int64) {
			if done < total {
				once.Do(func() {
					go func() {
						defer close(killed)
						if out, err := exec.Command(e.tb.ctl, "kill-ssh-sessions", strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
							t.Errorf("kill-ssh-sessions: %v\n%s", err, out)
						}
					}()
				})
			}
		})
		<-killed
		if err == nil || !strings.Contains(err.Error(), "cannot stream the image") {
			t.Fatalf("Publish = %v, want an upload error after the SSH connection was cut", err)
		}
		t.Logf("ssh cut: %v", err)
		var img Image
		lerr := retryTransient(ctx, t, func() error {
			var err error
			img, err = e.cache.Lookup(ctx, e.tb.pool, src, owner.UID)
			return err
		})
		if lerr != nil {
			t.Fatalf("Lookup: %v", lerr)
		}
		if img.State == StatePublished {
			t.Fatal("an interrupted upload is published")
		}
		t.Logf("after the cut: %s %s", img.State, img.Reason)
		publishOK(t, ctx, src, owner)
	})

	t.Run("DebrisOfAKilledProvider", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "killed")
		other := e.owner(t, "other")
		src := Source{URL: srv.URL + "/img?debris", SHA256: sha(data)}
		vol := VolumeName(src)
		// What a provider killed mid-upload leaves: its claim and half the data.
		claim := Record{State: RecordClaimed, Volume: vol, Owner: owner, SourceURL: src.URL, Format: FormatQCOW2, Time: time.Now()}
		if err := e.cache.writeRecord(ctx, e.tb.pool, ClaimName(vol), claim); err != nil {
			t.Fatal(err)
		}
		x, _ := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: libvirt.FormatRaw})
		if _, err := e.lv.CreateVolume(ctx, e.tb.pool, x); err != nil {
			t.Fatal(err)
		}
		if err := e.lv.Upload(ctx, e.tb.pool, vol, bytes.NewReader(data[:len(data)/2]), 0); err != nil {
			t.Fatal(err)
		}
		// ... and its owner record, written first.
		if err := e.cache.ensureOwner(ctx, e.tb.pool, vol, owner, src); err != nil {
			t.Fatal(err)
		}
		img, err := e.cache.Lookup(ctx, e.tb.pool, src, owner.UID)
		if err != nil || img.State != StateDebris || img.Owner != owner {
			t.Fatalf("Lookup = %+v, %v; want Debris owned by %v", img, err, owner)
		}
		// Another BaseImage asking for the same bytes waits for the claimed upload: it never
		// touches it while its owner exists. Its wait ends with wctx, during a pause or, on a
		// busy machine, during one of its looks at the volume.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := e.cache.Publish(wctx, e.tb.pool, src, other, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Publish by another owner = %v, want it waiting for the claimed upload until its context ends", err)
		}
		if img, err := e.cache.Lookup(ctx, e.tb.pool, src, owner.UID); err != nil || img.State != StateDebris || !img.HasOwn {
			t.Fatalf("the claimed upload after another's wait: %+v, %v", img, err)
		}
		publishOK(t, ctx, src, owner)
		if res, err := e.cache.Publish(ctx, e.tb.pool, src, other, nil); err != nil || !res.Reused {
			t.Fatalf("Publish by another owner once published = %+v, %v; want it attached", res, err)
		}
	})

	t.Run("DebrisOfADeletedOwner", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "deleted")
		other := e.owner(t, "other")
		src := Source{URL: srv.URL + "/img?deleted", SHA256: sha(data)}
		vol := VolumeName(src)
		// A claim and half the data of a BaseImage whose owner record is gone (it was deleted
		// while its upload was cut): debris that whoever asks for the image next cleans.
		claim := Record{State: RecordClaimed, Volume: vol, Owner: owner, SourceURL: src.URL, Format: FormatQCOW2, Time: time.Now()}
		if err := e.cache.writeRecord(ctx, e.tb.pool, ClaimName(vol), claim); err != nil {
			t.Fatal(err)
		}
		x, _ := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: libvirt.FormatRaw})
		if _, err := e.lv.CreateVolume(ctx, e.tb.pool, x); err != nil {
			t.Fatal(err)
		}
		if err := e.lv.Upload(ctx, e.tb.pool, vol, bytes.NewReader(data[:len(data)/2]), 0); err != nil {
			t.Fatal(err)
		}
		publishOK(t, ctx, src, other)
	})

	t.Run("TornMarker", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "torn")
		src := Source{URL: srv.URL + "/img?torn", SHA256: sha(data)}
		vol := VolumeName(src)
		// What a provider killed while writing the marker leaves: complete data, a marker
		// volume created and never written, and its claim (dropped only after the marker).
		claim := Record{State: RecordClaimed, Volume: vol, Owner: owner, SourceURL: src.URL, Format: FormatQCOW2, Time: time.Now()}
		if err := e.cache.writeRecord(ctx, e.tb.pool, ClaimName(vol), claim); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{vol, MarkerName(vol)} {
			x, _ := libvirt.VolumeXML(libvirt.VolumeSpec{Name: n, Format: libvirt.FormatRaw, CapacityBytes: 300})
			if _, err := e.lv.CreateVolume(ctx, e.tb.pool, x); err != nil {
				t.Fatal(err)
			}
		}
		img, err := e.cache.Lookup(ctx, e.tb.pool, src, owner.UID)
		if err != nil || img.State != StateDebris || img.Owner != owner {
			t.Fatalf("Lookup = %+v, %v; want Debris owned by %v", img, err, owner)
		}
		publishOK(t, ctx, src, owner)
	})

	t.Run("DataWithoutAnyRecord", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		owner := e.owner(t, "unrecorded")
		src := Source{URL: srv.URL + "/img?unrecorded", SHA256: sha(data)}
		vol := VolumeName(src)
		// A volume of our naming scheme that no record names: not made by us (we write the
		// claim before the data), so it is never overwritten or deleted.
		x, _ := libvirt.VolumeXML(libvirt.VolumeSpec{Name: vol, Format: libvirt.FormatRaw, CapacityBytes: 300})
		if _, err := e.lv.CreateVolume(ctx, e.tb.pool, x); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.lv.DeleteVolume(context.Background(), e.tb.pool, vol) })
		if _, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil); !IsOwnedByOther(err) || !strings.Contains(err.Error(), "without an ownership record") {
			t.Fatalf("Publish = %v, want a refusal: no ownership record", err)
		}
		if _, err := e.cache.Remove(ctx, e.tb.pool, vol, owner.UID); !IsOwnedByOther(err) {
			t.Fatalf("Remove = %v, want a refusal: no ownership record", err)
		}
		if _, err := e.lv.Volume(ctx, e.tb.pool, vol); err != nil {
			t.Fatalf("the unrecorded volume is gone: %v", err)
		}
	})
}

// TestIntegrationSharedAcrossNamespaces: BaseImages of two namespaces asking for the same
// bytes (from different URLs) share one volume; deleting either keeps it for the other;
// deleting both removes it.
func TestIntegrationSharedAcrossNamespaces(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	a := e.owner(t, "debian")
	b := e.owner(t, "debian")
	b.Namespace = "team-b"
	srcA := Source{URL: srv.URL + "/img", SHA256: sha(data)}
	srcB := Source{URL: srv.URL + "/redirect", SHA256: sha(data)}
	resA, err := e.cache.Publish(ctx, e.tb.pool, srcA, a, nil)
	if err != nil || resA.Reused {
		t.Fatalf("Publish by a = %+v, %v", resA, err)
	}
	resB, err := e.cache.Publish(ctx, e.tb.pool, srcB, b, nil)
	if err != nil || !resB.Reused || resB.Image.Volume != resA.Image.Volume || resB.Image.State != StatePublished {
		t.Fatalf("Publish by b = %+v, %v; want it attached to %s", resB, err, resA.Image.Volume)
	}
	vol := resA.Image.Volume
	if got := e.ownerRecords(t, ctx, vol); !slices.Equal(got, sortedNames(OwnerName(vol, a.UID), OwnerName(vol, b.UID))) {
		t.Fatalf("owner records = %v, want a's and b's", got)
	}
	if img, err := e.cache.LookupVolume(ctx, e.tb.pool, vol, b.UID); err != nil || img.Own == nil || img.Own.SourceURL != srcB.URL || img.Own.Owner != b {
		t.Fatalf("b's owner record = %+v, %v; want its own source", img.Own, err)
	}
	// Deleting a keeps the volume for b; deleting b then removes it.
	if r, err := e.cache.Remove(ctx, e.tb.pool, vol, a.UID); err != nil || !r.Kept || r.Owners != 1 {
		t.Fatalf("Remove by a = %+v, %v; want kept for one other owner", r, err)
	}
	if img, err := e.cache.LookupVolume(ctx, e.tb.pool, vol, b.UID); err != nil || img.State != StatePublished || img.Own == nil {
		t.Fatalf("b's image after a's deletion: %+v, %v", img, err)
	}
	if r, err := e.cache.Remove(ctx, e.tb.pool, vol, b.UID); err != nil || r.Kept {
		t.Fatalf("Remove by b = %+v, %v; want the volume removed", r, err)
	}
	e.requireAbsent(t, ctx, srcA)
}

func sortedNames(n ...string) []string { slices.Sort(n); return n }

// TestIntegrationSameURLDifferentDigests: two BaseImages giving one URL and different digests
// never share: one whose digest the server does not serve gets a terminal mismatch and nothing
// of the other's; when the server serves each its bytes, each gets its own volume.
func TestIntegrationSameURLDifferentDigests(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	x, y := uniqueQCOW2(t), uniqueQCOW2(t)
	var serveY atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := x
		if serveY.Load() {
			b = y
		}
		http.ServeContent(w, r, "img", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(srv.Close)
	e.dl = downloadsFor(t, allowServers(t, srv))
	e.cache = New(e.lv, e.sh, e.dl)
	a, b := e.owner(t, "a"), e.owner(t, "b")
	srcX := Source{URL: srv.URL + "/debian.qcow2", SHA256: sha(x)}
	srcY := Source{URL: srv.URL + "/debian.qcow2", SHA256: sha(y)}
	resA, err := e.cache.Publish(ctx, e.tb.pool, srcX, a, nil)
	if err != nil {
		t.Fatalf("Publish by a: %v", err)
	}
	if _, err := e.cache.Publish(ctx, e.tb.pool, srcY, b, nil); !IsDigestMismatch(err) || !IsTerminal(err) {
		t.Fatalf("Publish by b while the URL serves a's bytes = %v, want a terminal digest mismatch", err)
	}
	e.requireAbsent(t, ctx, srcY)
	if got := e.ownerRecords(t, ctx, resA.Image.Volume); !slices.Equal(got, []string{OwnerName(resA.Image.Volume, a.UID)}) {
		t.Fatalf("owner records of a's volume = %v, want a's alone", got)
	}
	serveY.Store(true)
	resB, err := e.cache.Publish(ctx, e.tb.pool, srcY, b, nil)
	if err != nil || resB.Image.Volume == resA.Image.Volume || resB.Image.Marker.SHA256 != sha(y) {
		t.Fatalf("Publish by b when the URL serves its bytes = %+v, %v; want its own volume", resB.Image, err)
	}
	var back bytes.Buffer
	if err := e.lv.Download(ctx, e.tb.pool, resA.Image.Volume, &back, 0, 0); err != nil || sha(back.Bytes()) != sha(x) {
		t.Errorf("a's volume no longer holds a's bytes (%v)", err)
	}
	// Unpinned, the same URL is shared only by the digest its bytes have now.
	c := e.owner(t, "c")
	resC, err := e.cache.Publish(ctx, e.tb.pool, Source{URL: srcX.URL}, c, nil)
	if err != nil || !resC.Reused || resC.Image.Volume != resB.Image.Volume {
		t.Fatalf("unpinned Publish while the URL serves b's bytes = %+v, %v; want attached to %s", resC.Image, err, resB.Image.Volume)
	}
}

// TestIntegrationRestoredClusterReattaches: BaseImages recreated with new UIDs (a cluster
// restored from a backup) attach to the volumes their old UIDs published, and the records of
// the old UIDs, gone from the cluster, are cleaned up.
func TestIntegrationRestoredClusterReattaches(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	old := e.owner(t, "debian")
	src := Source{URL: srv.URL + "/img", SHA256: sha(data)}
	res, err := e.cache.Publish(ctx, e.tb.pool, src, old, nil)
	if err != nil {
		t.Fatal(err)
	}
	restored := e.owner(t, "debian")
	restored.Namespace = old.Namespace
	srv.Close() // nothing is downloaded again
	alive := func(_ context.Context, uid string) (bool, error) { return uid == restored.UID, nil }
	after := New(e.lv, e.sh, e.dl, WithLiveness(alive))
	again, err := after.Publish(ctx, e.tb.pool, src, restored, nil)
	if err != nil || !again.Reused || again.Image.Volume != res.Image.Volume {
		t.Fatalf("Publish after the restore = %+v, %v; want attached to %s", again, err, res.Image.Volume)
	}
	if got := e.ownerRecords(t, ctx, res.Image.Volume); !slices.Equal(got, []string{OwnerName(res.Image.Volume, restored.UID)}) {
		t.Fatalf("owner records = %v, want the restored UID's alone", got)
	}
	// The last owner's removal deletes the volume even though its marker names the old UID.
	if r, err := after.Remove(ctx, e.tb.pool, res.Image.Volume, restored.UID); err != nil || r.Kept {
		t.Fatalf("Remove = %+v, %v", r, err)
	}
	e.requireAbsent(t, ctx, src)
}

// TestIntegrationConcurrentOwners: 10 BaseImages, each with its own Cache and connection (as
// reconciles of their own), attach and detach concurrently: exactly the right owner records
// are left, the image is uploaded once, and the volume is kept throughout.
func TestIntegrationConcurrentOwners(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 5*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	srv.throttle.Store(false)
	e.serve(t, srv)
	src := Source{URL: srv.URL + "/img", SHA256: sha(data)}
	var owners []Owner
	for i := range 10 {
		o := e.owner(t, "concurrent-"+strconv.Itoa(i))
		o.Namespace = "team-" + strconv.Itoa(i)
		owners = append(owners, o)
	}
	caches := make([]*Cache, len(owners))
	for i := range owners {
		caches[i] = New(libvirt.New(e.tb.connect(t), e.lvsh, libvirt.WithSocket(e.tb.cfg.Socket)), e.sh, e.dl)
	}
	var uploads atomic.Int32
	run := func(fn func(i int) error, idx ...int) {
		t.Helper()
		errs := make([]error, len(owners))
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = fn(i) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("owner %d: %v", i, err)
			}
		}
	}
	attach := func(i int) error {
		res, err := caches[i].Publish(ctx, e.tb.pool, src, owners[i], nil)
		if err == nil && !res.Reused {
			uploads.Add(1)
		}
		return err
	}
	detach := func(i int) error {
		_, err := caches[i].Remove(ctx, e.tb.pool, VolumeName(src), owners[i].UID)
		return err
	}
	vol := VolumeName(src)
	want := func(idx ...int) []string {
		var n []string
		for _, i := range idx {
			n = append(n, OwnerName(vol, owners[i].UID))
		}
		return sortedNames(n...)
	}
	// Five attach at once: one uploads, the others wait for it and attach.
	run(attach, 0, 1, 2, 3, 4)
	if got := e.ownerRecords(t, ctx, vol); !slices.Equal(got, want(0, 1, 2, 3, 4)) || uploads.Load() != 1 {
		t.Fatalf("after 5 attaches: %d uploads, owner records %v", uploads.Load(), got)
	}
	// The other five attach while four of the first five detach; owner 0 stays, so the volume
	// is kept throughout and nobody uploads again. (Were all five to detach, the last one
	// could rightly remove the volume before a newcomer's record exists, and the newcomer
	// would upload it again.)
	run(func(i int) error {
		if i < 5 {
			return detach(i)
		}
		return attach(i)
	}, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	if got := e.ownerRecords(t, ctx, vol); !slices.Equal(got, want(0, 5, 6, 7, 8, 9)) || uploads.Load() != 1 {
		t.Fatalf("after attaching 5 and detaching 4 of 5: %d uploads, owner records %v", uploads.Load(), got)
	}
	if img, err := e.cache.LookupVolume(ctx, e.tb.pool, vol, owners[9].UID); err != nil || img.State != StatePublished {
		t.Fatalf("the shared volume: %+v, %v", img, err)
	}
	// The last six detach at once: exactly one of them removes the volume.
	run(detach, 0, 5, 6, 7, 8, 9)
	e.requireAbsent(t, ctx, src)
}

func TestIntegrationRemoveInUse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	owner := e.owner(t, "inuse")
	src := Source{URL: srv.URL + "/img", SHA256: sha(data)}
	res, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	base := res.Image

	overlay := uniqueName("overlay") + ".qcow2"
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: overlay, Format: libvirt.FormatQCOW2, CapacityBytes: uint64(base.Marker.VirtualSizeBytes), BackingStorePath: base.Path, BackingStoreFormat: libvirt.FormatQCOW2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lv.CreateVolume(ctx, e.tb.pool, x); err != nil {
		t.Fatalf("creating the overlay: %v", err)
	}
	t.Cleanup(func() { _ = e.lv.DeleteVolume(context.Background(), e.tb.pool, overlay) })

	_, err = e.cache.Remove(ctx, e.tb.pool, base.Volume, owner.UID)
	var iu *InUseError
	if !IsInUse(err) || !errorsAs(err, &iu) || len(iu.Users) != 1 || iu.Users[0] != "volume "+e.tb.pool+"/"+overlay {
		t.Fatalf("Remove = %v, want InUseError naming volume %s/%s", err, e.tb.pool, overlay)
	}
	if img, err := e.cache.Lookup(ctx, e.tb.pool, src, owner.UID); err != nil || img.State != StatePublished {
		t.Fatalf("base after a refused Remove: %+v, %v", img, err)
	}

	// A domain whose disk is the base itself is a user too, named by its file or as a volume
	// of its pool (resolved from the scan's listing of that pool).
	dom := uniqueName("dom")
	domXML := `<domain type='qemu'><name>` + dom + `</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os>` +
		`<devices><disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='` + base.Path + `'/><target dev='vda' bus='virtio'/><readonly/></disk>` +
		`<disk type='volume' device='disk'><driver name='qemu' type='qcow2'/><source pool='` + e.tb.pool + `' volume='` + base.Volume + `'/><target dev='vdb' bus='virtio'/><readonly/></disk></devices></domain>`
	if err := e.tb.conn.Do(ctx, func(l *golibvirt.Libvirt) error { _, err := l.DomainDefineXML(domXML); return err }); err != nil {
		t.Fatalf("defining a domain: %v", err)
	}
	undefine := func() error {
		return e.tb.conn.Do(context.Background(), func(l *golibvirt.Libvirt) error {
			d, err := l.DomainLookupByName(dom)
			if err != nil {
				return err
			}
			return l.DomainUndefine(d)
		})
	}
	t.Cleanup(func() { _ = undefine() })
	u, err := e.cache.Users(ctx, base.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"domain " + dom + " disk vda", "domain " + dom + " disk vdb", "volume " + e.tb.pool + "/" + overlay}
	if strings.Join(u.Users, "|") != strings.Join(want, "|") {
		t.Errorf("Users = %q, want %q", u.Users, want)
	}
	if err := undefine(); err != nil {
		t.Fatal(err)
	}

	if err := e.lv.DeleteVolume(ctx, e.tb.pool, overlay); err != nil {
		t.Fatal(err)
	}
	// A removal's first check may reuse a scan of the host up to ScanReuse old: one made
	// before the overlay went would still see it (a stale "in use" only delays a removal; the
	// check after unpublishing always reads the host afresh).
	time.Sleep(ScanReuse)
	if _, err := e.cache.Remove(ctx, e.tb.pool, base.Volume, owner.UID); err != nil {
		t.Fatalf("Remove after the overlay is gone: %v", err)
	}
	e.requireAbsent(t, ctx, src)
}

// retryTransient retries fn for a while: right after this test's ctl.sh
// kill-ssh-sessions reconnecting can fail for a few seconds, and a
// controller would requeue.
func retryTransient(ctx context.Context, t *testing.T, fn func() error) error {
	t.Helper()
	var err error
	for try := 0; try < 10; try++ {
		if err = fn(); err == nil || ctx.Err() != nil {
			return err
		}
		t.Logf("retrying after: %v", err)
		time.Sleep(2 * time.Second)
	}
	return err
}

// TestIntegrationInactivePoolKeepsBase: a shut-off domain whose overlay is in a pool that is
// inactive keeps its base volume: the removal cannot read that pool, so its last owner lets go
// and the volume stays, saying why; once the pool is active the overlay is seen and keeps it;
// once it is gone the base goes.
func TestIntegrationInactivePoolKeepsBase(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	owner := e.owner(t, "cold")
	src := Source{URL: srv.URL + "/img", SHA256: sha(data)}
	res, err := e.cache.Publish(ctx, e.tb.pool, src, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := res.Image

	// A second dir pool next to the test bed's, with an overlay onto the base.
	tp, err := e.lv.Pool(ctx, e.tb.pool)
	if err != nil {
		t.Fatal(err)
	}
	cold := uniqueName("cold")
	poolXML := `<pool type='dir'><name>` + cold + `</name><target><path>` + filepath.Join(filepath.Dir(tp.Path), cold) + `</path></target></pool>`
	do := func(fn func(l *golibvirt.Libvirt) error) error { return e.tb.conn.Do(context.Background(), fn) }
	var sp golibvirt.StoragePool
	if err := do(func(l *golibvirt.Libvirt) error {
		var err error
		if sp, err = l.StoragePoolDefineXML(poolXML, 0); err != nil {
			return err
		}
		if err := l.StoragePoolBuild(sp, 0); err != nil {
			return err
		}
		return l.StoragePoolCreate(sp, 0)
	}); err != nil {
		t.Fatalf("making pool %s: %v", cold, err)
	}
	overlay := uniqueName("overlay") + ".qcow2"
	dom := uniqueName("dom")
	t.Cleanup(func() {
		_ = do(func(l *golibvirt.Libvirt) error {
			if d, err := l.DomainLookupByName(dom); err == nil {
				_ = l.DomainUndefine(d)
			}
			_ = l.StoragePoolCreate(sp, 0) // to delete the overlay, if it is inactive
			return nil
		})
		_ = e.lv.DeleteVolume(context.Background(), cold, overlay)
		_ = do(func(l *golibvirt.Libvirt) error {
			_ = l.StoragePoolDestroy(sp)
			_ = l.StoragePoolDelete(sp, 0)
			return l.StoragePoolUndefine(sp)
		})
	})
	x, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: overlay, Format: libvirt.FormatQCOW2, CapacityBytes: uint64(base.Marker.VirtualSizeBytes), BackingStorePath: base.Path, BackingStoreFormat: libvirt.FormatQCOW2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lv.CreateVolume(ctx, cold, x); err != nil {
		t.Fatalf("creating the overlay: %v", err)
	}
	// A shut-off domain on the overlay, defined by someone else than the provider.
	domXML := `<domain type='qemu'><name>` + dom + `</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os>` +
		`<devices><disk type='volume' device='disk'><driver name='qemu' type='qcow2'/><source pool='` + cold + `' volume='` + overlay + `'/><target dev='vda' bus='virtio'/></disk></devices></domain>`
	if err := do(func(l *golibvirt.Libvirt) error { _, err := l.DomainDefineXML(domXML); return err }); err != nil {
		t.Fatalf("defining a domain: %v", err)
	}
	if err := do(func(l *golibvirt.Libvirt) error { return l.StoragePoolDestroy(sp) }); err != nil {
		t.Fatalf("deactivating pool %s: %v", cold, err)
	}

	// Nothing is seen to use the base, but the inactive pool's disks cannot be ruled out: the
	// last owner lets go of it (its record goes, so its deletion does not wait for the pool),
	// and the volume stays, published and without an owner, for the sweep (decision 48).
	r, err := e.cache.Remove(ctx, e.tb.pool, base.Volume, owner.UID)
	if err != nil || !r.Left || !strings.Contains(strings.Join(r.Doubts, "; "), "pool "+cold+" is inactive") {
		t.Fatalf("Remove with the overlay's pool inactive = %+v, %v; want the volume left to the sweep, naming the inactive pool", r, err)
	}
	if img, err := e.cache.LookupVolume(ctx, e.tb.pool, base.Volume, owner.UID); err != nil || img.State != StatePublished || img.Own != nil {
		t.Fatalf("base after its last owner let go: %+v, %v; want it published, without the owner's record", img, err)
	}
	var iu *InUseError

	if err := do(func(l *golibvirt.Libvirt) error { return l.StoragePoolCreate(sp, 0) }); err != nil {
		t.Fatal(err)
	}
	// A removal's first check may reuse a scan of the host up to ScanReuse old: the one made
	// while the pool was inactive would still see only doubts.
	time.Sleep(ScanReuse)
	_, err = e.cache.Remove(ctx, e.tb.pool, base.Volume, owner.UID)
	if !errorsAs(err, &iu) || !slices.Equal(iu.Users, []string{"volume " + cold + "/" + overlay}) || len(iu.Doubts) != 0 {
		t.Fatalf("Remove with the overlay's pool active = %v, want InUseError naming volume %s/%s", err, cold, overlay)
	}

	if err := do(func(l *golibvirt.Libvirt) error {
		d, err := l.DomainLookupByName(dom)
		if err != nil {
			return err
		}
		return l.DomainUndefine(d)
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.lv.DeleteVolume(ctx, cold, overlay); err != nil {
		t.Fatal(err)
	}
	if err := do(func(l *golibvirt.Libvirt) error {
		_ = l.StoragePoolDestroy(sp)
		_ = l.StoragePoolDelete(sp, 0)
		return l.StoragePoolUndefine(sp)
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ScanReuse) // the last scan still saw the overlay
	if _, err := e.cache.Remove(ctx, e.tb.pool, base.Volume, owner.UID); err != nil {
		t.Fatalf("Remove once nothing uses the base: %v", err)
	}
	e.requireAbsent(t, ctx, src)
}

// TestIntegrationObserveCost: a steady-state Observe of an image shared by two owners costs at
// most three libvirt calls and opens no connection (the data volume's size, the marker's and
// the owner record's fingerprints).
func TestIntegrationObserveCost(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	data := uniqueQCOW2(t)
	srv := newImageServer(t, data)
	e.serve(t, srv)
	a, b := e.owner(t, "a"), e.owner(t, "b")
	src := Source{URL: srv.URL + "/img", SHA256: sha(data)}
	for _, o := range []Owner{a, b} {
		if _, err := e.cache.Publish(ctx, e.tb.pool, src, o, nil); err != nil {
			t.Fatal(err)
		}
	}
	kind := uniqueName("kind")
	kctx := metrics.WithKind(ctx, kind)
	count := func() (calls, conns float64) {
		t.Helper()
		mfs, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case metrics.CallsName:
					for _, l := range m.GetLabel() {
						if l.GetName() == "kind" && l.GetValue() == kind {
							calls += m.GetCounter().GetValue()
						}
					}
				case metrics.ConnectionsName:
					conns += m.GetCounter().GetValue()
				}
			}
		}
		return calls, conns
	}
	vol := VolumeName(src)
	if _, err := e.cache.LookupVolume(kctx, e.tb.pool, vol, b.UID); err != nil { // remembers the records
		t.Fatal(err)
	}
	calls0, conns0 := count()
	img, err := e.cache.LookupVolume(kctx, e.tb.pool, vol, b.UID)
	if err != nil || img.State != StatePublished || img.Own == nil {
		t.Fatalf("LookupVolume = %+v, %v", img, err)
	}
	calls1, conns1 := count()
	t.Logf("steady-state LookupVolume: %.0f libvirt calls, %.0f connections opened", calls1-calls0, conns1-conns0)
	if calls1-calls0 > 3 || conns1 != conns0 {
		t.Errorf("a steady-state LookupVolume made %.0f libvirt calls and opened %.0f connections, want at most 3 and none", calls1-calls0, conns1-conns0)
	}
}

// TestIntegrationSweep: a volume whose only owner vanished from the cluster without a Remove
// is removed by a sweep; one with a live owner is kept with its record.
func TestIntegrationSweep(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	x, y := uniqueQCOW2(t), uniqueQCOW2(t)
	srvX, srvY := newImageServer(t, x), newImageServer(t, y)
	e.dl = downloadsFor(t, allowServers(t, srvX.Server, srvY.Server))
	e.cache = New(e.lv, e.sh, e.dl)
	gone, live := e.owner(t, "gone"), e.owner(t, "live")
	srcX, srcY := Source{URL: srvX.URL + "/img", SHA256: sha(x)}, Source{URL: srvY.URL + "/img", SHA256: sha(y)}
	if _, err := e.cache.Publish(ctx, e.tb.pool, srcX, gone, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cache.Publish(ctx, e.tb.pool, srcY, live, nil); err != nil {
		t.Fatal(err)
	}
	alive := func(_ context.Context, uid string) (bool, error) { return uid != gone.UID, nil }
	removed, kept, err := New(e.lv, e.sh, e.dl, WithLiveness(alive)).Sweep(ctx, e.tb.pool)
	if err != nil || !slices.Contains(removed, VolumeName(srcX)) || slices.Contains(removed, VolumeName(srcY)) {
		t.Fatalf("Sweep = removed %v, kept %v, %v; want %s removed and %s kept", removed, kept, err, VolumeName(srcX), VolumeName(srcY))
	}
	e.requireAbsent(t, ctx, srcX)
	if got := e.ownerRecords(t, ctx, VolumeName(srcY)); !slices.Equal(got, []string{OwnerName(VolumeName(srcY), live.UID)}) {
		t.Fatalf("owner records of the live owner's volume = %v", got)
	}
}
