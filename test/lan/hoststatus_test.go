//go:build lan

package lan

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/hoststatus"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
)

// statusPoll is the host status controllers' poll here: far longer than the test, so a host
// read again within it was woken by its connection (host.WithOnState -> hoststatus.Signals),
// not by the poll.
const statusPoll = 10 * time.Minute

// field is the number after "name:" in virsh's output (e.g. "CPU(s):  2").
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

// virsh runs virsh on h once per command line, in one SSH session (in h's namespaces: its own
// libvirtd), and returns each command's output.
func (b *bed) virsh(t *testing.T, h lanHost, commands ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sep = "--virsh-output-end--"
	var script []string
	for _, c := range commands {
		script = append(script, "virsh -q -c qemu:///system "+c+" && echo "+sep)
	}
	out, err := b.ssh(ctx, h, nil, strings.Join(script, " && "))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(out, sep+"\n")
	if len(parts) != len(commands)+1 {
		t.Fatalf("virsh on %s: %d outputs for %d commands:\n%s", h.name, len(parts)-1, len(commands), out)
	}
	return parts[:len(commands)]
}

// ctl runs cluster/lan/ctl.sh (stop-libvirtd, start-libvirtd on one host).
func ctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(controlplane.RepoRoot(), "cluster", "lan", "ctl.sh"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster/lan/ctl.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// pinnedFingerprint is the SHA256 fingerprint known_hosts pins for ip (port 22).
func pinnedFingerprint(t *testing.T, knownHosts []byte, ip string) string {
	t.Helper()
	rest := knownHosts
	for len(rest) > 0 {
		_, hosts, key, _, r, err := ssh.ParseKnownHosts(rest)
		if err != nil {
			break
		}
		rest = r
		for _, h := range hosts {
			if h == ip || h == net.JoinHostPort(ip, "22") {
				return ssh.FingerprintSHA256(key)
			}
		}
	}
	t.Fatalf("known_hosts pins no key for %s", ip)
	return ""
}

// TestHostStatusOnTheLAN runs the host status controllers (on a real API server in netns node)
// against host-a and host-b across the LAN, one ClusterProviderConfig each: each host's figures
// match what virsh says on that host; a wrong pinned host key on host-a's config makes host-a
// unready with both fingerprints while host-b stays Ready; host-b's libvirtd stopped makes
// host-b unready within a minute (within seconds: its connection's end wakes its controller,
// whose poll is statusPoll) while host-a stays Ready, and Ready again once it is started.
func TestHostStatusOnTheLAN(t *testing.T) {
	b := requireLAN(t)
	start := time.Now()
	env := controlplane.Start(t)
	env.Namespace(t, "crossplane-system")
	ctx := context.Background()
	hostA, hostB := b.hosts[0], b.hosts[1]

	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string][]byte{
		"lan-ssh":      b.knownHosts,
		"lan-wrongkey": []byte(hostA.ip + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(wrong))) + "\n"),
	}
	for name, kh := range secrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: name},
			Data: map[string][]byte{"ssh-privatekey": b.key, "known_hosts": kh}}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	sel := func(secret, key string) v1alpha1.SecretKeySelector {
		return v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: secret, Key: key}
	}
	for _, h := range b.hosts {
		c := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: h.name}, Spec: v1alpha1.ProviderConfigSpec{
			Transport: v1alpha1.TransportSSH, Host: h.ip, Port: 22, User: b.user,
			Credentials: &v1alpha1.SSHCredentials{SecretRef: sel("lan-ssh", "ssh-privatekey")},
			KnownHosts:  &v1alpha1.KnownHosts{SecretRef: sel("lan-ssh", "known_hosts")},
			URI:         "qemu:///system",
			Defaults:    v1alpha1.HostDefaults{Pool: h.pool},
		}}
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	signals := hoststatus.NewSignals()
	conns := host.NewConnections(host.WithOnState(signals.Notify))
	t.Cleanup(func() { _ = conns.Close() })
	env.Run(t, statusPoll, config.Setup, func(m ctrl.Manager, o controller.Options) error {
		return hoststatus.Setup(m, o, conns, signals, lv.NewShared(), imagecache.NewShared(imagecache.InCluster(env.ClusterID)), env.ClusterID)
	})

	get := func(h lanHost) *v1alpha1.ClusterProviderConfig {
		c := &v1alpha1.ClusterProviderConfig{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: h.name}, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ready := func(h lanHost) error {
		c := get(h)
		if r := c.Status.GetCondition(xpv2.TypeReady); r.Status != corev1.ConditionTrue || c.Status.Host == nil {
			return fmt.Errorf("%s not Ready: %s %s", h.name, r.Reason, r.Message)
		}
		return nil
	}
	bothReady := func() error {
		for _, h := range b.hosts {
			if err := ready(h); err != nil {
				return err
			}
		}
		return nil
	}
	controlplane.Eventually(t, time.Minute, "both hosts Ready", bothReady)
	t.Logf("control plane up, both hosts Ready after %.1fs", time.Since(start).Seconds())

	t.Run("FiguresMatchVirsh", func(t *testing.T) {
		for _, h := range b.hosts {
			t.Run(h.name, func(t *testing.T) {
				s := get(h).Status.Host
				if s.Address != b.user+"@"+net.JoinHostPort(h.ip, "22") {
					t.Errorf("status address %q, want %s's", s.Address, h.name)
				}
				v := b.virsh(t, h, "nodeinfo", "freecell --all", "pool-info --bytes "+h.pool)
				node, freecell, pi := v[0], v[1], v[2]
				near(t, "CPUs", int64(s.CPUs), field(t, node, "CPU(s)"), 0)
				near(t, "memory total KiB", s.MemoryTotal.Value()/1024, field(t, node, "Memory size"), 0)
				var freeKiB int64
				for _, m := range regexp.MustCompile(`(?m)^\s*\d+:\s+(\d+) KiB`).FindAllStringSubmatch(freecell, -1) {
					n, _ := strconv.ParseInt(m[1], 10, 64)
					freeKiB += n
				}
				// The hosts share the machine's memory with whatever runs beside the test: within a
				// tenth of the total, or a GiB.
				near(t, "memory free KiB", s.MemoryFree.Value()/1024, freeKiB, max(1<<20, field(t, node, "Memory size")/10))
				var p *v1alpha1.HostPool
				for i := range s.Pools {
					if s.Pools[i].Name == h.pool {
						p = &s.Pools[i]
					}
				}
				if p == nil || !p.Active {
					t.Fatalf("pool %s missing or inactive in %s's status: %+v", h.pool, h.name, s.Pools)
				}
				near(t, "pool capacity", p.Capacity.Value(), field(t, pi, "Capacity"), 0)
				// The pool's directory is on the machine's file system: builds beside the test move it.
				near(t, "pool allocation", p.Allocation.Value(), field(t, pi, "Allocation"), 1<<30)
				near(t, "pool available", p.Available.Value(), field(t, pi, "Available"), 1<<30)
			})
		}
	})

	t.Run("WrongHostKey", func(t *testing.T) {
		t0 := time.Now()
		set := func(secret string) {
			c := get(hostA)
			c.Spec.KnownHosts.SecretRef.Name = secret
			if err := env.Client.Update(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		set("lan-wrongkey")
		t.Cleanup(func() {
			set("lan-ssh")
			controlplane.Eventually(t, time.Minute, hostA.name+" Ready again with its key", func() error { return ready(hostA) })
		})
		pinned, real := ssh.FingerprintSHA256(wrong), pinnedFingerprint(t, b.knownHosts, hostA.ip)
		controlplane.Eventually(t, time.Minute, hostA.name+" HostKeyMismatch", func() error {
			r := get(hostA).Status.GetCondition(xpv2.TypeReady)
			if r.Status != corev1.ConditionFalse || r.Reason != hoststatus.ReasonHostKeyMismatch {
				return fmt.Errorf("Ready %s %s: %s", r.Status, r.Reason, r.Message)
			}
			if !strings.Contains(r.Message, pinned) || !strings.Contains(r.Message, real) {
				return fmt.Errorf("message does not name both fingerprints (pinned %s, presented %s): %s", pinned, real, r.Message)
			}
			t.Logf("%s after %.1fs: %s: %s", hostA.name, time.Since(t0).Seconds(), r.Reason, r.Message)
			return nil
		})
		if err := ready(hostB); err != nil {
			t.Errorf("the other host: %v", err)
		}
		if strings.Contains(fmt.Sprint(get(hostA).Status), string(b.key)) {
			t.Error("the private key reached the status")
		}
	})

	t.Run("LibvirtdStopped", func(t *testing.T) {
		if err := bothReady(); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		ctl(t, hostB.name, "stop-libvirtd")
		t.Cleanup(func() { ctl(t, hostB.name, "start-libvirtd") })
		controlplane.Eventually(t, time.Minute, hostB.name+" unready with its libvirtd stopped", func() error {
			r := get(hostB).Status.GetCondition(xpv2.TypeReady)
			if r.Status != corev1.ConditionFalse {
				return fmt.Errorf("Ready %s %s", r.Status, r.Reason)
			}
			t.Logf("%s's libvirtd stopped -> unready %.1fs after the stop began (poll %s): %s: %s", hostB.name, time.Since(t0).Seconds(), statusPoll, r.Reason, r.Message)
			return nil
		})
		if err := ready(hostA); err != nil {
			t.Errorf("the other host: %v", err)
		}
		ctl(t, hostB.name, "start-libvirtd")
		t0 = time.Now()
		controlplane.Eventually(t, time.Minute, hostB.name+" Ready again with its libvirtd started", func() error { return ready(hostB) })
		t.Logf("%s's libvirtd started -> Ready after %.1fs", hostB.name, time.Since(t0).Seconds())
	})
}
