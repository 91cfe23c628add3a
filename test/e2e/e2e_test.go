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
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// e2eNamespaces are the namespaces TestE2E works in: team-a (two Proxies sharing the
// platform's BaseImage), team-b (a Proxy caching its own image) and team-c (a ProxyClaim).
var e2eNamespaces = []string{"team-a", "team-b", "team-c"}

// An example is a file of examples/ that TestE2E applies as users copy it, with only the
// addresses, names and digests of this test bed put in: each From must occur in the file
// (an edited example that no longer holds it fails the test instead of testing something
// else), and is replaced by the value of To (a key of env.values()).
type example struct {
	File  string
	Subst [][2]string
}

// The example files' own addresses, replaced by the test bed's.
const (
	exImageURL = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
	exSHA256   = "0000000000000000000000000000000000000000000000000000000000000000"
	exGuestNet = "192.168.122.0/24"
	exProbeURL = "http://192.168.122.1:8204/"
	// exAllowedDomains is the allowedDomains of own-image.yaml's Proxy and shared-image.yaml's
	// egress-b: its probe's origin must be among them.
	exAllowedDomains = "allowedDomains: [.debian.org, 192.168.122.1]"
	// exSharedImage is team-a's example, which the README's quickstart applies.
	exSharedImage = "examples/proxy/shared-image.yaml"
)

// proxyExamples are examples/proxy, every file of it: the RBAC a platform adds for
// Crossplane, team-a's shared image with two Proxies (on the ClusterProviderConfig "default",
// host A), team-b's Proxy with its own image (its host: put on host B, so that both hosts
// serve) and team-c's ProxyClaim. Namespaces and team-c's BaseImage are the platform's part
// (cluster/e2e/manifests/teams.yaml).
func proxyExamples(hostB string) []example {
	return []example{
		{File: "examples/proxy/crossplane-rbac.yaml"},
		{File: exSharedImage, Subst: [][2]string{
			{exImageURL, "IMAGE_URL_A"}, {exSHA256, "IMAGE_SHA256"}, {exGuestNet, "GUEST_CIDR"}, {exProbeURL, "PROBE_URL"},
			{exAllowedDomains, "ALLOWED_DOMAINS"},
		}},
		{File: "examples/proxy/own-image.yaml", Subst: [][2]string{
			{exImageURL, "IMAGE_URL_C"}, {exSHA256, "IMAGE_SHA256"}, {exGuestNet, "GUEST_CIDR"}, {exProbeURL, "PROBE_URL"},
			{"host: default", "host: " + hostB}, {exAllowedDomains, "ALLOWED_DOMAINS"},
		}},
		{File: "examples/proxy/proxyclaim.yaml", Subst: [][2]string{{exProbeURL, "PROBE_URL"}}},
	}
}

// applyExample applies one example file with its substitutions.
func (e *env) applyExample(ctx context.Context, ex example, vals map[string]string) error {
	b, err := os.ReadFile(filepath.Join(e.cfg.Repo, ex.File))
	if err != nil {
		return err
	}
	text, err := ex.substitute(string(b), vals)
	if err != nil {
		return err
	}
	return e.applyText(ctx, ex.File, text)
}

// substitute puts the test bed's values into text, the example file's content.
func (ex example) substitute(text string, vals map[string]string) (string, error) {
	for _, s := range ex.Subst {
		if !strings.Contains(text, s[0]) {
			return "", fmt.Errorf("%s no longer contains %q: update the e2e's substitutions with the example", ex.File, s[0])
		}
		to, ok := vals[s[1]]
		if !ok {
			to = s[1] // a literal, as in "host: host-b"
		}
		text = strings.ReplaceAll(text, s[0], to)
	}
	return text, nil
}

// proxyCase is one Proxy (or claim) of the examples and what TestE2E checks of it.
type proxyCase struct {
	ns, name string // the Proxy's or the claim's namespace and name
	claim    bool
	host     string // the ClusterProviderConfig its VM must be on
	image    string // the BaseImage it boots: the namespace's shared one, or "" for its own
}

func (p proxyCase) label() string {
	if p.claim {
		return p.ns + "/" + p.name + " (claim)"
	}
	return p.ns + "/" + p.name
}

