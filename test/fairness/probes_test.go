package fairness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/kvmdomain"
	"github.com/provider-kvm/provider-kvm/internal/domainevents"
	"github.com/provider-kvm/provider-kvm/internal/fairness"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

const (
	// hanging is how many KVMDomains of one namespace have a probe that never answers.
	hanging = 10
	// probeBound is how long another namespace's KVMDomain may take to turn Ready while they
	// hang, more than it takes alone. A hung probe waits its 60 s timeout; when probes ran
	// inside Observe, ten of them held every worker of the controller for that long. Starting
	// ten QEMUs under TCG on a loaded 2-core machine alone cost 12 s on the bed, hence 40 s:
	// well under one hung probe's 60 s.
	probeBound = 40 * time.Second
	// bridgeDev is the test bed's NAT bridge, in the namespace libvirtd runs in.
	bridgeDev = "virbr0"
)

// A guest of the test: its MAC, the address ARP gives for it (a local address of the bed's
// namespace, so that a probe of it reaches this test's listeners) and whether it hangs.
type fakeGuest struct {
	ns, name, mac, ip string
}

// leaseFile is where libvirt keeps the DHCP leases of the test bed's NAT network (its
// leases helper writes it at each lease event; libvirt reads it at each lease query).
const leaseFile = "/var/lib/libvirt/dnsmasq/" + bridgeDev + ".status"

// guestAddresses makes each guest's address answer without a guest: the address goes on the
// loopback device of the bed's namespace, and a lease of it for the guest's MAC is added to
// libvirt's lease file, which libvirt reports as the domain's address (source lease). Both go
// at cleanup; other leases in the file are kept. (libvirt's ARP source would need no file,
// but on the bed it fails: "wrong nlmsg len".)
func guestAddresses(t *testing.T, guests []fakeGuest) {
	t.Helper()
	macs := map[string]bool{}
	for _, g := range guests {
		ip(t, "addr", "add", g.ip+"/32", "dev", "lo")
		t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", g.ip+"/32", "dev", "lo").Run() })
		macs[g.mac] = true
	}
	leases := readLeases(t)
	for _, g := range guests {
		leases = append(leases, map[string]any{"ip-address": g.ip, "mac-address": g.mac, "hostname": g.name, "expiry-time": time.Now().Add(time.Hour).Unix()})
	}
	writeLeases(t, leases)
	t.Cleanup(func() {
		var keep []map[string]any
		for _, l := range readLeases(t) {
			if m, _ := l["mac-address"].(string); !macs[m] {
				keep = append(keep, l)
			}
		}
		writeLeases(t, keep)
	})
}

func readLeases(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(leaseFile)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var leases []map[string]any
	if len(strings.TrimSpace(string(b))) > 0 {
		if err := json.Unmarshal(b, &leases); err != nil {
			t.Fatalf("%s: %v", leaseFile, err)
		}
	}
	return leases
}

func writeLeases(t *testing.T, leases []map[string]any) {
	t.Helper()
	if leases == nil {
		leases = []map[string]any{}
	}
	b, err := json.MarshalIndent(leases, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(leaseFile, append(b, '\n'), 0o644); err != nil { // libvirt's own mode for the file
		t.Fatal(err)
	}
}

// leftovers destroys and undefines the domains whose names start with one of prefixes, and
// deletes the volumes of pool that start with them (best effort).
func leftovers(pool string, prefixes ...string) {
	virshOut := func(args ...string) string {
		out, _ := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).Output()
		return string(out)
	}
	match := func(name string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	for _, d := range strings.Fields(virshOut("list", "--all", "--name")) {
		if match(d) {
			virshOut("destroy", d)
			virshOut("undefine", d)
		}
	}
	for _, line := range strings.Split(virshOut("vol-list", pool), "\n") {
		if f := strings.Fields(line); len(f) > 0 && match(f[0]) {
			virshOut("vol-delete", "--pool", pool, f[0])
		}
	}
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// hangServer accepts connections and never answers; it counts them.
type hangServer struct {
	l        net.Listener
	accepted atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
}

func newHangServer(t *testing.T) *hangServer {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hangServer{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			h.mu.Lock()
			h.conns = append(h.conns, c) // held open, never read from or written to
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			_ = c.Close()
		}
	})
	return h
}

func (h *hangServer) port() int32 { return int32(h.l.Addr().(*net.TCPAddr).Port) }

