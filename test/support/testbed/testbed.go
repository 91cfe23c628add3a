// Package testbed gives integration tests the real libvirt host that cluster/testbed/up.sh
// starts: libvirtd and sshd inside network namespace kvmhost, described by the TESTBED_*
// variables of its env.sh. Tests run inside that namespace through
// cluster/testbed/run-in-netns.sh (make test does this).
//
// Without the test bed a test is skipped with a loud reason, except when CI is set: then it
// fails, so a CI run can never count a test that did not run as passed.
package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/netns"
)

// Env describes the test bed.
type Env struct {
	Dir, Netns, Ctl    string
	SSHHost, SSHUser   string
	SSHPort            int
	KeyFile            string
	KnownHostsFile     string
	PassphraseKeyFile  string
	Passphrase         string
	LibvirtSocket      string
	Pool, PoolDir, Net string
}

// Require returns the test bed, or skips (fails under CI) when it is missing or when the test
// process is not inside the test bed's network namespace.
func Require(t testing.TB) *Env {
	t.Helper()
	for _, v := range []string{"TESTBED_DIR", "TESTBED_NETNS", "TESTBED_CTL", "TESTBED_SSH_HOST", "TESTBED_SSH_PORT", "TESTBED_SSH_KEY", "TESTBED_SSH_KNOWN_HOSTS", "TESTBED_LIBVIRT_SOCKET", "TESTBED_POOL"} {
		if os.Getenv(v) == "" {
			missing(t, "environment variable "+v+" is not set")
		}
	}
	e := &Env{
		Dir: os.Getenv("TESTBED_DIR"), Netns: os.Getenv("TESTBED_NETNS"), Ctl: os.Getenv("TESTBED_CTL"),
		SSHHost: os.Getenv("TESTBED_SSH_HOST"), SSHUser: os.Getenv("TESTBED_SSH_USER"),
		KeyFile: os.Getenv("TESTBED_SSH_KEY"), KnownHostsFile: os.Getenv("TESTBED_SSH_KNOWN_HOSTS"),
		PassphraseKeyFile: os.Getenv("TESTBED_SSH_KEY_PASSPHRASE"), Passphrase: os.Getenv("TESTBED_SSH_PASSPHRASE"),
		LibvirtSocket: os.Getenv("TESTBED_LIBVIRT_SOCKET"),
		Pool:          os.Getenv("TESTBED_POOL"), PoolDir: os.Getenv("TESTBED_POOL_DIR"), Net: os.Getenv("TESTBED_NETWORK"),
	}
	var err error
	if e.SSHPort, err = strconv.Atoi(os.Getenv("TESTBED_SSH_PORT")); err != nil {
		t.Fatalf("TESTBED_SSH_PORT: %v", err)
	}
	// Network rule: only talk to hosts inside the test bed's namespace.
	if err := netns.Inside(e.Netns); err != nil {
		missing(t, err.Error())
	}
	reviveOnce.Do(func() { e.reviveLibvirtd(t) })
	return e
}

var reviveOnce sync.Once

// reviveLibvirtd starts the test bed's libvirtd again when it is not running, as a host's
// service manager would: libvirtd 9.0 has been seen to crash (a segfault) minutes after a test
// restarted it, which would fail every later package for a fault none of them tests. Each
// revival is logged to Dir/run/revived.log, which make test prints.
func (e *Env) reviveLibvirtd(t testing.TB) {
	t.Helper()
	if processAlive(filepath.Join(e.Dir, "run", "libvirtd.pid")) {
		return
	}
	out, err := exec.Command(e.Ctl, "start-libvirtd").CombinedOutput()
	note := fmt.Sprintf("%s %s: the test bed's libvirtd was not running (crashed?); started it again: %v %s\n",
		time.Now().UTC().Format(time.RFC3339), filepath.Base(os.Args[0]), err, strings.TrimSpace(string(out)))
	if f, ferr := os.OpenFile(filepath.Join(e.Dir, "run", "revived.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); ferr == nil {
		_, _ = f.WriteString(note)
		_ = f.Close()
	}
	t.Log(note)
	if err != nil {
		t.Fatalf("the test bed's libvirtd is down and did not start again: %v\n%s", err, out)
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	msg := "INTEGRATION TEST NOT RUN: " + why + "; start the test bed with cluster/testbed/up.sh and run the test through cluster/testbed/run-in-netns.sh (make test does both)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Read returns a file of the test bed, e.g. a key.
func (e *Env) Read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read test bed file: %v", err)
	}
	return b
}

// Control runs cluster/testbed/ctl.sh with args, e.g. "kill-ssh-sessions".
func (e *Env) Control(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(e.Ctl, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", e.Ctl, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// HostConfig is the connection config of the test bed's sshd and libvirtd, with its pinned
// host key.
func (e *Env) HostConfig(t testing.TB) host.Config {
	t.Helper()
	return host.Config{
		Host: e.SSHHost, Port: e.SSHPort, User: e.SSHUser,
		PrivateKey: e.Read(t, e.KeyFile), KnownHosts: e.Read(t, e.KnownHostsFile), Socket: e.LibvirtSocket,
	}
}

// Connect opens a connection to the test bed in a pool of its own, closed when the test ends.
func (e *Env) Connect(t testing.TB, opts ...host.Option) *host.Conn {
	t.Helper()
	p := host.NewConnections(opts...)
	t.Cleanup(func() { _ = p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := p.Get(ctx, e.HostConfig(t))
	if err != nil {
		t.Fatalf("connecting to the test bed: %v", err)
	}
	return c
}
