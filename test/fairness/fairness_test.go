package fairness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/ratelimiter"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/seedvolume"
	"github.com/provider-kvm/provider-kvm/internal/fairness"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// The provider's defaults: 10 reconciles per second, 10 workers per controller.
const (
	rate    = 10
	workers = 10
	flood   = 150
	// floodSettle is how long the flood runs before the other namespace asks: long enough for
	// its per-resource backoff to reach its 10 s cap (15 requests per second against 10).
	floodSettle = 30 * time.Second
	// bound is how long another namespace's SeedVolume may take to turn Ready during the
	// flood. A seed alone takes a few seconds (built, uploaded, read back, observed a second
	// later); behind one shared token bucket in debt, it waited the debt out (decision 48).
	bound = 15 * time.Second
)

// start runs the config, SeedVolume and BaseImage controllers at the provider's defaults
// against the test bed. FAIRNESS_LIMITER=global uses crossplane-runtime's one global bucket
// instead, for comparison.
func start(t *testing.T) (*controlplane.Env, *testbed.Env) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	env.Workers = workers
	env.RateLimiter = fairness.NewLimiter(rate)
	if os.Getenv("FAIRNESS_LIMITER") == "global" {
		env.RateLimiter = ratelimiter.NewGlobal(rate)
	}
	t.Logf("rate limiter: %T, %d/s, %d workers per controller", env.RateLimiter, rate, workers)
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	shared := env.Shared()
	env.Run(t, time.Minute, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return seedvolume.Setup(m, o, conns, shared) },
	)
	return env, tb
}

func seedOf(ns, name string, secret bool) *v1alpha1.SeedVolume {
	sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if secret {
		sv.Spec.ForProvider.UserDataSecretRef = &v1alpha1.LocalSecretKeySelector{Name: "missing", Key: "user-data"}
		return sv
	}
	ud := "#cloud-config\nhostname: " + name + "\n"
	sv.Spec.ForProvider.UserData = &ud
	return sv
}

// readyAfter creates o and returns how long it took to turn Ready.
func readyAfter(t *testing.T, kube client.Client, o client.Object, mg interface {
	GetCondition(xpv2.ConditionType) xpv2.Condition
}) time.Duration {
	t.Helper()
	ctx := context.Background()
	begin := time.Now()
	if err := kube.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, 3*time.Minute, o.GetNamespace()+"/"+o.GetName()+" Ready", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		if c := mg.GetCondition(xpv2.TypeReady); c.Status != "True" {
			return fmt.Errorf("not Ready: %s; %s", mg.GetCondition(xpv2.TypeReady).Message, mg.GetCondition(xpv2.TypeSynced).Message)
		}
		return nil
	})
	return time.Since(begin)
}

// deleted deletes objs and waits until they are gone (their finalizers ran).
func deleted(t *testing.T, kube client.Client, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if err := kube.Delete(ctx, o); err != nil && !kerrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		controlplane.Eventually(t, 2*time.Minute, "deleted "+o.GetNamespace()+"/"+o.GetName(), func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); !kerrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	}
}

// TestFloodDoesNotStarveAnotherNamespace: 150 SeedVolumes of one namespace name a Secret that
// does not exist, and are retried for ever; a SeedVolume of another namespace turns Ready
// within bound. It prints the time alone and during the flood.
func TestFloodDoesNotStarveAnotherNamespace(t *testing.T) {
	env, _ := start(t)
	kube, ctx := env.Client, context.Background()
	env.Namespace(t, "flood")
	env.Namespace(t, "quiet")

	alone := seedOf("quiet", "alone", false)
	tAlone := readyAfter(t, kube, alone, alone)

	var floods []client.Object
	for i := range flood {
		sv := seedOf("flood", fmt.Sprintf("broken-%03d", i), true)
		if err := kube.Create(ctx, sv); err != nil {
			t.Fatal(err)
		}
		floods = append(floods, sv)
	}
	time.Sleep(floodSettle)
	failing := 0
	for _, o := range floods {
		sv := o.(*v1alpha1.SeedVolume)
		if err := kube.Get(ctx, client.ObjectKeyFromObject(sv), sv); err != nil {
			t.Fatal(err)
		}
		if c := sv.GetCondition(xpv2.TypeSynced); c.Status == "False" {
			failing++
		}
	}

	during := seedOf("quiet", "during", false)
	tDuring := readyAfter(t, kube, during, during)
	t.Logf("FIGURES: quiet SeedVolume Ready in %.1f s alone, %.1f s during the flood (%d of %d flood SeedVolumes reconciled and failing after %s); bound %s",
		tAlone.Seconds(), tDuring.Seconds(), failing, flood, floodSettle, bound)
	if tDuring > bound {
		t.Errorf("another namespace's SeedVolume took %s to turn Ready during the flood, more than %s", tDuring.Round(100*time.Millisecond), bound)
	}
	deleted(t, kube, alone, during)
}

// TestInactivePoolDoesNotBlockDeletingAnUnusedBaseImage: a pool that no KVMDomain or config
// names is inactive on the host; a BaseImage that nothing uses is deleted, and its volume
// removed, as if the pool were not there.
func TestInactivePoolDoesNotBlockDeletingAnUnusedBaseImage(t *testing.T) {
	env, tb := start(t)
	kube := env.Client
	pool := "pkvm-test-inactive"
	virsh(t, "pool-define-as", pool, "dir", "--target", t.TempDir())
	t.Cleanup(func() { _ = exec.Command("virsh", "-q", "-c", "qemu:///system", "pool-undefine", pool).Run() })
	if out := virsh(t, "pool-info", pool); !strings.Contains(out, "inactive") {
		t.Fatalf("pool %s is not inactive:\n%s", pool, out)
	}

	image, sum := qcow2(t)
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, image) }))
	t.Cleanup(img.Close)
	env.AllowImageServer(t, "default", img.URL)
	env.Namespace(t, "images")
	bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "images", Name: "unused"}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: img.URL + "/tiny.qcow2", SHA256: sum}}}}
	tReady := readyAfter(t, kube, bi, bi)
	vol := bi.Status.AtProvider.VolumeName
	if _, err := os.Stat(filepath.Join(tb.PoolDir, vol)); err != nil {
		t.Fatalf("the BaseImage's volume is not in the pool: %v", err)
	}
	begin := time.Now()
	deleted(t, kube, bi)
	t.Logf("FIGURES: BaseImage Ready in %.1f s; deleted in %.1f s with pool %s inactive", tReady.Seconds(), time.Since(begin).Seconds(), pool)
	if _, err := os.Stat(filepath.Join(tb.PoolDir, vol)); !os.IsNotExist(err) {
		t.Errorf("volume %s is still in the pool after its only BaseImage was deleted (%v)", vol, err)
	}
}

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// qcow2 writes a small real qcow2 image and returns its path and sha256.
func qcow2(t *testing.T) (string, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v\n%s", err, out)
	}
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil || len(out) < 64 {
		t.Fatalf("sha256sum: %v", err)
	}
	return p, string(out[:64])
}