func (p proxyCase) object() *unstructured.Unstructured {
	if p.claim {
		return newUnstructured(gvkProxyClaim, p.ns, p.name)
	}
	return newUnstructured(gvkProxy, p.ns, p.name)
}

// TestE2E is make e2e after the bring-up (docs/e2e.md, "What make e2e checks"): the
// installation, the plain-virsh baseline (unless SKIP_BASELINE=1), then the files of
// examples/proxy as users copy them: four guests booted at once, each Ready with its Secret,
// Service and EndpointSlice and a 204 through it, on the host it asked for; team-a's
// application pods (examples/app) through the Services' cluster DNS names; their deletion
// down to nothing on either host; the timeline. The steps are subtests that run in order;
// each needs the ones before it (except baseline), and a failed one ends the test.
func TestE2E(t *testing.T) {
	e := requireEnv(t, ModeE2E)
	ctx := context.Background()
	// Base image volumes that were there before (a running demo's): not this test's.
	keep, err := e.hosts.BaseVolumes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.finish(t, e2eNamespaces, keep) })
	// The README's quickstart runs as the install path (steps 1 to 3) and as team-a's first
	// Proxy and application Pod (step 4, with the examples).
	if e.qs, err = e.startQuickstart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.qs.close)
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	hostA, hostB := e.cfg.hostNames()
	cases := []proxyCase{
		{ns: "team-a", name: "egress-a", host: hostA, image: "debian-12-squid"},
		{ns: "team-a", name: "egress-b", host: hostA, image: "debian-12-squid"},
		{ns: "team-b", name: "build-cache", host: hostB},
		{ns: "team-c", name: "egress", claim: true, host: hostA, image: "debian-12-squid"},
	}
	objects := map[string][]object{} // what each Proxy's VM is made of on its host
	xrs := map[string]string{}       // a claim's XProxy

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
		logf("2/5 baseline: the guest image booted with plain virsh on host-a's bridge to a squid 204 from node (test/lan, 2 vCPU, 1024 MiB)")
		if err := e.lanBaseline(ctx); err != nil {
			t.Fatal(err)
		}
	})

	// The examples boot at once: four independent guests, each followed on its own timeline
	// from the moment the files were applied.
	step("examples", func(t *testing.T) {
		vals := e.values()
		logf("3/5 the platform prepares team-a, team-b and team-c; then examples/proxy as users copy them (%s on %s, build-cache on %s)",
			"team-a's and team-c's Proxies", hostA, hostB)
		if err := e.apply(ctx, "teams.yaml", vals); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		// team-a's namespace, shared image and Proxies are the README quickstart's step 4, which
		// then waits for egress-a and runs the application Pod; the other examples boot beside it.
		qsDone := make(chan error, 1)
		for _, ex := range proxyExamples(hostB) {
			if ex.File == exSharedImage {
				go func() { qsDone <- e.qs.run(ctx, 4, e.qs.dir, e.cfg.GuestTimeout+5*time.Minute) }()
				continue
			}
			if err := e.applyExample(ctx, ex, vals); err != nil {
				t.Fatal(err)
			}
		}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		for _, pc := range cases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := e.follow(ctx, pc, t0, func(xr string) { mu.Lock(); xrs[pc.name] = xr; mu.Unlock() }); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(append(errs, <-qsDone)...); err != nil {
			t.Fatal(err)
		}
		logf("  all %d Ready %ss after the examples were applied", len(cases), secs(time.Since(t0)))
		// What the quickstart's Pod printed: the status of a GET through egress-a's squid.
		if err := e.checkAppPod(ctx, quickstartPod(e.probeURL), t0); err != nil {
			t.Fatal(err)
		}
		e.qs.close()
	})

	for _, pc := range cases {
		step(pc.name, func(t *testing.T) {
			objs, err := e.checkProxy(ctx, pc)
			if err != nil {
				t.Fatal(err)
			}
			objects[pc.name] = objs
		})
	}

	step("claim-secret", func(t *testing.T) {
		// The claim's connection Secret (writeConnectionSecretToRef) carries the same url as
		// the Secret composed in its namespace.
		var conn map[string][]byte
		if err := waitFor(ctx, "the claim's connection Secret team-c/egress-conn", 2*time.Second, 120*time.Second, func(ctx context.Context) (err error) {
			conn, err = e.secretData(ctx, "team-c", "egress-conn")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		own, err := e.secretData(ctx, "team-c", "egress-proxy")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(conn["url"], own["url"]) {
			t.Fatalf("ProxyClaim team-c/egress: the connection Secret's url %q differs from egress-proxy's %q", conn["url"], own["url"])
		}
		logf("  team-c/egress (claim) -> XProxy %s: connection Secret team-c/egress-conn has the same url", xrs["egress"])
	})

	// team-c's BaseImage came over HTTPS from the server whose CA reached the provider only
	// through its DeploymentRuntimeConfig; the same image from a server of a CA the provider
	// was never given fails on the certificate, and says so.
	step("https-ca", func(t *testing.T) {
		if err := e.checkHTTPSImages(ctx); err != nil {
			t.Fatal(err)
		}
	})

	// The application pod's path: pods of team-a with HTTP_PROXY from the Proxies' Secrets,
	// through the Services' cluster DNS names and cluster IPs to the guests' squid.
	step("app-pods", func(t *testing.T) {
		logf("  team-a's application pods (examples/app/proxy-client.yaml): HTTP_PROXY from the Proxy's Secret, its Service by cluster DNS")
		for _, p := range teamAPods(e.probeURL) {
			if err := e.runAppPod(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	})

	// Three changes to running Proxies that share nothing but host-a, side by side: the orphan
	// sweep (it waits on the host status reads and boots nothing), the roll-out of egress-b (one
	// boot on host-a) and replicas of team-b/build-cache (on hostB, its own image: two replicas,
	// the second on host-a, then `kubectl scale` back to one; one boot).
	step("changes", func(t *testing.T) {
		t.Run("orphans", func(t *testing.T) {
			t.Parallel()
			logf("  the orphan sweep: team-a's KVMDomain and SeedVolume of their own deleted past their finalizers, reported, then removed")
			if err := e.checkOrphans(ctx, hostA); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("rollout-egress-b", func(t *testing.T) {
			t.Parallel()
			logf("  edit a running Proxy (team-a/egress-b's allowedCIDRs): a new VM replaces it once Ready, no request fails")
			if err := e.checkRollout(ctx, cases[1], objects[cases[1].name]); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("replicas-build-cache", func(t *testing.T) {
			t.Parallel()
			logf("  scale a running Proxy (team-b/build-cache): spec.replicas 2 puts a second VM on the other host; the scale subresource back to 1 removes it")
			if err := e.checkReplicas(ctx, cases[2], hostB, hostA); err != nil {
				t.Fatal(err)
			}
		})
	})

	var baseVol string // team-a's shared base volume
	step("delete-egress-a", func(t *testing.T) {
		logf("4/5 delete Proxy team-a/egress-a")
		bi := &v1alpha1.BaseImage{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "debian-12-squid"}, bi); err != nil {
			t.Fatal(err)
		}
		if baseVol = bi.Status.AtProvider.VolumeName; baseVol == "" {
			t.Fatal("BaseImage team-a/debian-12-squid reports no volume")
		}
		t0 := time.Now()
		if err := e.deleteProxy(ctx, cases[0], objects[cases[0].name]); err != nil {
			t.Fatal(err)
		}
		e.tl.add("delete egress-a", "Proxy deleted -> domain, overlay, NVRAM, seed gone", secs(time.Since(t0)))
		if left, err := e.hosts.Present([]object{{Host: hostA, Kind: "volume", Name: baseVol}}); err != nil || len(left) == 0 {
			t.Fatalf("the shared base volume %s went with egress-a (%v)", baseVol, err)
		}
		if err := waitFor(ctx, "BaseImage team-a/debian-12-squid Ready after egress-a was deleted", 2*time.Second, 10*time.Second, func(ctx context.Context) error {
			bi := &v1alpha1.BaseImage{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "debian-12-squid"}, bi); err != nil {
				return err
			}
			return conditionTrue("BaseImage", "team-a/debian-12-squid", bi.GetCondition(xpv2.TypeReady))
		}); err != nil {
			t.Fatal(err)
		}
		if err := e.checkEndpoint(ctx, "team-a/egress-b", "team-a", "egress-b-proxy", newUnstructured(gvkProxy, "team-a", "egress-b")); err != nil {
			t.Fatal(err)
		}
		logf("  base volume %s still present, egress-b still answers", baseVol)
	})

	step("delete-all", func(t *testing.T) {
		logf("4/5 delete Proxy team-a/egress-b and BaseImage team-a/debian-12-squid; offboard team-b and team-c by deleting their namespaces")
		t0 := time.Now()
		if err := e.c.Delete(ctx, newUnstructured(gvkProxy, "team-a", "egress-b")); err != nil {
			t.Fatal(err)
		}
		// Offboarding a team: its namespace goes, and with it its Proxy or claim, VM, seed
		// and image.
		for _, ns := range []string{"team-b", "team-c"} {
			if err := e.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := waitFor(ctx, "the Proxies' managed resources to be deleted", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
			left, err := e.managedLeft(ctx, e2eNamespaces, kvmDomains, seedVolumes)
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left: %s", strings.Join(left, ", "))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// The platform team removes the shared image once no Proxy uses it.
		if err := e.c.Delete(ctx, &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "debian-12-squid"}}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "every BaseImage of the teams to be deleted", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
			left, err := e.managedLeft(ctx, e2eNamespaces, baseImages)
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left: %s", strings.Join(left, ", "))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "the test bed to hold nothing of the teams", 2*time.Second, e.cfg.DeleteTimeout, func(context.Context) error {
			left, err := e.hosts.Leftovers(e2eNamespaces, keep)
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("left on the test bed: %s", objectList(left))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, pc := range cases[1:] {
			if left, err := e.hosts.Present(objects[pc.name]); err != nil || len(left) > 0 {
				t.Fatalf("objects of %s left on the host: %s %v", pc.label(), objectList(left), err)
			}
		}
		for _, ns := range []string{"team-b", "team-c"} {
			if err := waitFor(ctx, "namespace "+ns+" to be gone", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
				n := &corev1.Namespace{}
				if err := e.c.Get(ctx, client.ObjectKey{Name: ns}, n); !kerrors.IsNotFound(err) {
					return fmt.Errorf("still there (phase %s, %v)", n.Status.Phase, err)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		logf("  namespaces team-b and team-c deleted: their Proxy, claim, VMs, seeds and images are gone from the hosts")
		e.tl.add("delete egress-b, BaseImage, ns team-b, team-c", "deleted -> nothing of the teams left on the hosts", secs(time.Since(t0)))
		logf("  nothing of team-a, team-b or team-c left on the hosts (domains, overlays, seeds, NVRAM, base volumes)")
		if left := e.xrsLeft(ctx, e2eNamespaces); len(left) > 0 {
			t.Fatalf("XRs or claims left: %s", strings.Join(left, ", "))
		}
	})

	step("timeline", func(t *testing.T) {
		logf("5/5 timeline (seconds after the examples were applied; TCG guests booting at once; provider --poll=%s)", e.cfg.Poll)
		e.tl.print(os.Stdout)
	})
}

// follow waits until the Proxy or claim of pc is Ready, recording its timeline from t0; for
// a claim it first waits for its XProxy and hands its name to gotXR.
func (e *env) follow(ctx context.Context, pc proxyCase, t0 time.Time, gotXR func(string)) error {
	obj, composite := pc.object(), pc.name
	if pc.claim {
		if err := waitFor(ctx, "ProxyClaim "+pc.ns+"/"+pc.name+" to get its XProxy", 2*time.Second, 120*time.Second, func(ctx context.Context) error {
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			composite, _, _ = unstructured.NestedString(obj.Object, "spec", "resourceRef", "name")
			if composite == "" {
				return errors.New("no spec.resourceRef yet")
			}
			return nil
		}); err != nil {
			return err
		}
		logf("  %s -> XProxy %s", pc.label(), composite)
		gotXR(composite)
	}
	return e.watch(ctx, obj, composite, pc.label(), t0)
}

// checkProxy checks a Ready Proxy (or claim) of the examples: its Secret, Service and
// EndpointSlice and a 204 through it; the image it boots (the namespace's shared BaseImage,
// or one it composed of its own); its VM on the host it asked for and on no other. It returns
// what the VM is made of on the host.
func (e *env) checkProxy(ctx context.Context, pc proxyCase) ([]object, error) {
	obj := pc.object()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	// A claim's composed resources are named after the claim, not its XProxy.
	if err := e.checkEndpoint(ctx, pc.label(), pc.ns, pc.name+"-proxy", obj); err != nil {
		return nil, err
	}
	d := &v1alpha1.KVMDomain{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: pc.ns, Name: pc.name}, d); err != nil {
		return nil, err
	}
	own := &v1alpha1.BaseImageList{}
	if err := e.c.List(ctx, own, client.InNamespace(pc.ns)); err != nil {
		return nil, err
	}
	image := pc.image
	ref := d.Spec.ForProvider.BaseImageRef
	switch {
	case pc.image != "" && (ref == nil || ref.Name != pc.image):
		return nil, fmt.Errorf("KVMDomain %s does not boot the shared BaseImage %s (baseImageRef %+v)", pc.label(), pc.image, ref)
	case pc.image == "" && (ref == nil || ref.Name == ""):
		return nil, fmt.Errorf("KVMDomain %s names no BaseImage", pc.label())
	case pc.image == "":
		image = ref.Name
		composed := false
		for i := range own.Items {
			if own.Items[i].Name == image && own.Items[i].GetLabels()["crossplane.io/composite"] != "" {
				composed = true
			}
		}
		if !composed {
			return nil, fmt.Errorf("%s boots BaseImage %s, which it did not compose; it should cache its own image", pc.label(), image)
		}
	}
	if err := e.checkPlacement(ctx, pc.ns, pc.name, image, pc.host); err != nil {
		return nil, err
	}
	return e.hosts.DomainObjects(pc.ns + "_" + pc.name)
}

// deleteProxy deletes a Proxy and waits until it, its composed resources and its VM's objects
// on the host are gone.
func (e *env) deleteProxy(ctx context.Context, pc proxyCase, objs []object) error {
	xr := pc.object()
	if err := e.c.Delete(ctx, xr); err != nil {
		return err
	}
	if err := waitFor(ctx, "Proxy "+pc.label()+" to be deleted", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), pc.object())
		if kerrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, pc.label()+"'s managed resources to be deleted", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
		left, err := e.composedLeft(ctx, pc.ns, pc.name)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("still in the API: %s", strings.Join(left, ", "))
		}
		return err
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, pc.label()+"'s domain, overlay, seed and NVRAM to go", 2*time.Second, e.cfg.DeleteTimeout, func(context.Context) error {
		left, err := e.hosts.Present(objs)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left on the host: %s", objectList(left))
		}
		return err
	}); err != nil {
		return err
	}
	logf("  %s gone from the API and the host: %s", pc.label(), objectList(objs))
	return nil
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
	bin := filepath.Join(e.cfg.Out, "lan.test")
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

// requireEnv skips the test (fails it when CI is set) unless the run's configuration names
// the test's mode, and the test runs inside the node's network namespace with the node up;
// then it connects.
func requireEnv(t *testing.T, mode string) *env {
	t.Helper()
	cfg := loadRunConfig(t)
	if cfg.Mode != mode {
		// Not a missing part: the test belongs to another make target.
		t.Skipf("make %s runs this test; the configuration is make %s's", runTarget(mode), runTarget(cfg.Mode))
	}
	why := ""
	switch {
	case !insideNetns(cfg.Netns):
		why = "this process is not inside network namespace " + cfg.Netns
	case len(cfg.Hosts) == 0:
		why = "the configuration names no LAN host (LAN_HOSTS)"
	}
	if _, err := os.Stat(cfg.Kubeconfig); why == "" && err != nil {
		why = "no " + cfg.Kubeconfig + " (the node is not up)"
	}
	if why != "" {
		notRun(t, why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := newEnv(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The README quickstart's part of install (quickstart_steps_test.go).
	e.installPackages, e.installHost = e.ensurePackages, e.quickstartHost
	t.Cleanup(e.hosts.Close)
	if !apiReady(ctx, e.c) {
		t.Fatalf("the API server of %s does not answer", cfg.Kubeconfig)
	}
	return e
}

// notRun skips the test with a loud reason, or fails it when CI is set.
func notRun(t *testing.T, why string) {
	t.Helper()
	msg := "E2E TEST NOT RUN: " + why + "; make e2e, make bench-latency and make demo (cluster/e2e) bring the node up and run these tests inside its namespace"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// runTarget is the make target of a mode.
func runTarget(mode string) string {
	if mode == ModeBench {
		return "bench-latency"
	}
	return mode
}
