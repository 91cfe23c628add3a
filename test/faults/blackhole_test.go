package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// Bounds of the blackhole case. A blackholed host's resources show that the host is
// unreachable within hostDownBound of the blackhole (a poll, a call that times out, a dial
// that times out); they are Ready again within backBound of its end (the breaker's longest
// backoff is a minute, then a poll); new resources on the working host are Ready within
// newBound while the other host is blackholed.
const (
	hostDownBound = 90 * time.Second
	backBound     = 2*time.Minute + pollInterval
	newBound      = time.Minute
)

// blackholeFor is how long the host stays blackholed: two minutes in the full suite, in the
// fast subset just long enough to see the host reported down.
func blackholeFor() time.Duration {
	if full() || os.Getenv("FAULTS_BLACKHOLE_FULL") != "" {
		return 2 * time.Minute
	}
	return hostDownBound
}

// proxy forwards TCP connections from a loopback port to the test bed's sshd: a second
// "host" whose traffic the test can drop without touching the first.
type proxy struct {
	ln   net.Listener
	port int
	mu   sync.Mutex
	open []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c, target)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.open {
			_ = c.Close()
		}
	})
	return p
}

func (p *proxy) forward(c net.Conn, target string) {
	u, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.open = append(p.open, c, u)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
	_, _ = io.Copy(c, u)
	_ = c.Close()
}

// drop makes the proxy's port a blackhole inside the namespace: every packet to or from it
// is dropped (SYNs of new connections and segments of established ones); undo lifts it.
func drop(t *testing.T, port int) (undo func()) {
	t.Helper()
	rules := [][]string{{"--dport", strconv.Itoa(port)}, {"--sport", strconv.Itoa(port)}}
	ipt := func(op string, r []string) error {
		args := append([]string{"-w", op, "INPUT", "-p", "tcp"}, r...)
		args = append(args, "-j", "DROP", "-m", "comment", "--comment", "provider-kvm fault suite")
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, r := range rules {
		if err := ipt("-I", r); err != nil {
			t.Fatalf("blackholing port %d: %v", port, err)
		}
	}
	var once sync.Once
	undo = func() {
		once.Do(func() {
			for _, r := range rules {
				if err := ipt("-D", r); err != nil {
					t.Errorf("lifting the blackhole: %v", err)
				}
			}
		})
	}
	t.Cleanup(undo)
	return undo
}

// hostB creates ClusterProviderConfig name: the test bed reached through the proxy's port,
// its host key pinned for that port.
func (s *suite) hostB(t *testing.T, name string, port int) {
	t.Helper()
	ctx := context.Background()
	from := fmt.Sprintf("[%s]:%d ", s.tb.SSHHost, s.tb.SSHPort)
	kh := string(s.tb.Read(t, s.tb.KnownHostsFile))
	if !strings.Contains(kh, from) {
		t.Fatalf("the test bed's known_hosts has no entry for %s", from)
	}
	kh = strings.ReplaceAll(kh, from, fmt.Sprintf("[%s]:%d ", s.tb.SSHHost, port))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: name + "-ssh"},
		Data: map[string][]byte{"ssh-privatekey": s.tb.Read(t, s.tb.KeyFile), "known_hosts": []byte(kh)}}
	if err := s.kube.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	sel := func(key string) v1alpha1.SecretKeySelector {
		return v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: name + "-ssh", Key: key}
	}
	cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ProviderConfigSpec{
		Transport: v1alpha1.TransportSSH, Host: s.tb.SSHHost, Port: int32(port), User: s.tb.SSHUser,
		Credentials:   &v1alpha1.SSHCredentials{SecretRef: sel("ssh-privatekey")},
		KnownHosts:    &v1alpha1.KnownHosts{SecretRef: sel("known_hosts")},
		LibvirtSocket: s.tb.LibvirtSocket, URI: "qemu:///system",
		Defaults: v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeQEMU, Pool: s.tb.Pool, Network: s.tb.Net},
	}}
	if err := s.kube.Create(ctx, cpc); err != nil {
		t.Fatal(err)
	}
	s.env.AllowImageServer(t, name, s.images.URL)
}

