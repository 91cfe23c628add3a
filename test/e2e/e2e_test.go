//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// e2eNamespaces are the namespaces TestE2E works in: the platform team's and team A's
// (team-a), team B's claim (team-b).
var e2eNamespaces = []string{"team-a", "team-b"}

// TestE2E is make e2e after the bring-up (docs/e2e.md, "What make e2e checks"): the
// installation, the plain-virsh baseline, the platform team's BaseImage, two Proxies on it and
// a ProxyClaim with its own image, each Ready with its Secret and a 204 through it, their
// deletion down to nothing on the host, and the timeline. The steps are subtests that run in
// order; each needs the ones before it (except baseline), and a failed one ends the test.
func TestE2E(t *testing.T) {
	e := requireEnv(t)
	ctx := context.Background()
	// Base image volumes that were there before (a running demo's): not this test's.
	keep, err := e.hosts.baseVolumes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.finish(t, e2eNamespaces, keep) })
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	var (
		baseVol string
		objects = map[string][]object{}
	)

	step("install", func(t *testing.T) {
		logf("1/5 bring-up: installing through the API (functions, packages, test bed)")
		if err := e.waitServers(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.install(ctx); err != nil {
			t.Fatal(err)
		}
		if !e.cfg.BringUpStart.IsZero() {
			d := secs(time.Since(e.cfg.BringUpStart))
			e.tl.add("bring-up", "control plane + Crossplane + packages installed", d)
			logf("control plane, Crossplane, functions, provider and packages up in %ss", d)
		}
	})

	step("baseline", func(t *testing.T) {
		if e.cfg.SkipBaseline {
			logf("2/5 baseline skipped (SKIP_BASELINE=1)")
			t.Skip("SKIP_BASELINE=1")
		}
		if e.cfg.Topology == "lan" {
			logf("2/5 baseline: the guest image booted with plain virsh on host-a's bridge to a squid 204 from node (test/lan, 2 vCPU, 1024 MiB)")
			if err := e.lanBaseline(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		logf("2/5 baseline: the guest image booted with plain virsh to a squid 204 (boot-check.sh, %d vCPU, %d MiB)", e.cfg.VCPUs, e.cfg.MemMiB)
		if err := e.baseline(ctx); err != nil {
			t.Fatal(err)
		}
	})

	step("platform-team", func(t *testing.T) {
		vals := e.values()
		logf("3/5 platform team: namespace team-a, BaseImage team-a/debian-12 (%s)", vals["IMAGE_URL_A"])
		t0 := time.Now()
		if err := e.apply(ctx, "team-a.yaml", vals); err != nil {
			t.Fatal(err)
		}
		bi := &v1alpha1.BaseImage{}
		if err := waitFor(ctx, "BaseImage team-a/debian-12 Ready", 2*time.Second, 600*time.Second, func(ctx context.Context) error {
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "debian-12"}, bi); err != nil {
				return err
			}
			return conditionTrue("BaseImage", "team-a/debian-12", bi.GetCondition(xpv2.TypeReady))
		}); err != nil {
			t.Fatal(err)
		}
		size := "the image"
		if st, err := os.Stat(e.cfg.Image); err == nil {
			size = fmt.Sprintf("%.0f MiB", float64(st.Size())/(1<<20))
		}
		e.tl.add("team-a/debian-12", "BaseImage Ready ("+size+" uploaded and verified)", secs(time.Since(t0)))
		if baseVol = bi.Status.AtProvider.VolumeName; baseVol == "" {
			t.Fatal("BaseImage team-a/debian-12 reports no volume")
		}
		logf("  BaseImage team-a/debian-12 Ready after %ss: volume %s", secs(time.Since(t0)), baseVol)
	})

	// proxy-a shares team-a's BaseImage on host A; proxy-b caches its own image on host B
	// (the same host on the NAT test bed); team B's claim caches its own image on host A.
	// The three guests are independent: they are created together and boot at the same time,
	// each followed on its own timeline from that moment.
	hostA, hostB := e.cfg.hostNames()
	claim := newUnstructured(gvkProxyClaim, "team-b", "proxy-c")
	const claimLabel = "team-b/proxy-c (claim)"
	var xr string // the claim's XProxy
	step("boot", func(t *testing.T) {
		vals := e.values()
		logf("3/5 application team A: Proxy team-a/proxy-a on host %s on the shared BaseImage, Proxy team-a/proxy-b on host %s caching its own image; application team B: ProxyClaim team-b/proxy-c caching its own image (%s); all three boot at once",
			hostA, hostB, vals["IMAGE_URL_B"])
		t0 := time.Now()
		for _, f := range []string{"proxy-a.yaml", "proxy-b.yaml", "team-b.yaml"} {
			if err := e.apply(ctx, f, vals); err != nil {
				t.Fatal(err)
			}
		}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		follow := func(f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		for _, p := range []string{"proxy-a", "proxy-b"} {
			follow(func() error {
				return e.watch(ctx, newUnstructured(gvkProxy, "team-a", p), p, "team-a/"+p, t0)
			})
		}
		follow(func() error {
			if err := waitFor(ctx, "ProxyClaim team-b/proxy-c to get its XProxy", 2*time.Second, 120*time.Second, func(ctx context.Context) error {
				if err := e.c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
					return err
				}
				xr, _, _ = unstructured.NestedString(claim.Object, "spec", "resourceRef", "name")
				if xr == "" {
					return errors.New("no spec.resourceRef yet")
				}
				return nil
			}); err != nil {
				return err
			}
			logf("  ProxyClaim team-b/proxy-c -> XProxy %s", xr)
			return e.watch(ctx, claim, xr, claimLabel, t0)
		})
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		logf("  all three Ready %ss after they were created", secs(time.Since(t0)))
	})

	for _, pc := range []struct {
		name, host string
		shared     bool
	}{{"proxy-a", hostA, true}, {"proxy-b", hostB, false}} {
		p := pc.name
		step(p, func(t *testing.T) {
			xr := newUnstructured(gvkProxy, "team-a", p)
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
				t.Fatal(err)
			}
			if err := e.checkEndpoint(ctx, "team-a/"+p, "team-a", p+"-proxy", xr); err != nil {
				t.Fatal(err)
			}
			d := &v1alpha1.KVMDomain{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: p}, d); err != nil {
				t.Fatal(err)
			}
			own := &v1alpha1.BaseImageList{}
			if err := e.c.List(ctx, own, client.InNamespace("team-a"), client.MatchingLabels{"crossplane.io/composite": p}); err != nil {
				t.Fatal(err)
			}
			image := "debian-12"
			if pc.shared {
				if ref := d.Spec.ForProvider.BaseImageRef; ref == nil || ref.Name != "debian-12" {
					t.Fatalf("KVMDomain team-a/%s does not boot BaseImage debian-12 (baseImageRef %+v)", p, ref)
				}
				if len(own.Items) > 0 {
					t.Fatalf("Proxy team-a/%s composed a BaseImage of its own (%s); it should share debian-12", p, own.Items[0].Name)
				}
			} else {
				if len(own.Items) != 1 {
					t.Fatalf("Proxy team-a/%s composed %d BaseImages, want its own one", p, len(own.Items))
				}
				image = own.Items[0].Name
			}
			if err := e.checkPlacement(ctx, "team-a", p, image, pc.host); err != nil {
				t.Fatal(err)
			}
			objs, err := e.hosts.domainObjects("team-a_" + p)
			if err != nil {
				t.Fatal(err)
			}
			objects[p] = objs
		})
	}

	step("claim", func(t *testing.T) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			t.Fatal(err)
		}
		const label = claimLabel
		// A claim's composed resources are named after the claim (proxy-c-*), not its XProxy.
		if err := e.checkEndpoint(ctx, label, "team-b", "proxy-c-proxy", claim); err != nil {
			t.Fatal(err)
		}
		var conn map[string][]byte
		if err := waitFor(ctx, "the claim's connection Secret team-b/proxy-c-connection", 2*time.Second, 120*time.Second, func(ctx context.Context) (err error) {
			conn, err = e.secretData(ctx, "team-b", "proxy-c-connection")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		own, err := e.secretData(ctx, "team-b", "proxy-c-proxy")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(conn["url"], own["url"]) {
			t.Fatalf("ProxyClaim team-b/proxy-c: the connection Secret's url %q differs from proxy-c-proxy's %q", conn["url"], own["url"])
		}
		logf("  %s: connection Secret team-b/proxy-c-connection has the same url", label)
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "proxy-c-image"}, &v1alpha1.BaseImage{}); err != nil {
			t.Fatalf("XProxy %s did not compose BaseImage team-b/proxy-c-image: %v", xr, err)
		}
		if err := e.checkPlacement(ctx, "team-b", "proxy-c", "proxy-c-image", hostA); err != nil {
			t.Fatal(err)
		}
		objs, err := e.hosts.domainObjects("team-b_proxy-c")
		if err != nil {
			t.Fatal(err)
		}
		objects["proxy-c"] = objs
	})

	step("delete-proxy-a", func(t *testing.T) {
		logf("4/5 delete Proxy team-a/proxy-a")
		t0 := time.Now()
		xr := newUnstructured(gvkProxy, "team-a", "proxy-a")
		if err := e.c.Delete(ctx, xr); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "Proxy team-a/proxy-a to be deleted", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
			err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), newUnstructured(gvkProxy, "team-a", "proxy-a"))
			if kerrors.IsNotFound(err) {
				return nil
			}
			return errors.Join(err, errors.New("still there"))
		}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "proxy-a's managed resources to be deleted", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
			left, err := e.composedLeft(ctx, "team-a", "proxy-a")
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("still in the API: %s", strings.Join(left, ", "))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "proxy-a's domain, overlay, seed and NVRAM to go", 2*time.Second, e.cfg.DeleteTimeout, func(context.Context) error {
			left, err := e.hosts.present(objects["proxy-a"])
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left on the host: %s", objectList(left))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		e.tl.add("delete proxy-a", "Proxy deleted -> domain, overlay, NVRAM, seed gone", secs(time.Since(t0)))
		logf("  proxy-a gone from the API and the host in %ss: %s", secs(time.Since(t0)), objectList(objects["proxy-a"]))
		if left, err := e.hosts.present([]object{{hostA, "volume", baseVol}}); err != nil || len(left) == 0 {
			t.Fatalf("the shared base volume %s went with proxy-a (%v)", baseVol, err)
		}
		if err := waitFor(ctx, "BaseImage team-a/debian-12 Ready after proxy-a was deleted", 2*time.Second, 10*time.Second, func(ctx context.Context) error {
			bi := &v1alpha1.BaseImage{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "debian-12"}, bi); err != nil {
				return err
			}
			return conditionTrue("BaseImage", "team-a/debian-12", bi.GetCondition(xpv2.TypeReady))
		}); err != nil {
			t.Fatal(err)
		}
		if err := e.checkEndpoint(ctx, "team-a/proxy-b", "team-a", "proxy-b-proxy", newUnstructured(gvkProxy, "team-a", "proxy-b")); err != nil {
			t.Fatal(err)
		}
		logf("  base volume %s still present, proxy-b still answers", baseVol)
	})

	step("delete-all", func(t *testing.T) {
		logf("4/5 delete Proxy team-a/proxy-b and BaseImage team-a/debian-12; offboard team-b by deleting its namespace")
		t0 := time.Now()
		if err := e.c.Delete(ctx, newUnstructured(gvkProxy, "team-a", "proxy-b")); err != nil {
			t.Fatal(err)
		}
		// Offboarding a team: its namespace goes, and with it its claim, VM, seed and image.
		if err := e.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "proxy-b's and the claim's managed resources to be deleted", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
			left, err := e.managedLeft(ctx, e2eNamespaces, kvmDomains, seedVolumes)
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left: %s", strings.Join(left, ", "))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// The platform team removes the shared image once no Proxy uses it.
		if err := e.c.Delete(ctx, &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "debian-12"}}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "every BaseImage of team-a and team-b to be deleted", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
			left, err := e.managedLeft(ctx, e2eNamespaces, baseImages)
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left: %s", strings.Join(left, ", "))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "the test bed to hold nothing of team-a and team-b", 2*time.Second, e.cfg.DeleteTimeout, func(context.Context) error {
			left, err := e.hosts.leftovers(e2eNamespaces, keep)
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left on the test bed: %s", objectList(left))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"proxy-b", "proxy-c"} {
			if left, err := e.hosts.present(objects[p]); err != nil || len(left) > 0 {
				t.Fatalf("objects of %s left on the host: %s %v", p, objectList(left), err)
			}
		}
		if err := waitFor(ctx, "namespace team-b to be gone", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
			ns := &corev1.Namespace{}
			if err := e.c.Get(ctx, client.ObjectKey{Name: "team-b"}, ns); !kerrors.IsNotFound(err) {
				return fmt.Errorf("still there (phase %s, %v)", ns.Status.Phase, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		logf("  namespace team-b deleted: its claim, VM, seed and image are gone from the host")
		e.tl.add("delete proxy-b, BaseImage, ns team-b", "deleted -> nothing of team-a/team-b left on the host", secs(time.Since(t0)))
		logf("  nothing of team-a or team-b left on the host (domains, overlays, seeds, NVRAM, base volumes)")
		if left := e.xrsLeft(ctx, e2eNamespaces); len(left) > 0 {
			t.Fatalf("XRs or claims left: %s", strings.Join(left, ", "))
		}
	})

	step("timeline", func(t *testing.T) {
		logf("5/5 timeline (seconds after each Proxy was created; TCG guests, %d vCPU, %d MiB, one at a time; provider --poll=%s)", e.cfg.VCPUs, e.cfg.MemMiB, e.cfg.Poll)
		e.tl.print(os.Stdout)
	})
}

