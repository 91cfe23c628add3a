package libvirt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/host"
)

// testbed is the real libvirt host of cluster/testbed/up.sh.
type testbed struct {
	pool string
	ctl  string
	conn *host.Conn
	hp   *host.Pool
}

// requireTestbed connects to the test bed named by the TESTBED_* variables.
// Without them, or outside the test bed's network namespace, the test is
// skipped with a loud reason; it fails instead when CI is set.
func requireTestbed(t testing.TB) *testbed {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		msg := "INTEGRATION TEST NOT RUN: " + why +
			"; start the test bed with cluster/testbed/up.sh and run: cluster/testbed/run-in-netns.sh go test ./internal/libvirt/..."
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, v := range []string{"TESTBED_NETNS", "TESTBED_CTL", "TESTBED_SSH_HOST", "TESTBED_SSH_PORT", "TESTBED_SSH_KEY", "TESTBED_SSH_KNOWN_HOSTS", "TESTBED_LIBVIRT_SOCKET", "TESTBED_POOL"} {
		if os.Getenv(v) == "" {
			missing("environment variable " + v + " is not set")
		}
	}
	var self, ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	netns := os.Getenv("TESTBED_NETNS")
	if err := syscall.Stat("/run/netns/"+netns, &ns); err != nil {
		missing("network namespace " + netns + " does not exist (" + err.Error() + ")")
	}
	if self.Ino != ns.Ino || self.Dev != ns.Dev {
		missing("this test process is not inside network namespace " + netns)
	}
	port, err := strconv.Atoi(os.Getenv("TESTBED_SSH_PORT"))
	if err != nil {
		t.Fatalf("TESTBED_SSH_PORT: %v", err)
	}
	read := func(v string) []byte {
		b, err := os.ReadFile(os.Getenv(v))
		if err != nil {
			t.Fatalf("reading %s: %v", v, err)
		}
		return b
	}
	hp := host.NewPool(host.WithDialTimeout(10*time.Second), host.WithKeepAlive(2*time.Second))
	t.Cleanup(func() { _ = hp.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := hp.Get(ctx, host.Config{
		Host: os.Getenv("TESTBED_SSH_HOST"), Port: port, User: os.Getenv("TESTBED_SSH_USER"),
		PrivateKey: read("TESTBED_SSH_KEY"), KnownHosts: read("TESTBED_SSH_KNOWN_HOSTS"),
		Socket: os.Getenv("TESTBED_LIBVIRT_SOCKET"),
	})
	if err != nil {
		t.Fatalf("connecting to the test bed: %v", err)
	}
	return &testbed{pool: os.Getenv("TESTBED_POOL"), ctl: os.Getenv("TESTBED_CTL"), conn: conn, hp: hp}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName returns a volume name no other test run uses.
func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "pkvm-test-" + strings.TrimSuffix(prefix, "-") + "-" + hex.EncodeToString(b)
}

// client returns a Client on the test bed's connection.
func (tb *testbed) client() *Client {
	return New(tb.conn, WithSocket(os.Getenv("TESTBED_LIBVIRT_SOCKET")))
}