// hostDown is true when mr says it cannot reach its host: the breaker's host.HostDownError
// ("... is unreachable"), or the failed connection attempt that opened it ("cannot connect to
// the libvirt host ...").
func (s *suite) hostDown(mr resource.Managed) bool {
	if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(mr), mr); err != nil {
		return false
	}
	y := mr.GetCondition(xpv2.TypeSynced)
	return y.Status == corev1.ConditionFalse && (strings.Contains(y.Message, "is unreachable") || strings.Contains(y.Message, "cannot connect to the libvirt host"))
}

// blackholeNamespaces: the first host's stack, the one made during the blackhole, the second
// host's stack.
var blackholeNamespaces = []string{nsPrefix + "bh-a", nsPrefix + "bh-a2", nsPrefix + "bh-b"}

// blackhole: two hosts (the test bed directly, and through a proxy), a stack on each; the
// second host's traffic is dropped for blackholeFor. Meanwhile the first host's resources
// stay Ready and a new stack on it becomes Ready; the second's show the host unreachable;
// after the blackhole they are Ready again.
func (s *suite) blackhole(t *testing.T) {
	nsA, nsA2, nsB := blackholeNamespaces[0], blackholeNamespaces[1], blackholeNamespaces[2]
	var recovered time.Duration
	var notes []string
	defer func() {
		s.record(t, recovered, s.leaks(t, []string{nsA, nsA2, nsB}, []string{nsA, nsA2, nsB}), notes...)
	}()
	px := startProxy(t, net.JoinHostPort(s.tb.SSHHost, strconv.Itoa(s.tb.SSHPort)))
	s.hostB(t, "host-b", px.port)
	a := s.set(nsA, "default", nsA, v1alpha1.PowerStateStopped)
	a2 := s.set(nsA2, "default", nsA2, v1alpha1.PowerStateStopped)
	b := s.set(nsB, "host-b", nsB, v1alpha1.PowerStateStopped)
	s.create(t, a)
	s.create(t, b)
	p := s.startProvider(t, "Blackhole", "")
	wait(t, recoverBound, "both hosts' resources Ready", func() error { return s.notReady(append(append([]resource.Managed{}, a...), b...)) })

	undo := drop(t, px.port)
	start := time.Now()
	down := map[string]time.Duration{}
	var a2Ready time.Duration
	var aBroke error
	for time.Since(start) < blackholeFor() {
		time.Sleep(time.Second)
		if err := s.notReady(a); err != nil && aBroke == nil {
			aBroke = err
			t.Errorf("%s into the blackhole of host-b, a resource of the working host left Ready: %v", time.Since(start).Round(time.Second), err)
		}
		if a2Ready == 0 && time.Since(start) > 5*time.Second {
			if len(a2[0].GetUID()) == 0 {
				s.create(t, a2)
			} else if s.notReady(a2) == nil {
				a2Ready = time.Since(start) - 5*time.Second
			}
		}
		for _, mr := range b {
			if _, ok := down[kind(mr)]; !ok && s.hostDown(mr) {
				down[kind(mr)] = time.Since(start)
			}
		}
	}
	switch {
	case a2Ready == 0:
		t.Errorf("a new stack on the working host was not Ready within the %s blackhole of the other: %v", blackholeFor(), s.notReady(a2))
	case a2Ready > newBound:
		t.Errorf("a new stack on the working host took %s to be Ready, more than %s", a2Ready, newBound)
	}
	notes = append(notes, fmt.Sprintf("host-b blackholed %s; new stack on host A Ready in %s", blackholeFor(), a2Ready.Round(time.Second)))
	for _, mr := range b {
		d, ok := down[kind(mr)]
		switch {
		case !ok:
			t.Errorf("%s on the blackholed host never said its host is unreachable in %s", kind(mr), blackholeFor())
			notes = append(notes, kind(mr)+" never HostDown")
		case d > hostDownBound:
			t.Errorf("%s on the blackholed host said its host is unreachable only after %s (bound %s)", kind(mr), d.Round(time.Second), hostDownBound)
			fallthrough
		default:
			notes = append(notes, fmt.Sprintf("%s HostDown after %s", kind(mr), d.Round(time.Second)))
		}
	}
	undo()
	recovered = wait(t, backBound, "the blackholed host's resources Ready again", func() error { return s.notReady(b) })
	all := append(append(append([]resource.Managed{}, a...), a2...), b...)
	stop := s.remove(t, all)
	defer stop()
	wait(t, recoverBound, "every resource gone after its deletion", func() error { return s.notGone(all) })
	p.Stop()
}
