package imagecache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	env  *testbedenv.Env
	cfg  host.Config
	conn *host.Conn
}

// requireTestbed connects to the test bed (see test/support/testbed): skipped loudly without it,
// failed instead when CI is set.
func requireTestbed(t testing.TB) *testbed {
	t.Helper()
	env := testbedenv.Require(t)
	tb := &testbed{pool: env.Pool, ctl: env.Ctl, env: env, cfg: env.HostConfig(t)}
	tb.conn = tb.connect(t)
	return tb
}

// connect opens a connection from a new connection pool, as a restarted provider would.
func (tb *testbed) connect(t testing.TB) *host.Conn {
	t.Helper()
	return tb.env.Connect(t, host.WithDialTimeout(10*time.Second), host.WithKeepAlive(2*time.Second))
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName returns a name no other test run uses.
func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "pkvm-test-" + strings.TrimSuffix(prefix, "-") + "-" + hex.EncodeToString(b)
}