// finish runs when a test ends: on failure the diagnostics and, unless KEEP_ON_FAILURE=1,
// deleting what is left through Kubernetes (the provider cleans the host); the timeline is
// written to logs/timeline.tsv either way.
func (e *env) finish(t *testing.T, namespaces []string, keep map[string]bool) {
	ctx := context.Background()
	if err := e.tl.write(filepath.Join(e.cfg.Logs, "timeline.tsv")); err != nil {
		warnf("timeline: %v", err)
	}
	if t.Failed() {
		e.diagnose(ctx, namespaces)
		if len(e.tl.records) > 0 {
			fmt.Fprintln(os.Stderr, "----- timeline so far")
			e.tl.print(os.Stderr)
		}
		if e.cfg.KeepOnFailure {
			warnf("KEEP_ON_FAILURE=1: Proxies and VMs left as they are; make demo-down removes them")
			return
		}
	}
	if len(e.xrsLeft(ctx, namespaces)) == 0 && !e.managedIn(ctx, namespaces) {
		return
	}
	if err := e.teardown(ctx, namespaces, keep, 240*time.Second, 240*time.Second); err != nil {
		warnf("%v", err)
	}
}

// baseline runs cluster/testbed/boot-check.sh (the same image, vCPUs and memory, booted with
// plain virsh to a squid 204) and records its timeline.
// lanBaseline is the baseline on the LAN: TestGuestOnHostBridge of test/lan (built
// by the preflight as lan.test) uploads the image and a seed to host-a over SSH, defines and
// starts the guest on host-a's bridge with virsh, and curls through its squid from node. Its
// TIMING line gives the figures.
func (e *env) lanBaseline(ctx context.Context) error {
	logPath := filepath.Join(e.cfg.Logs, "boot-check.log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	bin := filepath.Join(getenv("E2E_OUT", filepath.Join(e.cfg.Repo, "_output", "e2e")), "lan.test")
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestGuestOnHostBridge$", "-test.v", "-test.count=1",
		"-test.timeout", fmt.Sprintf("%ds", int(e.cfg.GuestTimeout.Seconds())+120))
	cmd.Dir = filepath.Join(e.cfg.Repo, "test", "lan")
	cmd.Env = append(os.Environ(), "TESTBED_IMAGE="+e.cfg.Image)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	_ = f.Close()
	out, _ := os.ReadFile(logPath)
	if err != nil {
		return fmt.Errorf("the plain-virsh boot on host-a's bridge failed (%v): the LAN test bed or the image is broken, not the provider; %s:\n%s", err, logPath, tail(logPath, 30))
	}
	m := regexp.MustCompile(`TIMING lan guest on \S+: upload\+overlay ([0-9.]+)s, start->lease ([0-9.]+)s, start->204 ([0-9.]+)s`).FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("lan.test printed no TIMING line; see %s", logPath)
	}
	fmt.Printf("  plain virsh on host-a's bridge: upload+overlay %ss, start->lease %ss, start->204 %ss\n", m[1], m[2], m[3])
	e.tl.column(baselineSubject)
	e.tl.baseline = m[3]
	e.tl.add(baselineSubject, evStarted, "0.0")
	e.tl.add(baselineSubject, evAddress, m[2])
	e.tl.add(baselineSubject, evDomainReady, m[3])
	e.tl.add(baselineSubject, evProxyReady, m[3])
	e.tl.add("baseline", "plain virsh: upload and overlay over SSH before start", m[1])
	return nil
}

