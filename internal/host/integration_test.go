package host

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
)

// testbed describes the real host started by cluster/testbed/up.sh.
type testbed struct {
	dir, netns, ctl string
	host            string
	port            int
	user            string
	knownHosts      []byte
	socket          string
}

// requireTestbed returns the test bed from TESTBED_* variables. Without
// them the test is skipped loudly, or fails when CI is set. The test must
// run inside the test bed's network namespace
// (cluster/testbed/run-in-netns.sh).
func requireTestbed(t testing.TB) *testbed {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := "INTEGRATION TEST NOT RUN: " + strings.TrimSpace(fmtSprintf(format, args...)) +
			"; start the test bed with cluster/testbed/up.sh and run: cluster/testbed/run-in-netns.sh go test ./internal/host/..."
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, v := range []string{"TESTBED_DIR", "TESTBED_NETNS", "TESTBED_CTL", "TESTBED_SSH_HOST", "TESTBED_SSH_PORT", "TESTBED_SSH_KNOWN_HOSTS", "TESTBED_LIBVIRT_SOCKET"} {
		if os.Getenv(v) == "" {
			missing("environment variable %s is not set", v)
		}
	}
	tb := &testbed{
		dir: os.Getenv("TESTBED_DIR"), netns: os.Getenv("TESTBED_NETNS"), ctl: os.Getenv("TESTBED_CTL"),
		host: os.Getenv("TESTBED_SSH_HOST"), user: os.Getenv("TESTBED_SSH_USER"), socket: os.Getenv("TESTBED_LIBVIRT_SOCKET"),
	}
	var err error
	if tb.port, err = strconv.Atoi(os.Getenv("TESTBED_SSH_PORT")); err != nil {
		t.Fatalf("TESTBED_SSH_PORT: %v", err)
	}
	// Network rule: only talk to the sshd inside the test bed's namespace.
	var self, ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat("/run/netns/"+tb.netns, &ns); err != nil {
		missing("network namespace %s does not exist (%v)", tb.netns, err)
	}
	if self.Ino != ns.Ino || self.Dev != ns.Dev {
		missing("this test process is not inside network namespace %s", tb.netns)
	}
	tb.knownHosts = tb.read(t, os.Getenv("TESTBED_SSH_KNOWN_HOSTS"))
	return tb
}

func fmtSprintf(format string, args ...any) string {
	return strings.TrimSpace(strings.ReplaceAll(sprintf(format, args...), "\n", " "))
}

func (tb *testbed) read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading test bed file: %v", err)
	}
	return b
}

// config returns a Config using the key in env variable keyVar.
func (tb *testbed) config(t testing.TB, keyVar string) Config {
	t.Helper()
	return Config{
		Host: tb.host, Port: tb.port, User: tb.user,
		PrivateKey: tb.read(t, os.Getenv(keyVar)),
		KnownHosts: tb.knownHosts,
		Socket:     tb.socket,
	}
}

