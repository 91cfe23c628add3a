package hoststatus

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// field is the number after "name:" in virsh's output (e.g. "CPU(s):  2"), its unit dropped.
func field(t *testing.T, out, name string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `:\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in virsh output:\n%s", name, out)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func near(t *testing.T, what string, got, want, tolerance int64) {
	t.Helper()
	if d := got - want; d > tolerance || d < -tolerance {
		t.Errorf("%s: status says %d, virsh %d (tolerance %d)", what, got, want, tolerance)
	} else {
		t.Logf("%s: status %d, virsh %d", what, got, want)
	}
}

// calls is provider_kvm_libvirt_calls_total of kind, all ops.
func calls(t *testing.T, kind string) float64 {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != metrics.CallsName {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "kind") == kind {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// ownedDomains counts the test bed's domains whose metadata is our ownership record, as virsh
// reads it, and their vCPUs.
func ownedDomains(t *testing.T) (n, vcpus int64) {
	t.Helper()
	for _, d := range strings.Fields(virsh(t, "list", "--all", "--name")) {
		md, err := exec.Command("virsh", "-q", "-c", "qemu:///system", "metadata", d, "--uri", domainxml.Namespace).CombinedOutput()
		if err != nil || !strings.Contains(string(md), "<managedBy>"+domainxml.ManagedBy+"</managedBy>") {
			continue
		}
		n++
		vcpus += field(t, virsh(t, "dominfo", d), "CPU(s)")
	}
	return n, vcpus
}

// TestHostStatusOnRealHost runs the host status controller against a real API server and the
// test bed: the figures match virsh's, a domain of ours is counted, a wrong pinned host key
// makes that config unready with both fingerprints while the right one stays Ready, and a
// steady-state read costs a handful of RPCs.
func TestHostStatusOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "bed")
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	lvs := lv.NewShared()
	env.Run(t, 2*time.Second, config.Setup, func(m ctrl.Manager, o controller.Options) error {
		return Setup(m, o, conns, nil, lvs, imagecache.NewShared(imagecache.InCluster(env.ClusterID)), env.ClusterID)
	})
	ctx := context.Background()

	get := func(name string) *v1alpha1.ClusterProviderConfig {
		c := &v1alpha1.ClusterProviderConfig{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: name}, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ready := func(name string) func() error {
		return func() error {
			c := get(name)
			if r := c.Status.GetCondition(xpv2.TypeReady); r.Status != corev1.ConditionTrue || c.Status.Host == nil {
				return fmt.Errorf("not Ready: %s %s", r.Reason, r.Message)
			}
			return nil
		}
	}
	controlplane.Eventually(t, time.Minute, "ClusterProviderConfig bed Ready", ready("bed"))

	t.Run("FiguresMatchVirsh", func(t *testing.T) {
		s := get("bed").Status.Host
		node := virsh(t, "nodeinfo")
		near(t, "CPUs", int64(s.CPUs), field(t, node, "CPU(s)"), 0)
		near(t, "memory total KiB", s.MemoryTotal.Value()/1024, field(t, node, "Memory size"), 0)
		// virsh -q freecell --all prints each NUMA cell, without the total line.
		var freeKiB int64
		for _, m := range regexp.MustCompile(`(?m)^\s*\d+:\s+(\d+) KiB`).FindAllStringSubmatch(virsh(t, "freecell", "--all"), -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			freeKiB += n
		}
		// Free memory moves with whatever else runs on the machine (builds beside the test):
		// within a tenth of the total, or a GiB.
		near(t, "memory free KiB", s.MemoryFree.Value()/1024, freeKiB, max(1<<20, field(t, node, "Memory size")/10))
		ver := virsh(t, "version")
		if !strings.Contains(ver, "libvirt "+s.LibvirtVersion) || !strings.Contains(ver, "Running hypervisor: QEMU "+s.QEMUVersion) {
			t.Errorf("versions libvirt %q, QEMU %q; virsh version says:\n%s", s.LibvirtVersion, s.QEMUVersion, ver)
		}
		var p *v1alpha1.HostPool
		for i := range s.Pools {
			if s.Pools[i].Name == tb.Pool {
				p = &s.Pools[i]
			}
		}
		if p == nil || !p.Active {
			t.Fatalf("pool %s missing or inactive in status: %+v", tb.Pool, s.Pools)
		}
		pi := virsh(t, "pool-info", "--bytes", tb.Pool)
		near(t, "pool capacity", p.Capacity.Value(), field(t, pi, "Capacity"), 0)
		// The pool's file system is the machine's: builds beside the test move it.
		near(t, "pool allocation", p.Allocation.Value(), field(t, pi, "Allocation"), 1<<30)
		near(t, "pool available", p.Available.Value(), field(t, pi, "Available"), 1<<30)
	})

	t.Run("OurDomainsCounted", func(t *testing.T) {
		name := fmt.Sprintf("hoststatus-it_d%d", time.Now().UnixNano()%100000)
		x, err := domainxml.Domain(domainxml.Spec{Name: name, Type: "qemu", VCPU: 3, MemoryMiB: 256, Firmware: "bios",
			RootDisk: domainxml.Volume{Pool: tb.Pool, Name: "hoststatus-it-missing.qcow2"}, Network: tb.Net, MAC: domainxml.MAC(name),
			Owner: domainxml.Owner{UID: "hoststatus-it-uid", Namespace: "hoststatus-it", Name: "d"}})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "d.xml")
		if err := os.WriteFile(f, []byte(x), 0o600); err != nil {
			t.Fatal(err)
		}
		virsh(t, "define", f)
		t.Cleanup(func() { _ = exec.Command("virsh", "-c", "qemu:///system", "undefine", "--nvram", name).Run() })
		wantN, wantCPU := ownedDomains(t)
		controlplane.Eventually(t, 30*time.Second, "the new domain counted", func() error {
			m := get("bed").Status.Host.Managed
			if int64(m.Domains) != wantN || int64(m.VCPUs) != wantCPU {
				return fmt.Errorf("status: %d domains, %d vCPUs; virsh: %d domains of ours, %d vCPUs", m.Domains, m.VCPUs, wantN, wantCPU)
			}
			return nil
		})
		t.Logf("domains of ours: %d, vCPUs %d", wantN, wantCPU)
	})

	// The host gauges come from the same read as status.host: they must agree with virsh too.
	t.Run("GaugesMatchVirsh", func(t *testing.T) {
		cfg := "ClusterProviderConfig/bed"
		gauge := func(name string, want map[string]string) (float64, int) {
			mfs, err := ctrlmetrics.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var sum float64
			var n int
			for _, mf := range mfs {
				if mf.GetName() != name {
					continue
				}
			metric:
				for _, m := range mf.GetMetric() {
					for k, v := range want {
						if label(m, k) != v {
							continue metric
						}
					}
					sum += m.GetGauge().GetValue()
					n++
				}
			}
			return sum, n
		}
		count := func(args ...string) int64 {
			return int64(len(strings.Fields(virsh(t, append([]string{"list", "--name"}, args...)...))))
		}
		controlplane.Eventually(t, 30*time.Second, "the domain gauges match virsh", func() error {
			all, _ := gauge(metrics.DomainsName, map[string]string{"config": cfg})
			running, _ := gauge(metrics.DomainsName, map[string]string{"config": cfg, "state": lv.StateRunning})
			if int64(all) != count("--all") || int64(running) != count("--state-running") {
				return fmt.Errorf("gauges: %v domains, %v running; virsh: %d, %d", all, running, count("--all"), count("--state-running"))
			}
			t.Logf("gauges: %v domains, %v running; virsh: %d, %d", all, running, count("--all"), count("--state-running"))
			return nil
		})
		node := virsh(t, "nodeinfo")
		total, _ := gauge(metrics.MemoryName, map[string]string{"config": cfg, "figure": "total"})
		near(t, "gauge memory total KiB", int64(total)/1024, field(t, node, "Memory size"), 0)
		pi := virsh(t, "pool-info", "--bytes", tb.Pool)
		capacity, n := gauge(metrics.PoolBytesName, map[string]string{"config": cfg, "pool": tb.Pool, "figure": "capacity"})
		if n != 1 {
			t.Fatalf("%d capacity series for pool %s, want 1", n, tb.Pool)
		}
		near(t, "gauge pool capacity", int64(capacity), field(t, pi, "Capacity"), 0)
		avail, _ := gauge(metrics.PoolBytesName, map[string]string{"config": cfg, "pool": tb.Pool, "figure": "available"})
		near(t, "gauge pool available", int64(avail), field(t, pi, "Available"), 1<<30)
	})

	t.Run("WrongHostKey", func(t *testing.T) {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ssh.NewPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("[%s]:%d %s", tb.SSHHost, tb.SSHPort, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: "wrongkey-ssh"},
			Data: map[string][]byte{"ssh-privatekey": tb.Read(t, tb.KeyFile), "known_hosts": []byte(line + "\n")}}
		if err := env.Client.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		c := get("bed").DeepCopy()
		c.ObjectMeta = metav1.ObjectMeta{Name: "wrongkey"}
		c.Status = v1alpha1.ProviderConfigStatus{}
		c.Spec.Credentials.SecretRef.Name, c.Spec.KnownHosts.SecretRef.Name = "wrongkey-ssh", "wrongkey-ssh"
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		want := ssh.FingerprintSHA256(k)
		controlplane.Eventually(t, time.Minute, "wrongkey HostKeyMismatch", func() error {
			r := get("wrongkey").Status.GetCondition(xpv2.TypeReady)
			if r.Status != corev1.ConditionFalse || r.Reason != ReasonHostKeyMismatch {
				return fmt.Errorf("Ready %s %s: %s", r.Status, r.Reason, r.Message)
			}
			if strings.Count(r.Message, "SHA256:") < 2 || !strings.Contains(r.Message, want) {
				return fmt.Errorf("message does not name both fingerprints (pinned %s): %s", want, r.Message)
			}
			t.Logf("wrongkey: %s: %s", r.Reason, r.Message)
			return nil
		})
		if err := ready("bed")(); err != nil {
			t.Errorf("the right config is no longer Ready: %v", err)
		}
		if strings.Contains(fmt.Sprint(get("wrongkey").Status), string(tb.Read(t, tb.KeyFile))) {
			t.Error("the private key reached the status")
		}
	})

	t.Run("LibvirtdStopped", func(t *testing.T) {
		// libvirtd stopped (sshd still answers): the config is unready within a minute, with
		// the reason; started again: Ready within a minute.
		tb.Control(t, "stop-libvirtd")
		t.Cleanup(func() { tb.Control(t, "start-libvirtd") })
		t0 := time.Now()
		controlplane.Eventually(t, time.Minute, "bed unready with libvirtd stopped", func() error {
			r := get("bed").Status.GetCondition(xpv2.TypeReady)
			if r.Status != corev1.ConditionFalse {
				return fmt.Errorf("Ready %s %s", r.Status, r.Reason)
			}
			t.Logf("libvirtd stopped -> %s %s after %.1fs: %s", r.Status, r.Reason, time.Since(t0).Seconds(), r.Message)
			return nil
		})
		tb.Control(t, "start-libvirtd")
		t0 = time.Now()
		controlplane.Eventually(t, time.Minute, "bed Ready again with libvirtd started", ready("bed"))
		t.Logf("libvirtd started -> Ready after %.1fs", time.Since(t0).Seconds())
	})

	t.Run("CallsPerRead", func(t *testing.T) {
		const kind = "HostStatusIT"
		conn := tb.Connect(t)
		h := lv.New(conn, lv.NewShared(), lv.WithSocket(tb.LibvirtSocket), lv.WithKind(kind))
		m := NewMemo(time.Now, DefaultRecheck)
		pools := []string{tb.Pool}
		before := calls(t, kind)
		if _, err := m.Read(ctx, h, conn.Address(), pools); err != nil {
			t.Fatal(err)
		}
		first := calls(t, kind) - before
		before = calls(t, kind)
		if _, err := m.Read(ctx, h, conn.Address(), pools); err != nil {
			t.Fatal(err)
		}
		steady := calls(t, kind) - before
		t.Logf("libvirt RPCs per status read, one pool: first read %v, steady state %v", first, steady)
		if steady > 5 {
			t.Errorf("a steady-state read made %v RPCs, want at most 5", steady)
		}
	})
}

// TestHostStatusConnectionSignal: with a poll far longer than the test, a Ready host whose
// libvirtd stops is unready within seconds, because the pooled connection's end is told to
// the controller (host.WithOnState -> Signals); started again, it is Ready at the unready
// poll.
func TestHostStatusConnectionSignal(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "bed")
	signals := NewSignals()
	conns := host.NewConnections(host.WithOnState(signals.Notify))
	t.Cleanup(func() { _ = conns.Close() })
	const poll = 10 * time.Minute
	env.Run(t, poll, config.Setup, func(m ctrl.Manager, o controller.Options) error {
		return Setup(m, o, conns, signals, lv.NewShared(), imagecache.NewShared(imagecache.InCluster(env.ClusterID)), env.ClusterID)
	})
	ctx := context.Background()
	ready := func() (corev1.ConditionStatus, string) {
		c := &v1alpha1.ClusterProviderConfig{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: "bed"}, c); err != nil {
			t.Fatal(err)
		}
		r := c.Status.GetCondition(xpv2.TypeReady)
		return r.Status, string(r.Reason) + ": " + r.Message
	}
	controlplane.Eventually(t, time.Minute, "bed Ready", func() error {
		if s, why := ready(); s != corev1.ConditionTrue {
			return fmt.Errorf("Ready %s %s", s, why)
		}
		return nil
	})

	t0 := time.Now()
	tb.Control(t, "stop-libvirtd")
	t.Cleanup(func() { tb.Control(t, "start-libvirtd") })
	controlplane.Eventually(t, time.Minute, "bed unready with libvirtd stopped", func() error {
		if s, why := ready(); s != corev1.ConditionFalse {
			return fmt.Errorf("Ready %s %s", s, why)
		}
		return nil
	})
	took := time.Since(t0)
	_, why := ready()
	t.Logf("libvirtd stopped -> unready %.1fs after the stop began (poll %s): %s", took.Seconds(), poll, why)
	if took >= poll {
		t.Errorf("unready after %s: no faster than the poll (%s)", took, poll)
	}

	tb.Control(t, "start-libvirtd")
	t0 = time.Now()
	controlplane.Eventually(t, time.Minute, "bed Ready again with libvirtd started", func() error {
		if s, why := ready(); s != corev1.ConditionTrue {
			return fmt.Errorf("Ready %s %s", s, why)
		}
		return nil
	})
	t.Logf("libvirtd started -> Ready after %.1fs (the unready poll is %s)", time.Since(t0).Seconds(), DefaultUnreadyPoll)
}