func (e *env) baseline(ctx context.Context) error {
	logPath := filepath.Join(e.cfg.Logs, "boot-check.log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.Repo, "cluster", "testbed", "boot-check.sh"))
	cmd.Env = append(os.Environ(), fmt.Sprintf("VCPUS=%d", e.cfg.VCPUs), fmt.Sprintf("MEM_MB=%d", e.cfg.MemMiB),
		fmt.Sprintf("TIMEOUT=%d", int(e.cfg.GuestTimeout.Seconds())), "IMAGE="+e.cfg.Image)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	_ = f.Close()
	out, _ := os.ReadFile(logPath)
	if err != nil {
		return fmt.Errorf("the plain-virsh boot check failed (%v): the test bed or the image is broken, not the provider; %s:\n%s", err, logPath, tail(logPath, 30))
	}
	show := regexp.MustCompile(`running|IP|204|timeline|setup`)
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if show.MatchString(l) {
			fmt.Println("  " + l)
		}
	}
	// boot-check's last lines: "timeline (s from virsh start): running=1.0 lease-ip=41.5 ...",
	// "setup before start: 2.1s (...)", "start->204 = 79.5s".
	last := func(re string) string {
		m := regexp.MustCompile(re).FindAllStringSubmatch(string(out), -1)
		if len(m) == 0 {
			return "n/a"
		}
		return m[len(m)-1][1]
	}
	base := last(`start->204 = ([0-9.]+)s`)
	if base == "n/a" {
		return fmt.Errorf("boot-check.sh printed no start->204 line; see %s", logPath)
	}
	e.tl.column(baselineSubject)
	e.tl.baseline = base
	e.tl.add(baselineSubject, evStarted, "0.0")
	e.tl.add(baselineSubject, evAddress, last(`timeline.* lease-ip=([0-9.]+)`))
	e.tl.add(baselineSubject, evDomainReady, base)
	e.tl.add(baselineSubject, evProxyReady, base)
	e.tl.add("baseline", "plain virsh: upload, overlay, seed, define before start", last(`setup before start: ([0-9.]+)s`))
	return nil
}

