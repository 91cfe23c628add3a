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
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/providerproc"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
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
	outFile string
}

// fromEnv reads SCALE_STEPS (comma-separated; default 50), SCALE_POLL and SCALE_WINDOW. Without
// SCALE_STEPS it is the short run of make test: 50 KVMDomains, a 15 s poll so that the window
// sees every resource polled twice, and the assertions that do not depend on the machine.
func fromEnv(t *testing.T) settings {
	s := settings{steps: []int{50}, poll: "15s", window: 40 * time.Second, outFile: os.Getenv("SCALE_OUT")}
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
// a real API server and the test bed's libvirtd over SSH, with KVMDomains that are defined and
// shut off (powerState Stopped), each with its SeedVolume, spread over ten namespaces whose
// BaseImages share one verified image on the host. At each step it waits until all are Ready,
// then measures a steady window from the provider's own metrics endpoint and ss.
func TestScale(t *testing.T) {
	s := fromEnv(t)
	tb := testbed.Require(t)
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(img) }))
	t.Cleanup(srv.Close)

	env.HostConfig(t, tb, "default")
	env.AllowImageServer(t, "default", srv.URL)
	// A thousand defined domains of 1 vCPU and 128 MiB commit far more than the bed's two CPUs:
	// stopped domains count, so the ratios are raised for the bench.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := kube.Get(ctx, types.NamespacedName{Name: "default"}, cpc); err != nil {
			return err
		}
		cpc.Spec.Allocation = &v1alpha1.AllocationRatios{CPU: ptr.To(resource.MustParse("1024")), Memory: ptr.To(resource.MustParse("64"))}
		return kube.Update(ctx, cpc)
	})
	if err != nil {
		t.Fatal(err)
	}

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
	m := &meter{url: "http://" + metricsAddr + "/metrics", pid: p.Cmd.Process.Pid, sshPort: tb.SSHPort}
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

	for i := range namespaces {
		ns := nsName(i)
		env.Namespace(t, ns)
		bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: v1alpha1.BaseImageSpec{
			ForProvider: v1alpha1.BaseImageParameters{Format: v1alpha1.ImageFormatRaw,
				Source: v1alpha1.ImageSource{URL: srv.URL + "/base.raw", SHA256: hex.EncodeToString(sum[:])}}}}
		if err := kube.Create(ctx, bi); err != nil {
			t.Fatal(err)
		}
	}
	made := 0
	t.Cleanup(func() { cleanup(t, kube, readyBound(made)) })

	var rows []row
	for _, n := range s.steps {
		t0, before, created := time.Now(), m.sample(t), n-made
		for ; made < n; made++ {
			for _, o := range pair(made) {
				if err := kube.Create(ctx, o); err != nil {
					t.Fatalf("creating %s/%s: %v", o.GetNamespace(), o.GetName(), err)
				}
			}
		}
		controlplane.Eventually(t, readyBound(n), fmt.Sprintf("%d KVMDomains and their SeedVolumes Ready", n), func() error {
			if err := p.Alive(); err != nil {
				return err
			}
			return allReady(ctx, kube, n)
		})
		r := row{step: fmt.Sprintf("%d on one host", n), ready: time.Since(t0), created: created, ramp: rampOf(before, m.sample(t))}
		// Let the first reconciles after Ready pass (a new seed is read back once), then measure.
		time.Sleep(s.settle(n))
		r.fig = m.window(t, s.window, nil)
		if err := allReady(ctx, kube, n); err != nil {
			t.Errorf("with %d: a resource left Ready during the measurement: %v", n, err)
		}
		rows = append(rows, r)
		t.Logf("%s: Ready after %s (%d created: %.0f libvirt calls, %.0f definitions read); %s", r.step, r.ready.Round(time.Second), created, r.ramp.calls, r.ramp.xml, r.fig.brief())
		if !s.full {
			check(t, r.fig, n, s)
		}
	}
	if s.full {
		// libvirtd restarts on the host: the connection is opened again once, the events are
		// registered again, and nothing storms.
		r := row{step: fmt.Sprintf("%d, libvirtd restarted", made)}
		r.fig = m.window(t, s.window, func() { tb.Control(t, "restart-libvirtd") })
		rows = append(rows, r)
		t.Logf("%s: %s", r.step, r.fig.brief())
	}
	report(t, s, rows, machine())
	if t.Failed() {
		t.Logf("the provider's log: %s", p.Log)
	}
}

