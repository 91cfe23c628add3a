package scale

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/providerproc"
)

// namespaces is how many namespaces the resources spread over, as teams would.
const namespaces = 10

// imageSize is the shared BaseImage's size: tiny, since no guest boots.
const imageSize = 64 << 10

// settings are a run's: the steps (KVMDomains in all, each with its SeedVolume), the
// provider's --poll ("" for its default), and how long each steady state is measured.
type settings struct {
	steps   []int
	poll    string
	window  time.Duration
	full    bool // make bench-scale: every figure printed, the libvirtd restart, no assertions on size
	lan     bool // SCALE_HOSTS=lan: the LAN bed's two hosts instead of the test bed's one
	outFile string
}

// fromEnv reads SCALE_STEPS (comma-separated; default 50), SCALE_POLL, SCALE_WINDOW and
// SCALE_HOSTS ("lan": the LAN bed's hosts; unset: the test bed). Without SCALE_STEPS it is the
// short run of make test: 50 KVMDomains, a 15 s poll so that the window sees every resource
// polled twice, and the assertions that do not depend on the machine.
func fromEnv(t *testing.T) settings {
	s := settings{steps: []int{50}, poll: "15s", window: 40 * time.Second, outFile: os.Getenv("SCALE_OUT")}
	switch v := os.Getenv("SCALE_HOSTS"); v {
	case "":
	case "lan":
		s.lan = true
	default:
		t.Fatalf("SCALE_HOSTS=%q: want lan, or unset for the test bed's one host", v)
	}
	if v := os.Getenv("SCALE_STEPS"); v != "" {
		s.full, s.steps, s.poll, s.window = true, nil, "", 2*time.Minute
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("SCALE_STEPS=%q: %q is not a positive count", v, f)
			}
			s.steps = append(s.steps, n)
		}
	}
	if v, ok := os.LookupEnv("SCALE_POLL"); ok {
		s.poll = v
	}
	if v := os.Getenv("SCALE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SCALE_WINDOW: %v", err)
		}
		s.window = d
	}
	return s
}

// TestScale runs the provider as a process (default flags but --poll in the short run) against
// a real API server and libvirtd over SSH, with KVMDomains that are defined and shut off
// (powerState Stopped), each with its SeedVolume, spread over ten namespaces whose BaseImages
// share one verified image per host: the test bed's one host, or with SCALE_HOSTS=lan the LAN
// bed's two, split evenly (the test then runs inside netns node, as the provider would). At each
// step it waits until all are Ready, then measures a steady window from the provider's own
// metrics endpoint and ss.
func TestScale(t *testing.T) {
	s := fromEnv(t)
	hosts := requireBed(t, s.lan)
	env := controlplane.Start(t)
	ctx := context.Background()
	kube := env.Client

	dir := t.TempDir()
	bin := providerproc.Build(t, controlplane.RepoRoot(), dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	providerproc.WriteKubeconfig(t, env.Config, kubeconfig)

	img := make([]byte, imageSize)
	copy(img, "provider-kvm scale bench image")
	sum := sha256.Sum256(img)
	digest := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(img) }))
	t.Cleanup(srv.Close)

	b := hosts(env)
	b.prepare(t, env, srv.URL)

	p, m := startProvider(t, s, env, bin, kubeconfig, b)
	made := 0
	t.Cleanup(func() { b.cleanup(t, kube, s.cleanupBound(made), p.Stop, !s.full, digest) })
	for i := range namespaces {
		ns := nsName(i)
		env.Namespace(t, ns)
		for _, h := range b.hosts {
			if err := kube.Create(ctx, h.baseImage(ns, srv.URL+"/base.raw", digest)); err != nil {
				t.Fatal(err)
			}
		}
	}

	var rows []row
	for _, n := range s.steps {
		t0, before, created := time.Now(), m.sample(t), n-made
		for ; made < n; made++ {
			for _, o := range b.pair(made) {
				if err := kube.Create(ctx, o); err != nil {
					t.Fatalf("creating %s/%s: %v", o.GetNamespace(), o.GetName(), err)
				}
			}
		}
		controlplane.Eventually(t, readyBound(n), fmt.Sprintf("%d KVMDomains and their SeedVolumes Ready", n), func() error {
			if err := p.Alive(); err != nil {
				return err
			}
			return allReady(ctx, kube, n, b.bases())
		})
		r := row{step: fmt.Sprintf("%d %s", n, b.where), ready: time.Since(t0), created: created, ramp: rampOf(before, m.sample(t))}
		// Let the first reconciles after Ready pass (a new seed is read back once), then measure.
		time.Sleep(s.settle(n, b.bases()))
		r.fig = m.window(t, s.window, nil)
		if err := allReady(ctx, kube, n, b.bases()); err != nil {
			t.Errorf("with %d: a resource left Ready during the measurement: %v", n, err)
		}
		rows = append(rows, r)
		t.Logf("%s: Ready after %s (%d created: %.0f libvirt calls, %.0f definitions read); %s", r.step, r.ready.Round(time.Second), created, r.ramp.calls, r.ramp.xml, r.fig.brief())
		if !s.full {
			check(t, r.fig, n, s, len(b.hosts))
		}
	}
	if s.full {
		// libvirtd restarts on one host (the last): the connection is opened again once, the
		// events are registered again, and nothing storms.
		h := b.hosts[len(b.hosts)-1]
		r := row{step: fmt.Sprintf("%d, libvirtd restarted", made)}
		if len(b.hosts) > 1 {
			r.step = fmt.Sprintf("%d, %s's libvirtd restarted", made, h.name)
		}
		r.fig = m.window(t, s.window, func() { h.restart(t) })
		rows = append(rows, r)
		t.Logf("%s: %s", r.step, r.fig.brief())
	}
	report(t, s, b, rows, machine())
	if t.Failed() {
		t.Logf("the provider's log: %s", p.Log)
	}
}