// xrsLeft lists the Proxies and ProxyClaims of the namespaces and every XProxy.
func (e *env) xrsLeft(ctx context.Context, namespaces []string) []string {
	var out []string
	for _, gvk := range []schema.GroupVersionKind{gvkProxy, gvkProxyClaim, gvkXProxy} {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if gvk == gvkXProxy { // cluster-scoped
			if e.c.List(ctx, l) == nil {
				out = append(out, names(l)...)
			}
			continue
		}
		for _, ns := range namespaces {
			if e.c.List(ctx, l, client.InNamespace(ns)) == nil {
				out = append(out, names(l)...)
			}
		}
	}
	return out
}

// managedIn: a managed resource of ours is in one of the namespaces.
func (e *env) managedIn(ctx context.Context, namespaces []string) bool {
	left, err := e.managedLeft(ctx, namespaces, kvmDomains, seedVolumes, baseImages)
	return err != nil || len(left) > 0
}

// teardown deletes the Proxies, claims and then the BaseImages of the namespaces through
// Kubernetes, waits up to mrTimeout for the managed resources to go and up to hostTimeout for
// the host to hold nothing of them (and no base volume but those in keep).
func (e *env) teardown(ctx context.Context, namespaces []string, keep map[string]bool, mrTimeout, hostTimeout time.Duration) error {
	if !apiReady(ctx, e.c) {
		logf("the API server does not answer: skipping the deletion through Kubernetes")
		return nil
	}
	if !e.providerAlive(ctx) {
		logf("the provider does not answer: skipping the deletion through Kubernetes")
		return nil
	}
	logf("deleting the Proxies, claims and BaseImages of %s through Kubernetes", strings.Join(namespaces, ", "))
	for _, ns := range namespaces {
		for _, gvk := range []schema.GroupVersionKind{gvkProxyClaim, gvkProxy} {
			if err := e.c.DeleteAllOf(ctx, newUnstructured(gvk, "", ""), client.InNamespace(ns)); err != nil && !kerrors.IsNotFound(err) {
				logf("  deleting the %ss of %s: %v", gvk.Kind, ns, err)
			}
		}
	}
	var errs []error
	if err := waitFor(ctx, "their managed resources to be deleted", 2*time.Second, mrTimeout, func(ctx context.Context) error {
		left, err := e.managedLeft(ctx, namespaces, kvmDomains, seedVolumes)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range namespaces {
		if err := e.c.DeleteAllOf(ctx, &v1alpha1.BaseImage{}, client.InNamespace(ns)); err != nil && !kerrors.IsNotFound(err) {
			logf("  deleting the BaseImages of %s: %v", ns, err)
		}
	}
	if err := waitFor(ctx, "the test bed to hold nothing of "+strings.Join(namespaces, ", "), 2*time.Second, hostTimeout, func(context.Context) error {
		left, err := e.hosts.leftovers(namespaces, keep)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", objectList(left))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// teardownMain is -e2e.teardown (make demo-down): delete through Kubernetes and wait.
func teardownMain(namespaces []string) int {
	ctx := context.Background()
	e, err := newEnv()
	if err != nil {
		warnf("%v", err)
		return 1
	}
	defer e.hosts.close()
	keep := map[string]bool{}
	if err := e.teardown(ctx, namespaces, keep, e.cfg.DeleteTimeout, 300*time.Second); err != nil {
		warnf("%v", err)
		return 1
	}
	return 0
}
