package libvirt

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/host"
	testbedenv "github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// testbed is the real libvirt host of cluster/testbed/up.sh.
type testbed struct {
	pool string
	ctl  string
	conn *host.Conn
}

// requireTestbed connects to the test bed (see test/support/testbed): skipped loudly without it,
// failed instead when CI is set.
func requireTestbed(t testing.TB) *testbed {
	t.Helper()
	env := testbedenv.Require(t)
	conn := env.Connect(t, host.WithDialTimeout(10*time.Second), host.WithKeepAlive(2*time.Second))
	return &testbed{pool: env.Pool, ctl: env.Ctl, conn: conn}
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