// TestHangingProbesDoNotDelayAnotherNamespace: ten KVMDomains of one namespace run, have an
// address, and their readiness probe connects to a server that accepts and never answers (an
// HTTP proxy probe with the longest timeout, 60 s); a KVMDomain of another namespace, whose
// probe answers, turns Ready within probeBound of the time it takes alone. No guest boots:
// the domains run an empty disk (the firmware finds nothing to boot) and their addresses come
// from DHCP leases this test adds (guestAddresses).
func TestHangingProbesDoNotDelayAnotherNamespace(t *testing.T) {
	tb := testbed.Require(t)
	t.Cleanup(func() { leftovers(tb.Pool, "hung_", "quiet_") }) // runs last: after a failure, what the provider did not delete
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	env.Workers = workers
	env.RateLimiter = fairness.NewLimiter(rate)
	events := domainevents.New(logging.NewNopLogger())
	conns := host.NewConnections(host.WithOnLibvirt(events.Attach))
	t.Cleanup(func() { _ = conns.Close() })
	shared := env.Shared()
	env.Run(t, time.Minute, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return kvmdomain.Setup(m, o, conns, events, shared) },
	)
	kube, ctx := env.Client, context.Background()

	image, sum := qcow2(t)
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, image) }))
	t.Cleanup(img.Close)
	env.AllowImageServer(t, "default", img.URL)
	hang := newHangServer(t)
	answer, err := net.Listen("tcp", "0.0.0.0:0") // a TCP probe passes once it connects
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = answer.Close() })
	go func() {
		for {
			c, err := answer.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	answerPort := int32(answer.Addr().(*net.TCPAddr).Port)

	var guests []fakeGuest
	for i := range hanging {
		guests = append(guests, fakeGuest{ns: "hung", name: fmt.Sprintf("hung-%02d", i), mac: fmt.Sprintf("52:54:00:fa:00:%02x", i), ip: fmt.Sprintf("192.168.122.%d", 200+i)})
	}
	alone := fakeGuest{ns: "quiet", name: "alone", mac: "52:54:00:fa:01:01", ip: "192.168.122.221"}
	during := fakeGuest{ns: "quiet", name: "during", mac: "52:54:00:fa:01:02", ip: "192.168.122.222"}
	guestAddresses(t, append(append([]fakeGuest{}, guests...), alone, during))

	var all []client.Object
	for _, ns := range []string{"hung", "quiet"} {
		env.Namespace(t, ns)
		bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "empty"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/tiny.qcow2", SHA256: sum}}}}
		readyAfter(t, kube, bi, bi)
		all = append(all, bi)
	}
	domain := func(g fakeGuest, p *v1alpha1.ReadinessProbe) *v1alpha1.KVMDomain {
		return &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: g.name}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{
				VCPU: 1, MemoryMiB: 128, PowerState: v1alpha1.PowerStateRunning, MACAddress: g.mac,
				BaseImageRef: &xpv2.NamespacedReference{Name: "empty"}, ReadinessProbe: p,
			}}}
	}
	answers := &v1alpha1.ReadinessProbe{TimeoutSeconds: 5, TCP: &v1alpha1.TCPProbe{Port: answerPort}}

	a := domain(alone, answers)
	tAlone := readyAfter(t, kube, a, a)
	all = append(all, a)

	for _, g := range guests {
		d := domain(g, &v1alpha1.ReadinessProbe{TimeoutSeconds: 60,
			HTTPProxy: &v1alpha1.HTTPProxyProbe{Port: hang.port(), URL: "http://192.168.122.1/", ExpectedStatus: 204}})
		if err := kube.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		all = append(all, d)
	}
	// Every hung domain runs and has its address, and probes are hanging.
	controlplane.Eventually(t, 3*time.Minute, "hung domains running with an address, probes hanging", func() error {
		for _, o := range all[3:] {
			d := o.(*v1alpha1.KVMDomain)
			if err := kube.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return err
			}
			if d.Status.AtProvider.IPv4 == "" {
				return fmt.Errorf("%s has no address yet: %s", d.GetName(), d.GetCondition(xpv2.TypeReady).Message)
			}
		}
		if hang.accepted.Load() < 2 {
			return fmt.Errorf("%d probes hanging", hang.accepted.Load())
		}
		return nil
	})
	hungAt := hang.accepted.Load()

	d := domain(during, answers)
	tDuring := readyAfter(t, kube, d, d)
	all = append(all, d)
	notReady := 0
	for _, o := range all[3 : 3+hanging] {
		hd := o.(*v1alpha1.KVMDomain)
		if err := kube.Get(ctx, client.ObjectKeyFromObject(hd), hd); err != nil {
			t.Fatal(err)
		}
		if hd.GetCondition(xpv2.TypeReady).Status != "True" {
			notReady++
		}
	}
	t.Logf("FIGURES: quiet KVMDomain Ready in %.1f s alone, %.1f s while %d domains of another namespace hang their probes (%d of them not Ready; %d hanging probe connections when it was created, %d by the end); bound alone + %s",
		tAlone.Seconds(), tDuring.Seconds(), hanging, notReady, hungAt, hang.accepted.Load(), probeBound)
	if notReady != hanging {
		t.Errorf("%d of the %d hung domains are Ready: their probes did not hang", hanging-notReady, hanging)
	}
	if tDuring > tAlone+probeBound {
		t.Errorf("another namespace's KVMDomain took %s to turn Ready while probes hung, more than %s alone + %s", tDuring.Round(100*time.Millisecond), tAlone.Round(100*time.Millisecond), probeBound)
	}
	// Domains before their BaseImages.
	deleted(t, kube, all[2:]...)
	deleted(t, kube, all[:2]...)
}
