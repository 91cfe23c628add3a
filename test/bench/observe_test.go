//go:build bench

package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/kvmdomain"
	"github.com/provider-kvm/provider-kvm/internal/controller/seedvolume"
	"github.com/provider-kvm/provider-kvm/internal/domainevents"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// Bench settings: resources are polled every poll; a measurement counts over window.
const (
	poll      = 5 * time.Second
	window    = 20 * time.Second
	namespace = "bench"
	imageSize = 256 << 10
)

var (
	sizes = []int{1, 10, 100}
	kinds = []string{v1alpha1.BaseImageKind, v1alpha1.SeedVolumeKind, v1alpha1.KVMDomainKind}
)

// counts are the counters of one moment.
type counts struct {
	calls      map[string]float64 // by kind, ConnectOpen included
	opens      map[string]float64 // ConnectOpen by kind
	reconciles map[string]float64 // by kind
	conns      float64            // provider_kvm_libvirt_connections_opened_total, all hosts
}

func gather(t *testing.T) counts {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := counts{calls: map[string]float64{}, opens: map[string]float64{}, reconciles: map[string]float64{}}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case metrics.CallsName:
				c.calls[label(m, "kind")] += v
				if label(m, "op") == metrics.OpConnectOpen {
					c.opens[label(m, "kind")] += v
				}
			case metrics.ConnectionsName:
				c.conns += v
			case "controller_runtime_reconcile_total":
				for _, k := range kinds {
					if label(m, "controller") == managed.ControllerName(v1alpha1.Group+"/"+k) || strings.HasSuffix(label(m, "controller"), "/"+strings.ToLower(k)+"."+v1alpha1.Group) {
						c.reconciles[k] += v
					}
				}
			}
		}
	}
	return c
}

// row is one line of the table.
type row struct {
	kind           string
	n              int
	observes       float64
	calls, opens   float64
	connsAllKinds  float64
	callsPerObs    float64
	newConnsPerObs float64
}

// TestObserveCost prints calls and new connections per steady-state Observe. It runs only
// with the build tag bench and BENCH_OBSERVE set (make bench-observe), so that go test ./... never
// counts a skipped bench as a passing test.
func TestObserveCost(t *testing.T) {
	if os.Getenv("BENCH_OBSERVE") == "" {
		t.Skip("the Observe cost bench runs with BENCH_OBSERVE=1 (make bench-observe)")
	}
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	events := domainevents.New(logging.NewNopLogger())
	conns := host.NewConnections(host.WithOnLibvirt(events.Attach))
	t.Cleanup(func() { _ = conns.Close() })
	shared := env.Shared()
	env.Run(t, poll, config.Setup,
		func(m ctrl.Manager, o controller.Options) error { return baseimage.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return seedvolume.Setup(m, o, conns, shared) },
		func(m ctrl.Manager, o controller.Options) error { return kvmdomain.Setup(m, o, conns, events, shared) },
	)
	ctx := context.Background()
	kube := env.Client

	// Raw images, distinct per BaseImage, served from loopback inside the namespace.
	image := func(i int) []byte {
		b := make([]byte, imageSize)
		for j := range b {
			b[j] = byte(j*31 + i)
		}
		copy(b, "provider-kvm bench image "+strconv.Itoa(i))
		return b
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(r.URL.Path), ".raw"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(image(i))
	}))
	t.Cleanup(srv.Close)
	env.AllowImageServer(t, "default", srv.URL)
	env.Namespace(t, namespace)

	name := func(i int) string { return fmt.Sprintf("b%03d", i) }
	objects := func(i int) []client.Object {
		sum := sha256.Sum256(image(i))
		return []client.Object{
			&v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i)}, Spec: v1alpha1.BaseImageSpec{
				ForProvider: v1alpha1.BaseImageParameters{Format: v1alpha1.ImageFormatRaw,
					Source: v1alpha1.ImageSource{URL: fmt.Sprintf("%s/%d.raw", srv.URL, i), SHA256: hex.EncodeToString(sum[:])}}}},
			&v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i)}, Spec: v1alpha1.SeedVolumeSpec{
				ForProvider: v1alpha1.SeedVolumeParameters{Hostname: name(i), UserData: ptr.To("#cloud-config\n")}}},
			// Defined and shut off: the bench boots no guest.
			&v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i)}, Spec: v1alpha1.KVMDomainSpec{
				ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 128, PowerState: v1alpha1.PowerStateStopped,
					BaseImageRef:  &xpv2.NamespacedReference{Name: name(i)},
					SeedVolumeRef: &xpv2.NamespacedReference{Name: name(i)}}}},
		}
	}
	var all []client.Object
	t.Cleanup(func() { cleanup(t, kube, all) })

	var rows []row
	made := 0
	for _, n := range sizes {
		for ; made < n; made++ {
			for _, o := range objects(made) {
				if err := kube.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
				all = append(all, o)
			}
		}
		controlplane.Eventually(t, 15*time.Minute, fmt.Sprintf("%d of each kind Ready", n), func() error { return allReady(ctx, kube, all) })
		// Let the first polls after Ready (and the jobs' requeues) pass.
		time.Sleep(2 * poll)
		before := gather(t)
		time.Sleep(window)
		after := gather(t)
		if err := allReady(ctx, kube, all); err != nil {
			t.Errorf("with %d of each: a resource left Ready during the measurement: %v", n, err)
		}
		for _, k := range kinds {
			r := row{kind: k, n: n,
				observes:      after.reconciles[k] - before.reconciles[k],
				calls:         after.calls[k] - before.calls[k],
				opens:         after.opens[k] - before.opens[k],
				connsAllKinds: after.conns - before.conns,
			}
			if r.observes > 0 {
				r.callsPerObs, r.newConnsPerObs = r.calls/r.observes, r.opens/r.observes
			}
			rows = append(rows, r)
		}
	}
	print(t, rows)
}

