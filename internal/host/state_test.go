package host

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt/libvirttest"
	"github.com/google/go-cmp/cmp"
)

// fakeLibvirtd serves go-libvirt's in-memory libvirtd (libvirttest) on a Unix socket, one mock
// per connection; stop ends every connection and the socket, like a libvirtd that stopped.
type fakeLibvirtd struct {
	path string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newFakeLibvirtd(t *testing.T) *fakeLibvirtd {
	t.Helper()
	f := &fakeLibvirtd{path: filepath.Join(t.TempDir(), "libvirt-sock")}
	f.start(t)
	t.Cleanup(f.stop)
	return f
}

func (f *fakeLibvirtd) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mc, err := libvirttest.New().Dial()
			if err != nil {
				_ = c.Close()
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, mc)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(mc, c); _ = mc.Close() }()
			go func() { _, _ = io.Copy(c, mc); _ = c.Close() }()
		}
	}()
}

func (f *fakeLibvirtd) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		_ = f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

// states records what a pool tells its WithOnState callback.
type states chan State

func (s states) on(st State) { s <- st }

// next is the next State told; a State that never comes fails the test (a bound, not a timed
// assertion: every State here follows from a step the test took).
func (s states) next(t *testing.T, what string) State {
	t.Helper()
	select {
	case st := <-s:
		return st
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no State told", what)
		return State{}
	}
}

// TestStateChanges: the pool tells its WithOnState callback Up when it opens a connection,
// Down when the connection ends without the pool closing it (libvirtd stopped) and when an
// attempt to open one fails, Up again once it reopens, and nothing when it closes a
// connection itself (idle, Close).
func TestStateChanges(t *testing.T) {
	lvd := newFakeLibvirtd(t)
	got := make(states, 16)
	p := NewConnections(WithOnState(got.on), WithBreaker(0, 0), WithIdleTimeout(0))
	t.Cleanup(func() { _ = p.Close() })
	cfg := Config{Transport: TransportUnix, Socket: lvd.path}
	up := State{Key: cfg.Key(), Address: "unix:" + lvd.path, Up: true}
	down := State{Key: cfg.Key(), Address: "unix:" + lvd.path}
	ctx := context.Background()

	check := func(what string, want State) {
		t.Helper()
		if diff := cmp.Diff(want, got.next(t, what)); diff != "" {
			t.Errorf("%s: -want +got:\n%s", what, diff)
		}
	}
	if _, err := p.Get(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check("first open", up)
	if _, err := p.Get(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	lvd.stop()
	check("libvirtd stopped", down)
	if _, err := p.Get(ctx, cfg); err == nil {
		t.Fatal("Get with libvirtd stopped: want an error")
	}
	check("attempt failed", down)

	lvd.start(t)
	if _, err := p.Get(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check("reopened", up)

	// Closed by the pool for idleness: no State. The next one told is the reopen's Up.
	p.reap(time.Now().Add(time.Hour))
	if _, err := p.Get(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check("reopened after the idle close (and no Down for the close)", up)

	// Closed with the pool: nothing told (the channel is read once the close returned).
	_ = p.Close()
	select {
	case st := <-got:
		t.Errorf("State told for a connection the pool closed itself: %+v", st)
	default:
	}
}

// Configs that differ only in what identifies a connection have different keys; the key
// holds no secret.
func TestConfigKey(t *testing.T) {
	a := Config{Host: "h", PrivateKey: []byte("secret-key")}
	b := a
	b.PrivateKey = []byte("other-key")
	if a.Key() == b.Key() {
		t.Error("different keys, same connection key")
	}
	if a.Key() != a.WithDefaults().Key() {
		t.Error("a config and its defaults have different connection keys")
	}
	if k := a.Key(); len(k) != 64 {
		t.Errorf("key %q: want a hex SHA-256", k)
	}
}