// startProvider starts the provider process with the run's flags and waits for its metrics
// endpoint; the meter reads it and counts its SSH connections to each of the bed's hosts.
func startProvider(t *testing.T, s settings, env *controlplane.Env, bin, kubeconfig string, b bed) (*providerproc.Process, *meter) {
	t.Helper()
	metricsAddr, pprofAddr := freePort(t), freePort(t)
	args := []string{"--no-leader-election", "--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=0",
		"--pprof-bind-address=" + pprofAddr, "--cluster-id=" + env.ClusterID}
	if s.poll != "" {
		args = append(args, "--poll="+s.poll)
	}
	logDir := filepath.Join(controlplane.RepoRoot(), "_output", "scale")
	if err := os.MkdirAll(logDir, 0o750); err != nil {
		t.Fatal(err)
	}
	p := providerproc.Start(t, bin, kubeconfig, filepath.Join(logDir, "provider.log"), nil, args...)
	m := &meter{url: "http://" + metricsAddr + "/metrics", pid: p.Cmd.Process.Pid, peers: b.peers()}
	controlplane.Eventually(t, time.Minute, "the provider's metrics endpoint answering", func() error {
		if err := p.Alive(); err != nil {
			return err
		}
		resp, err := http.Get(m.url)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	return p, m
}

// settle is how long after all are Ready a step waits before measuring: a quarter window in the
// short run; in the full one, a whole cycle of reconciles, the poll or, when the reconcile rate
// bounds it, the time 10 reconciles a second take to go over every resource once (n KVMDomains,
// n seeds and the bases).
func (s settings) settle(n, bases int) time.Duration {
	if !s.full {
		return s.window / 4
	}
	poll := time.Minute
	if d, err := time.ParseDuration(s.poll); err == nil {
		poll = d
	}
	return max(poll+poll/5, time.Duration(2*n+bases)*time.Second/10)
}

// cleanupBound is how long deleting made KVMDomains with their seeds through Kubernetes may take
// before the rest is removed from the hosts directly: the Ready bound in the short run (an error
// past it), at most 8 minutes in the full one (at a thousand the finalizers wait behind the polls).
func (s settings) cleanupBound(made int) time.Duration {
	if !s.full {
		return readyBound(made)
	}
	return min(readyBound(made), 8*time.Minute)
}

// readyBound is how long n KVMDomains and their SeedVolumes may take to become Ready: at the
// default 10 reconciles a second, about four reconciles each, with room for a slow machine.
func readyBound(n int) time.Duration { return 5*time.Minute + time.Duration(n)*2*time.Second }

func nsName(i int) string { return fmt.Sprintf("scale-%02d", i%namespaces) }

// allReady returns why fewer than n KVMDomains, n SeedVolumes and bases BaseImages are Ready and
// Synced, or nil.
func allReady(ctx context.Context, kube client.Client, n, bases int) error {
	var ds v1alpha1.KVMDomainList
	var ss v1alpha1.SeedVolumeList
	var bs v1alpha1.BaseImageList
	if err := kube.List(ctx, &ds); err != nil {
		return err
	}
	if err := kube.List(ctx, &ss); err != nil {
		return err
	}
	if err := kube.List(ctx, &bs); err != nil {
		return err
	}
	var ready [3]int
	var first string
	count := func(k int, kind, name string, c interface {
		GetCondition(xpv2.ConditionType) xpv2.Condition
	}) {
		if c.GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue && c.GetCondition(xpv2.TypeSynced).Status == corev1.ConditionTrue {
			ready[k]++
			return
		}
		if first == "" {
			r, sy := c.GetCondition(xpv2.TypeReady), c.GetCondition(xpv2.TypeSynced)
			first = fmt.Sprintf("%s %s: Ready=%s %s %s; Synced=%s %s", kind, name, r.Status, r.Reason, r.Message, sy.Status, sy.Message)
		}
	}
	for i := range ds.Items {
		count(0, "KVMDomain", ds.Items[i].Namespace+"/"+ds.Items[i].Name, &ds.Items[i])
	}
	for i := range ss.Items {
		count(1, "SeedVolume", ss.Items[i].Namespace+"/"+ss.Items[i].Name, &ss.Items[i])
	}
	for i := range bs.Items {
		count(2, "BaseImage", bs.Items[i].Namespace+"/"+bs.Items[i].Name, &bs.Items[i])
	}
	if ready[0] < n || ready[1] < n || ready[2] < bases {
		return fmt.Errorf("Ready: %d of %d KVMDomains, %d of %d SeedVolumes, %d of %d BaseImages; first not Ready: %s",
			ready[0], n, ready[1], n, ready[2], bases, first)
	}
	return nil
}

// freePort is a loopback address with a port free at the time of asking.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// machine describes where the run was measured.
func machine() string {
	cpus := "?"
	if out, err := exec.Command("nproc").Output(); err == nil {
		cpus = strings.TrimSpace(string(out))
	}
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
				break
			}
		}
	}
	return fmt.Sprintf("%s CPUs (%s)", cpus, model)
}
