package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/providerproc"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// Every object of the suite lives in a namespace with this prefix, so its host objects are
// named "flt-..." and told from other tests' leftovers.
const nsPrefix = "flt-"

// imageSize is the size of the suite's raw images: several of the 1 MiB chunks an upload
// sends, so that a kill mid-upload leaves a partial file, and fast to publish.
const imageSize = 4 << 20

// full is true for make test-faults: every kill point, the two-minute blackhole.
func full() bool { return os.Getenv("FAULTS_FULL") != "" }

// suite is what the cases share: one control plane, one provider binary, one image server.
type suite struct {
	tb         *testbed.Env
	env        *controlplane.Env
	kube       client.Client
	bin        string
	kubeconfig string
	logDir     string
	images     *httptest.Server
	mon        *monitor

	mu   sync.Mutex
	rows []row
	// sent counts the bytes the image server sent of each image, for the cases that act
	// mid-upload.
	sent map[string]int64
}

// slowPrefix names images the server sends slowly (256 KiB every 250 ms, 4 s for the whole
// image), so that a case can act while they are being uploaded.
const slowPrefix = "slow-"

func (s *suite) serveImage(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSuffix(filepath.Base(r.URL.Path), ".img")
	b := image(name)
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	piece := len(b)
	if strings.HasPrefix(name, slowPrefix) {
		piece = 256 << 10
	}
	for off := 0; off < len(b); off += piece {
		n, err := w.Write(b[off:min(off+piece, len(b))])
		s.mu.Lock()
		s.sent[name] += int64(n)
		s.mu.Unlock()
		if err != nil {
			return
		}
		if piece < len(b) {
			w.(http.Flusher).Flush()
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// sentOf returns how many bytes of image name the server sent, all requests counted.
func (s *suite) sentOf(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[name]
}

// row is one line of the results table.
type row struct {
	name, outcome string
	recover       time.Duration
	leaked        []string
	notes         string
}

// image returns the bytes of the suite's raw image name: distinct per name, so every case
// publishes (and removes) a cached image of its own.
func image(name string) []byte {
	b := make([]byte, imageSize)
	seed := sha256.Sum256([]byte(name))
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i>>10)
	}
	copy(b, "provider-kvm fault suite image "+name)
	if strings.HasPrefix(name, writerPrefix) {
		clear(b[:512])
		copy(b, writerBootSector)
	}
	return b
}

func digest(name string) string {
	h := sha256.Sum256(image(name))
	return hex.EncodeToString(h[:])
}

// TestFaults runs the fault suite (see the package doc).
func TestFaults(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	s := &suite{tb: tb, env: env, kube: env.Client}
	out := filepath.Join(controlplane.RepoRoot(), "_output", "faults")
	s.logDir = filepath.Join(out, "logs")
	if err := os.MkdirAll(s.logDir, 0o750); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s.bin = buildProvider(t, dir)
	s.kubeconfig = filepath.Join(dir, "kubeconfig")
	providerproc.WriteKubeconfig(t, env.Config, s.kubeconfig)

	s.sent = map[string]int64{}
	s.images = httptest.NewServer(http.HandlerFunc(s.serveImage))
	t.Cleanup(s.images.Close)
	env.HostConfig(t, tb, "default")
	env.AllowImageServer(t, "default", s.images.URL)
	// The names of every namespace and image the suite may use.
	var o owned
	for i := range killCases {
		o.namespaces = append(o.namespaces, fmt.Sprintf("%sk%02d", nsPrefix, i))
	}
	o.namespaces = append(o.namespaces, blackholeNamespaces...)
	for _, dc := range disruptCases {
		o.namespaces = append(o.namespaces, dc.namespace())
	}
	o.namespaces = append(o.namespaces, twoProvidersNamespace)
	o.namespaces = append(o.namespaces, poolFullNamespaces...)
	o.namespaces = append(o.namespaces, pausedNamespace)
	for _, ns := range o.namespaces {
		o.digests = append(o.digests, digest(ns))
	}
	o.digests = append(o.digests, digest(writerPrefix+"paused"))
	cleanHost(t, inspect(tb), o)
	s.mon = startMonitor(nsPrefix)

	t.Cleanup(func() { s.report(t, out) })
	if run := os.Getenv("FAULTS_ONLY"); run == "" || run == "Kill" {
		t.Run("Kill", s.killCases)
	}
	if run := os.Getenv("FAULTS_ONLY"); run == "" || run == "Blackhole" {
		t.Run("Blackhole", s.blackhole)
	}
	if run := os.Getenv("FAULTS_ONLY"); (run == "" && full()) || run == "Disrupt" {
		t.Run("Disrupt", s.disruptCases)
	}
	if run := os.Getenv("FAULTS_ONLY"); (run == "" && full()) || run == "TwoProviders" {
		t.Run("TwoProviders", s.twoProviders)
	}
	if run := os.Getenv("FAULTS_ONLY"); (run == "" && full()) || run == "PoolFull" {
		t.Run("PoolFull", s.poolFull)
	}
	if run := os.Getenv("FAULTS_ONLY"); (run == "" && full()) || run == "PausedGuest" {
		t.Run("PausedGuest", s.pausedGuest)
	}
	bad, samples := s.mon.end()
	t.Logf("domains sampled for their base volume: %d samples", samples)
	for _, b := range bad {
		t.Errorf("a domain was defined on a base volume that is not a verified published image: %s", b)
	}
}

// record adds a row to the table; the outcome is FAIL when the case failed.
func (s *suite) record(t *testing.T, recover time.Duration, leaked []string, notes ...string) {
	outcome := "pass"
	if t.Failed() {
		outcome = "FAIL"
	}
	if t.Skipped() {
		outcome = "skipped"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, row{name: strings.TrimPrefix(t.Name(), "TestFaults/"), outcome: outcome, recover: recover, leaked: leaked, notes: strings.Join(notes, "; ")})
}

func (s *suite) report(t *testing.T, dir string) {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "case\toutcome\ttime to recover\tobjects leaked\tnotes")
	for _, r := range s.rows {
		rec := "-"
		if r.recover > 0 {
			rec = r.recover.Round(100 * time.Millisecond).String()
		}
		leaked := fmt.Sprint(len(r.leaked))
		if len(r.leaked) > 0 {
			leaked += " (" + strings.Join(r.leaked, ", ") + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.name, r.outcome, rec, leaked, r.notes)
	}
	_ = w.Flush()
	t.Logf("fault suite results:\n%s", b.String())
	if err := os.WriteFile(filepath.Join(dir, "results.txt"), []byte(b.String()), 0o600); err != nil {
		t.Errorf("writing the results table: %v", err)
	}
}