// allReady returns an error naming the first resource that is not Ready.
func allReady(ctx context.Context, kube client.Client, objs []client.Object) error {
	for _, o := range objs {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		c, ok := o.(interface {
			GetCondition(xpv2.ConditionType) xpv2.Condition
		})
		if !ok {
			return fmt.Errorf("%T has no conditions", o)
		}
		if r := c.GetCondition(xpv2.TypeReady); r.Status != corev1.ConditionTrue {
			s := c.GetCondition(xpv2.TypeSynced)
			return fmt.Errorf("%T %s: Ready=%s (%s %s); Synced=%s: %s", o, o.GetName(), r.Status, r.Reason, r.Message, s.Status, s.Message)
		}
	}
	return nil
}

// cleanup deletes the bench's resources, KVMDomains first, and waits until they are gone, so
// the shared test bed is left as it was.
func cleanup(t *testing.T, kube client.Client, objs []client.Object) {
	ctx := context.Background()
	for _, kind := range []string{"*v1alpha1.KVMDomain", "*v1alpha1.SeedVolume", "*v1alpha1.BaseImage"} {
		var these []client.Object
		for _, o := range objs {
			if fmt.Sprintf("%T", o) == kind {
				these = append(these, o)
				if err := kube.Delete(ctx, o); err != nil && !kerrors.IsNotFound(err) {
					t.Errorf("delete %s: %v", o.GetName(), err)
				}
			}
		}
		controlplane.Eventually(t, 10*time.Minute, "bench "+kind+"s deleted", func() error {
			for _, o := range these {
				if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); !kerrors.IsNotFound(err) {
					return fmt.Errorf("%s %s still exists (%v)", kind, o.GetName(), err)
				}
			}
			return nil
		})
	}
}

// print writes the table to stdout and, when BENCH_OBSERVE_OUT is set, to that file.
func print(t *testing.T, rows []row) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "Steady-state Observe cost on the test bed (resources Ready and unchanged; poll %s, measured over %s).\n", poll, window)
	fmt.Fprintln(&b, "KVMDomains are defined and shut off (powerState Stopped): no guest boots, so no readiness probe runs.")
	fmt.Fprintln(&b, "calls: libvirt RPCs (provider_kvm_libvirt_calls_total of the kind, ConnectOpen included); new conns: libvirt connections the kind opened.")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tresources\tobserves\tcalls/observe\tnew conns/observe\tconns opened (all kinds)\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%.2f\t%.0f\t\n", r.kind, r.n, r.observes, r.callsPerObs, r.newConnsPerObs, r.connsAllKinds)
	}
	_ = tw.Flush()
	fmt.Print("\n" + b.String())
	if p := os.Getenv("BENCH_OBSERVE_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			t.Error(err)
		}
	}
}