func (tb *testbed) hostKey(t testing.TB) ssh.PublicKey {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey(tb.read(t, filepath.Join(tb.dir, "ssh", "ssh_host_ed25519_key.pub")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (tb *testbed) run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(tb.ctl, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tb.ctl, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// sshConns counts established TCP connections to the test bed's sshd.
func (tb *testbed) sshConns(t testing.TB) int {
	t.Helper()
	out, err := exec.Command("ss", "-Htn", "state", "established", "( dport = :"+strconv.Itoa(tb.port)+" )").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

func listDomains(ctx context.Context, c *Conn) ([]libvirt.Domain, error) {
	var doms []libvirt.Domain
	err := c.Do(ctx, func(l *libvirt.Libvirt) error {
		var err error
		doms, _, err = l.ConnectListAllDomains(1, 0)
		return err
	})
	return doms, err
}

func libVersion(ctx context.Context, c *Conn) (uint64, error) {
	var v uint64
	err := c.Do(ctx, func(l *libvirt.Libvirt) error {
		var err error
		v, err = l.ConnectGetLibVersion()
		return err
	})
	return v, err
}

func mustVersion(t testing.TB, ctx context.Context, c *Conn) {
	t.Helper()
	if _, err := libVersion(ctx, c); err != nil {
		t.Fatalf("ConnectGetLibVersion: %v", err)
	}
}

func newPool(t testing.TB, opts ...Option) *Connections {
	p := NewConnections(append([]Option{WithDialTimeout(10 * time.Second), WithKeepAlive(2 * time.Second)}, opts...)...)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestIntegrationListDomainsAndPools(t *testing.T) {
	tb := requireTestbed(t)
	p := newPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := p.Get(ctx, tb.config(t, "TESTBED_SSH_KEY"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := listDomains(ctx, c); err != nil {
		t.Fatalf("ConnectListAllDomains: %v", err)
	}
	var pools []libvirt.StoragePool
	if err := c.Do(ctx, func(l *libvirt.Libvirt) error {
		var err error
		pools, _, err = l.ConnectListAllStoragePools(1, 0)
		return err
	}); err != nil {
		t.Fatalf("ConnectListAllStoragePools: %v", err)
	}
	want := os.Getenv("TESTBED_POOL")
	found := false
	for _, sp := range pools {
		found = found || sp.Name == want
	}
	if want != "" && !found {
		t.Errorf("storage pool %q not listed: %v", want, pools)
	}
}

func TestIntegrationKeyTypes(t *testing.T) {
	tb := requireTestbed(t)
	cases := map[string]struct {
		keyVar string
		pass   string
	}{
		"Ed25519":    {keyVar: "TESTBED_SSH_KEY"},
		"RSA":        {keyVar: "TESTBED_SSH_KEY_RSA"},
		"ECDSA":      {keyVar: "TESTBED_SSH_KEY_ECDSA"},
		"Passphrase": {keyVar: "TESTBED_SSH_KEY_PASSPHRASE", pass: os.Getenv("TESTBED_SSH_PASSPHRASE")},
	}
	p := newPool(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := tb.config(t, tc.keyVar)
			cfg.Passphrase = []byte(tc.pass)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			c, err := p.Get(ctx, cfg)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			mustVersion(t, ctx, c)
		})
	}
	if p.Len() != len(cases) {
		t.Errorf("pool entries = %d, want %d (one per key)", p.Len(), len(cases))
	}
}

func TestIntegrationRefused(t *testing.T) {
	tb := requireTestbed(t)
	real := keyString(tb.hostKey(t))
	other := newEd25519(t)
	name := knownHostsName(tb.host, tb.port)
	cases := map[string]struct {
		mod      func(*Config)
		hostKey  bool
		contains []string
		absent   []string
	}{
		"UnknownHostKey": {
			mod:      func(c *Config) { c.KnownHosts = []byte(line("", "[127.0.0.2]:2222", tb.hostKey(t), false)) },
			hostKey:  true,
			contains: []string{"cannot connect to libvirt host root@" + tb.host, name, real, "unknown"},
		},
		"MismatchedHostKey": {
			mod:      func(c *Config) { c.KnownHosts = []byte(line("", name, other, true)) },
			hostKey:  true,
			contains: []string{"cannot connect to libvirt host", name, real, keyString(other), "mismatch"},
		},
		"WrongUserKey": {
			mod:      func(c *Config) { c.PrivateKey = tb.read(t, os.Getenv("TESTBED_SSH_KEY_UNAUTHORIZED")) },
			contains: []string{"cannot connect to libvirt host root@" + tb.host, "unable to authenticate"},
		},
		"WrongPassphrase": {
			mod: func(c *Config) {
				c.PrivateKey = tb.read(t, os.Getenv("TESTBED_SSH_KEY_PASSPHRASE"))
				c.Passphrase = []byte("not-" + os.Getenv("TESTBED_SSH_PASSPHRASE"))
			},
			contains: []string{"passphrase is incorrect"},
			absent:   []string{os.Getenv("TESTBED_SSH_PASSPHRASE")},
		},
		"NoSocket": {
			mod:      func(c *Config) { c.Socket = "/run/libvirt/does-not-exist" },
			contains: []string{"cannot open libvirt socket /run/libvirt/does-not-exist"},
		},
	}
	p := newPool(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := tb.config(t, "TESTBED_SSH_KEY")
			tc.mod(&cfg)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err := p.Get(ctx, cfg)
			if err == nil {
				t.Fatal("Get: want error")
			}
			if got := IsHostKeyError(err); got != tc.hostKey {
				t.Errorf("IsHostKeyError(%v) = %v, want %v", err, got, tc.hostKey)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			for _, s := range tc.absent {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains secret", err)
				}
			}
		})
	}
}

func TestIntegrationReconnect(t *testing.T) {
	tb := requireTestbed(t)
	var opened atomic.Int32
	p := newPool(t, WithOnOpen(func(OpenInfo) { opened.Add(1) }))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := p.Get(ctx, tb.config(t, "TESTBED_SSH_KEY"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	steps := []struct {
		name       string
		ctl        string
		wantOpened int32 // SSH opens so far
	}{
		{name: "KillSSHSessions", ctl: "kill-ssh-sessions", wantOpened: 2},
		{name: "RestartSSHD", ctl: "restart-sshd", wantOpened: 3},
		{name: "RestartLibvirtd", ctl: "restart-libvirtd", wantOpened: 3}, // SSH survives, libvirt reopens over it
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second) // two calls and the fault
			defer cancel()
			mustVersion(t, ctx, c)
			tb.run(t, s.ctl)
			time.Sleep(200 * time.Millisecond)
			if _, err := listDomains(ctx, c); err != nil {
				t.Fatalf("first call after %s: %v", s.ctl, err)
			}
			if got := opened.Load(); got != s.wantOpened {
				t.Errorf("SSH opens = %d, want %d", got, s.wantOpened)
			}
		})
	}
}

func TestIntegrationSharedConnection(t *testing.T) {
	tb := requireTestbed(t)
	before := tb.sshConns(t)
	var opened atomic.Int32
	p := newPool(t, WithOnOpen(func(OpenInfo) { opened.Add(1) }))
	cfg := tb.config(t, "TESTBED_SSH_KEY")
	const callers = 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			c, err := p.Get(ctx, cfg)
			if err != nil {
				errs <- err
				return
			}
			for range 5 {
				if _, err := listDomains(ctx, c); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("caller: %v", err)
	}
	if got := tb.sshConns(t) - before; got != 1 {
		t.Errorf("new established SSH connections = %d, want 1", got)
	}
	if got := opened.Load(); got != 1 {
		t.Errorf("SSH opens = %d, want 1", got)
	}
	// A changed secret gives a new connection.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c2, err := p.Get(ctx, tb.config(t, "TESTBED_SSH_KEY_ECDSA"))
	if err != nil {
		t.Fatalf("Get with other key: %v", err)
	}
	mustVersion(t, ctx, c2)
	if got := tb.sshConns(t) - before; got != 2 {
		t.Errorf("established SSH connections after key change = %d, want 2", got)
	}
}

func TestIntegrationDialFromHost(t *testing.T) {
	tb := requireTestbed(t)
	// We run inside the test bed's namespace: this listener is the "host's" loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("hello from the host side\n"))
			_ = conn.Close()
		}
	}()
	p := newPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := p.Get(ctx, tb.config(t, "TESTBED_SSH_KEY"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	before := tb.sshConns(t)
	nc, err := c.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialContext: %v", err)
	}
	b, err := io.ReadAll(nc)
	_ = nc.Close()
	if err != nil || !bytes.HasPrefix(b, []byte("hello")) {
		t.Fatalf("read %q, %v", b, err)
	}
	if got := tb.sshConns(t) - before; got != 0 {
		t.Errorf("DialContext opened %d new SSH connections, want 0 (it rides the pooled one)", got)
	}
	_, err = c.DialContext(ctx, "tcp", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "cannot dial tcp 127.0.0.1:1 from libvirt host") {
		t.Errorf("DialContext to closed port: %v", err)
	}
}

func TestIntegrationInsecureOnOpen(t *testing.T) {
	tb := requireTestbed(t)
	var mu sync.Mutex
	var infos, ctxInfos []OpenInfo
	p := newPool(t, WithOnOpen(func(i OpenInfo) { mu.Lock(); infos = append(infos, i); mu.Unlock() }))
	cfg := tb.config(t, "TESTBED_SSH_KEY")
	cfg.KnownHosts = nil
	cfg.InsecureSkipHostKeyVerification = true
	tctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx := ContextWithOnOpen(tctx, func(i OpenInfo) { mu.Lock(); ctxInfos = append(ctxInfos, i); mu.Unlock() })
	c, err := p.Get(ctx, cfg)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	mustVersion(t, ctx, c)
	tb.run(t, "kill-ssh-sessions")
	time.Sleep(200 * time.Millisecond)
	mustVersion(t, ctx, c)
	mu.Lock()
	defer mu.Unlock()
	if len(infos) != 2 || len(ctxInfos) != 2 {
		t.Fatalf("OnOpen calls: pool %d, context %d; want 2 each (one per open)", len(infos), len(ctxInfos))
	}
	want := OpenInfo{Transport: TransportSSH, Address: cfg.Address(), Insecure: true, HostKeyFingerprint: ssh.FingerprintSHA256(tb.hostKey(t))}
	for _, i := range append(infos, ctxInfos...) {
		if i != want {
			t.Errorf("OpenInfo = %+v, want %+v", i, want)
		}
	}
}

func TestIntegrationIdleClose(t *testing.T) {
	tb := requireTestbed(t)
	before := tb.sshConns(t)
	var opened atomic.Int32
	p := newPool(t, WithIdleTimeout(300*time.Millisecond), WithOnOpen(func(OpenInfo) { opened.Add(1) }))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := p.Get(ctx, tb.config(t, "TESTBED_SSH_KEY"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	mustVersion(t, ctx, c)
	if got := tb.sshConns(t) - before; got != 1 {
		t.Errorf("open SSH connections = %d, want 1", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Len() != 0 || tb.sshConns(t) != before {
		if time.Now().After(deadline) {
			t.Fatalf("idle connection not closed: entries %d, ssh conns %d (before %d)", p.Len(), tb.sshConns(t), before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mustVersion(t, ctx, c) // the handle reopens
	if got := opened.Load(); got != 2 {
		t.Errorf("SSH opens = %d, want 2", got)
	}
}

// TestIntegrationCallDeadline checks the stuck-call rule on the real host: a call that
// outlives its context returns at once with the context's error while other callers of the
// host go on on the same connection, unharmed, and nothing is reopened.
func TestIntegrationCallDeadline(t *testing.T) {
	tb := requireTestbed(t)
	var opened atomic.Int32
	p := newPool(t, WithOnOpen(func(OpenInfo) { opened.Add(1) }))
	getCtx, cancelGet := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelGet()
	c, err := p.Get(getCtx, tb.config(t, "TESTBED_SSH_KEY"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sshBefore := tb.sshConns(t)
	stop := make(chan struct{})
	var calls, failed atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				_, err := libVersion(cctx, c)
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("another caller's call: %v", err)
				}
				calls.Add(1)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// A real RPC, then a reply that takes a second and a half to come.
	err = c.Do(ctx, func(l *libvirt.Libvirt) error {
		if _, err := l.ConnectGetLibVersion(); err != nil {
			return err
		}
		time.Sleep(1500 * time.Millisecond)
		return nil
	})
	took := time.Since(start)
	time.Sleep(2 * time.Second) // the stuck call returns, the others go on
	close(stop)
	wg.Wait()
	if !errorsIs(err, context.DeadlineExceeded) {
		t.Fatalf("Do past deadline: %v, want context.DeadlineExceeded", err)
	}
	if took > 400*time.Millisecond {
		t.Errorf("Do past its deadline returned after %v, want at its deadline", took)
	}
	if calls.Load() < 10 || failed.Load() != 0 {
		t.Errorf("other callers: %d calls, %d failed; want many, none failed", calls.Load(), failed.Load())
	}
	if got := opened.Load(); got != 1 {
		t.Errorf("SSH opens = %d, want 1 (the shared connection is kept)", got)
	}
	if got := tb.sshConns(t); got != sshBefore {
		t.Errorf("SSH connections to the host = %d, want %d", got, sshBefore)
	}
	// A context that has ended sends nothing.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	sent := false
	if err := c.Do(done, func(*libvirt.Libvirt) error { sent = true; return nil }); !errorsIs(err, context.Canceled) || sent {
		t.Errorf("Do with an ended context: %v, sent %v; want context.Canceled, nothing sent", err, sent)
	}
	t.Logf("%d calls of other callers during the stuck call, none failed", calls.Load())
}

// TestIntegrationBreakerRecovers checks that a host that comes back is connected at the
// breaker's next attempt, and that its failures are forgotten: a Unix transport to a socket
// path that appears later (a link to the test bed's libvirt socket).
func TestIntegrationBreakerRecovers(t *testing.T) {
	tb := requireTestbed(t)
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	p := newPool(t, WithBreaker(500*time.Millisecond, time.Second))
	cfg := Config{Transport: TransportUnix, Socket: sock}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := p.Get(ctx, cfg); err == nil {
		t.Fatal("Get before the socket exists: want an error")
	}
	if _, err := p.Get(ctx, cfg); !IsHostDown(err) {
		t.Fatalf("second Get: %v, want a *HostDownError", err)
	}
	if err := os.Symlink(tb.socket, sock); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := p.Get(ctx, cfg)
		if err == nil {
			mustVersion(t, ctx, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host came back but Get still fails: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestIntegrationUnixAndTestDriver(t *testing.T) {
	tb := requireTestbed(t)
	p := newPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := p.Get(ctx, Config{Transport: TransportUnix, Socket: tb.socket})
	if err != nil {
		t.Fatalf("Get Unix: %v", err)
	}
	if _, err := listDomains(ctx, c); err != nil {
		t.Fatalf("Unix ConnectListAllDomains: %v", err)
	}
	cfg := tb.config(t, "TESTBED_SSH_KEY")
	cfg.URI = "test:///default"
	c, err = p.Get(ctx, cfg)
	if err != nil {
		t.Fatalf("Get test:///default over SSH: %v", err)
	}
	doms, err := listDomains(ctx, c)
	if err != nil || len(doms) == 0 {
		t.Fatalf("test:///default domains %v, %v (want the driver's 'test' domain)", doms, err)
	}
}

func BenchmarkRoundTrip(b *testing.B) {
	tb := requireTestbed(b)
	p := newPool(b)
	ctx := context.Background()
	c, err := p.Get(ctx, tb.config(b, "TESTBED_SSH_KEY"))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := libVersion(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	tb := requireTestbed(b)
	cfg := tb.config(b, "TESTBED_SSH_KEY")
	ctx := context.Background()
	for b.Loop() {
		p := NewConnections()
		c, err := p.Get(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := libVersion(ctx, c); err != nil {
			b.Fatal(err)
		}
		_ = p.Close()
	}
}