// set is the three resources of one stack: a BaseImage, a SeedVolume and a KVMDomain that
// boots from them, on ClusterProviderConfig cpc.
func (s *suite) set(ns, cpc, img string, power v1alpha1.PowerState) []resource.Managed {
	ref := &xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: cpc}
	mr := xpv2.ManagedResourceSpec{ProviderConfigReference: ref}
	userData := "#cloud-config\n"
	return []resource.Managed{
		&v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: v1alpha1.BaseImageSpec{ManagedResourceSpec: mr,
			ForProvider: v1alpha1.BaseImageParameters{Format: v1alpha1.ImageFormatRaw,
				Source: v1alpha1.ImageSource{URL: s.images.URL + "/" + img + ".img", SHA256: digest(img)}}}},
		&v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seed"}, Spec: v1alpha1.SeedVolumeSpec{ManagedResourceSpec: mr,
			ForProvider: v1alpha1.SeedVolumeParameters{Hostname: "vm", UserData: &userData}}},
		&v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}, Spec: v1alpha1.KVMDomainSpec{ManagedResourceSpec: mr,
			ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 128, PowerState: power,
				BaseImageRef:  &xpv2.NamespacedReference{Name: "base"},
				SeedVolumeRef: &xpv2.NamespacedReference{Name: "seed"}}}},
	}
}

func (s *suite) create(t *testing.T, mrs []resource.Managed) {
	t.Helper()
	if len(mrs) > 0 {
		s.env.Namespace(t, mrs[0].GetNamespace())
	}
	for _, mr := range mrs {
		if err := s.kube.Create(context.Background(), mr); err != nil {
			t.Fatalf("creating %s %s: %v", kind(mr), mr.GetName(), err)
		}
	}
}

func kind(mr resource.Managed) string { return fmt.Sprintf("%T", mr)[len("*v1alpha1."):] }

