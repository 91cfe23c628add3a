package domainevents

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"

	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

func virsh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// within runs act, then waits up to d for a request for want; requests queued before act
// do not count.
func within(t *testing.T, w *Watcher, want string, d time.Duration, what string, act func()) time.Duration {
	t.Helper()
	drainAll(w)
	act()
	t0 := time.Now()
	deadline := time.After(d)
	for {
		select {
		case ev := <-w.ch:
			if got := ev.Object.GetNamespace() + "/" + ev.Object.GetName(); got == want {
				t.Logf("%s: request for %s after %.2fs", what, want, time.Since(t0).Seconds())
				return time.Since(t0)
			}
		case <-deadline:
			t.Fatalf("%s: no request for %s within %s", what, want, d)
		}
	}
}

// never runs act, then checks for d that no request for want comes; requests queued before
// act do not count.
func never(t *testing.T, w *Watcher, want string, d time.Duration, what string, act func()) {
	t.Helper()
	drainAll(w)
	act()
	deadline := time.After(d)
	for {
		select {
		case ev := <-w.ch:
			if got := ev.Object.GetNamespace() + "/" + ev.Object.GetName(); got == want {
				t.Fatalf("%s: a request for %s, want none", what, want)
			}
		case <-deadline:
			t.Logf("%s: no request for %s in %s, as wanted", what, want, d)
			return
		}
	}
}

// TestEventsOnRealHost: a domain started, destroyed or undefined out of band on the real
// test bed becomes a request for its KVMDomain within two seconds, through the same shared
// connection the controllers use, and again after libvirtd restarts (the watcher requeues
// what it knew, a reconcile reopens the connection, the subscription comes back with it).
func TestEventsOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	rec := &defsRecorder{}
	w := New(logging.NewNopLogger(), WithDefinitions(rec))
	conns := host.NewConnections(host.WithOnLibvirt(w.Attach))
	t.Cleanup(func() { _ = conns.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := conns.Get(ctx, tb.HostConfig(t)); err != nil {
		t.Fatal(err)
	}

	const dom, want = "evtest_vm", "evtest/vm"
	// The KVMDomain's reconcile binds it to its host: only that host's events requeue it.
	w.Bind(types.NamespacedName{Namespace: "evtest", Name: "vm"}, tb.HostConfig(t).Address())
	x := filepath.Join(t.TempDir(), "dom.xml")
	// No disk: SeaBIOS runs and finds nothing to boot, which is all a lifecycle needs.
	if err := os.WriteFile(x, []byte("<domain type='qemu'><name>"+dom+"</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>"+
		"<os><type arch='x86_64' machine='pc'>hvm</type></os></domain>"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("virsh", "-c", "qemu:///system", "destroy", dom).Run()
		_ = exec.Command("virsh", "-c", "qemu:///system", "undefine", dom).Run()
	})
	time.Sleep(time.Second) // the subscription is made in the background
	within(t, w, want, 2*time.Second, "defined", func() { virsh(t, "define", x) })
	within(t, w, want, 2*time.Second, "started", func() { virsh(t, "start", dom) })
	within(t, w, want, 2*time.Second, "destroyed", func() { virsh(t, "destroy", dom) })

	// Bound to another host (its config names another address), the KVMDomain is not requeued
	// by this host's events of a domain of its name: a team's own host cannot requeue others.
	nn := types.NamespacedName{Namespace: "evtest", Name: "vm"}
	w.Bind(nn, "root@another-host:22")
	never(t, w, want, 3*time.Second, "started, bound to another host", func() { virsh(t, "start", dom) })
	w.Bind(nn, tb.HostConfig(t).Address())
	within(t, w, want, 2*time.Second, "destroyed, bound to this host again", func() { virsh(t, "destroy", dom) })
	// Unbound (its deletion finished), it is not requeued either.
	w.Unbind(nn)
	never(t, w, want, 3*time.Second, "started, unbound", func() { virsh(t, "start", dom) })
	w.Bind(nn, tb.HostConfig(t).Address())
	within(t, w, want, 2*time.Second, "destroyed, bound again", func() { virsh(t, "destroy", dom) })

	// libvirtd restarts: the connection ends, and the watcher asks for everything it knew.
	within(t, w, want, 10*time.Second, "connection lost", func() { tb.Control(t, "restart-libvirtd") })
	// A reconcile reopens the connection, and with it the subscription.
	var err error
	for i := 0; i < 100; i++ {
		var c *host.Conn
		if c, err = conns.Get(ctx, tb.HostConfig(t)); err == nil {
			if err = c.Do(ctx, func(l *golibvirt.Libvirt) error { _, err := l.ConnectGetLibVersion(); return err }); err == nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no libvirt connection after the restart: %v", err)
	}
	time.Sleep(time.Second)
	within(t, w, want, 2*time.Second, "started after the libvirtd restart", func() { virsh(t, "start", dom) })
	within(t, w, want, 2*time.Second, "destroyed after the libvirtd restart", func() { virsh(t, "destroy", dom) })
	within(t, w, want, 2*time.Second, "undefined", func() { virsh(t, "undefine", dom) })

	// What the remembered definitions were told: a subscription, every event of the domain,
	// its loss at the restart, and the subscription again.
	addr := tb.HostConfig(t).Address()
	got := rec.seen()
	for _, want := range []string{"watched " + addr, "changed " + addr + " " + dom, "lost " + addr} {
		if !slices.Contains(got, want) {
			t.Errorf("the definitions were never told %q; told: %v", want, got)
		}
	}
	if n := count(got, "watched "+addr); n != 2 {
		t.Errorf("the definitions were told of %d subscriptions, want 2 (before and after the restart): %v", n, got)
	}
}

// defsRecorder is a Definitions that records what it is told.
type defsRecorder struct {
	mu  sync.Mutex
	log []string
}

func (r *defsRecorder) add(s string)              { r.mu.Lock(); defer r.mu.Unlock(); r.log = append(r.log, s) }
func (r *defsRecorder) EventsWatched(a string)    { r.add("watched " + a) }
func (r *defsRecorder) EventsLost(a string)       { r.add("lost " + a) }
func (r *defsRecorder) DomainChanged(a, d string) { r.add("changed " + a + " " + d) }
func (r *defsRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

func drainAll(w *Watcher) {
	for {
		select {
		case <-w.ch:
		default:
			return
		}
	}
}