// settle is how long after all are Ready a step waits before measuring: a quarter window in the
// short run; in the full one, a whole cycle of reconciles, the poll or, when the reconcile rate
// bounds it, the time 10 reconciles a second take to go over every resource once.
func (s settings) settle(n int) time.Duration {
	if !s.full {
		return s.window / 4
	}
	poll := time.Minute
	if d, err := time.ParseDuration(s.poll); err == nil {
		poll = d
	}
	return max(poll+poll/5, time.Duration(2*n+namespaces)*time.Second/10)
}

// readyBound is how long n KVMDomains and their SeedVolumes may take to become Ready: at the
// default 10 reconciles a second, about four reconciles each, with room for a slow machine.
func readyBound(n int) time.Duration { return 5*time.Minute + time.Duration(n)*2*time.Second }

func nsName(i int) string { return fmt.Sprintf("scale-%02d", i%namespaces) }

// pair is the i-th SeedVolume and the KVMDomain that boots from it and its namespace's base.
func pair(i int) []client.Object {
	ns, name := nsName(i), fmt.Sprintf("d%04d", i)
	return []client.Object{
		&v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.SeedVolumeSpec{
			ForProvider: v1alpha1.SeedVolumeParameters{Hostname: name, UserData: ptr.To("#cloud-config\n")}}},
		&v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.KVMDomainSpec{
			ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 128, PowerState: v1alpha1.PowerStateStopped,
				BaseImageRef:  &xpv2.NamespacedReference{Name: "base"},
				SeedVolumeRef: &xpv2.NamespacedReference{Name: name}}}},
	}
}

// allReady returns why fewer than n KVMDomains and n SeedVolumes are Ready and Synced, or nil.
func allReady(ctx context.Context, kube client.Client, n int) error {
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
	if ready[0] < n || ready[1] < n || ready[2] < namespaces {
		return fmt.Errorf("Ready: %d of %d KVMDomains, %d of %d SeedVolumes, %d of %d BaseImages; first not Ready: %s",
			ready[0], n, ready[1], n, ready[2], namespaces, first)
	}
	return nil
}

// cleanup deletes the run's resources, KVMDomains first, and waits until they are gone, so the
// shared test bed is left as it was.
func cleanup(t *testing.T, kube client.Client, bound time.Duration) {
	ctx := context.Background()
	for _, kind := range []struct {
		obj  client.Object
		list client.ObjectList
		name string
	}{
		{&v1alpha1.KVMDomain{}, &v1alpha1.KVMDomainList{}, "KVMDomains"},
		{&v1alpha1.SeedVolume{}, &v1alpha1.SeedVolumeList{}, "SeedVolumes"},
		{&v1alpha1.BaseImage{}, &v1alpha1.BaseImageList{}, "BaseImages"},
	} {
		for i := range namespaces {
			if err := kube.DeleteAllOf(ctx, kind.obj, client.InNamespace(nsName(i))); err != nil {
				t.Errorf("deleting the bench's %s in %s: %v", kind.name, nsName(i), err)
			}
		}
		controlplane.Eventually(t, bound, "the bench's "+kind.name+" deleted", func() error {
			if err := kube.List(ctx, kind.list); err != nil {
				return err
			}
			if n := meta.LenList(kind.list); n > 0 {
				return fmt.Errorf("%d %s left", n, kind.name)
			}
			return nil
		})
	}
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