// notReady returns why one of mrs is not Ready and Synced, or nil.
func (s *suite) notReady(mrs []resource.Managed) error {
	for _, mr := range mrs {
		if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(mr), mr); err != nil {
			return err
		}
		r, y := mr.GetCondition(xpv2.TypeReady), mr.GetCondition(xpv2.TypeSynced)
		if y.Status == corev1.ConditionTrue && runningNoOS(mr, r) {
			continue
		}
		if r.Status != corev1.ConditionTrue || y.Status != corev1.ConditionTrue {
			return fmt.Errorf("%s %s/%s: Ready=%s %s %q; Synced=%s %q", kind(mr), mr.GetNamespace(), mr.GetName(), r.Status, r.Reason, r.Message, y.Status, y.Message)
		}
	}
	return nil
}

// runningNoOS is true for a KVMDomain that should run and runs, and is not Ready only because
// its guest has no IPv4 address: the suite's images hold no operating system (booting a real
// guest under TCG takes a minute or more per case), so that is as far as a domain can get.
func runningNoOS(mr resource.Managed, ready xpv2.Condition) bool {
	d, ok := mr.(*v1alpha1.KVMDomain)
	return ok && d.Spec.ForProvider.PowerState == v1alpha1.PowerStateRunning && d.Status.AtProvider.State == "Running" &&
		ready.Reason == xpv2.ReasonUnavailable && strings.Contains(ready.Message, "waiting for the guest's IPv4 address")
}

// notGone returns which of mrs still exists, or nil.
func (s *suite) notGone(mrs []resource.Managed) error {
	for _, mr := range mrs {
		err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(mr), mr)
		if err == nil {
			y := mr.GetCondition(xpv2.TypeSynced)
			return fmt.Errorf("%s %s/%s still exists: Synced=%s %q", kind(mr), mr.GetNamespace(), mr.GetName(), y.Status, y.Message)
		}
		if !kerrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// wait polls cond until it returns nil and returns how long that took, failing the test after
// bound.
func wait(t *testing.T, bound time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	controlplane.Eventually(t, bound, what+" within "+bound.String(), cond)
	return time.Since(start)
}

// wipeStatus empties the status of mrs, as a restore from a backup without status does.
func (s *suite) wipeStatus(t *testing.T, mrs []resource.Managed) {
	t.Helper()
	ctx := context.Background()
	for _, mr := range mrs {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := s.kube.Get(ctx, client.ObjectKeyFromObject(mr), mr); err != nil {
				return err
			}
			switch o := mr.(type) {
			case *v1alpha1.BaseImage:
				o.Status = v1alpha1.BaseImageStatus{}
			case *v1alpha1.SeedVolume:
				o.Status = v1alpha1.SeedVolumeStatus{}
			case *v1alpha1.KVMDomain:
				o.Status = v1alpha1.KVMDomainStatus{}
			}
			return s.kube.Status().Update(ctx, mr)
		})
		if err != nil && !kerrors.IsNotFound(err) {
			t.Fatalf("emptying the status of %s %s: %v", kind(mr), mr.GetName(), err)
		}
	}
}

// remove deletes mrs. A guest that does not act on ACPI shutdown (the suite's images boot
// nothing) would wait out the provider's 90 s shutdown grace: the forcer powers the deleted
// KVMDomains' guests off out of band 5 s after their deletion, as an operator would.
func (s *suite) remove(t *testing.T, mrs []resource.Managed) (stopForcer func()) {
	t.Helper()
	for _, mr := range mrs {
		if err := s.kube.Delete(context.Background(), mr); err != nil && !kerrors.IsNotFound(err) {
			t.Fatalf("deleting %s %s: %v", kind(mr), mr.GetName(), err)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		deleted := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if time.Since(deleted) < 5*time.Second {
				continue
			}
			for _, mr := range mrs {
				if _, ok := mr.(*v1alpha1.KVMDomain); ok {
					name := mr.GetNamespace() + "_" + mr.GetName()
					if st, err := virsh("domstate", name); err == nil && strings.TrimSpace(st) == "running" {
						_, _ = virsh("destroy", name)
					}
				}
			}
		}
	}()
	return func() { close(stop); <-done }
}

// leaks returns what of the namespaces' objects and the images' cached volumes is left on the
// host, and fails the test for each.
func (s *suite) leaks(t *testing.T, namespaces []string, images []string) []string {
	t.Helper()
	o := owned{namespaces: namespaces}
	for _, img := range images {
		o.digests = append(o.digests, digest(img))
	}
	left := leftovers(t, inspect(s.tb), o)
	for _, l := range left {
		t.Errorf("leaked on the host: %s", l)
	}
	return left
}
