package crossplane

import (
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from what crossplane render prints now")

// Paths relative to the repository root, where crossplane render runs.
const (
	xrdV2             = "package/configuration/xrd.yaml"
	xrdLegacy         = "package/configuration/xrd-legacy.yaml"
	compositionV2     = "package/configuration/composition.yaml"
	compositionLegacy = "package/configuration/composition-legacy.yaml"
	proxyMinimal      = "internal/function/testdata/proxy-minimal.yaml"
	proxyFull         = "internal/function/testdata/proxy-full.yaml"
	proxyClaim        = "internal/function/testdata/proxyclaim.yaml"
	testdata          = "test/crossplane/testdata"
	// hosts are the required resources of every render: the ClusterProviderConfigs and the
	// shared BaseImage a Proxy without spec.host is placed by.
	hosts = testdata + "/hosts.yaml"
)

// renderCase is one `crossplane render` run. Its output is compared with
// testdata/golden/<name>.yaml; check asserts what matters in it on top of that.
type renderCase struct {
	name        string
	xr          string // relative to the repository root; "" for the XProxy made from proxyClaim
	composition string
	xrd         string
	observed    string // --observed-resources, optional
	fullXR      bool   // --include-full-xr: print the XR's spec as defaulted by --xrd
	wantFail    bool   // render exits non-zero (a fatal result)
	check       func(t *testing.T, out rendered)
	xrYAML      string // the XR itself, when xr is "" and this is set (policy_test.go)
	policy      string // the compose-proxy step's input instead of the Composition's own
	required    string // --required-resources: YAML of the objects functions may ask for
}

// TestRender renders the Proxy Compositions with function-kvm-proxy and function-auto-ready
// running as local processes, as Crossplane would compose them.
func TestRender(t *testing.T) {
	cli := crossplaneCLI(t)
	ar := autoReady(t)
	dir := t.TempDir()
	targets := map[string]string{
		fnKVMProxy:  startFunction(t, fnKVMProxy, buildFunction(t, dir)),
		fnAutoReady: startFunction(t, fnAutoReady, ar),
	}
	functions := writeFunctions(t, dir, targets)
	legacyXR := xproxyFromClaim(t, dir)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}

	cases := []renderCase{
		{
			name: "proxy-minimal", xr: proxyMinimal, composition: compositionV2, xrd: xrdV2, fullXR: true,
			check: func(t *testing.T, out rendered) {
				out.wantDefaults(t)
				// Placed on "default": "full" has no room, "maintenance" is cordoned, and the
				// shared BaseImage is on "default".
				out.wantStatus(t, map[string]any{"phase": "Creating", "message": "", "secretName": "egress-proxy", "host": "default"})
				out.wantReady(t, "False", "Creating")
				out.wantComposed(t, "SeedVolume/seed/egress-seed", "KVMDomain/domain/egress", "Service/service/egress-proxy")
				d := out.composed(t, "domain")
				wantField(t, d, "spec.forProvider.baseImageRef.name", "debian-12")
				wantField(t, d, "spec.forProvider.seedVolumeRef.name", "egress-seed")
				wantField(t, d, "spec.forProvider.readinessProbe.httpProxy.port", int64(3128))
				wantField(t, d, "spec.forProvider.readinessProbe.httpProxy.url", "http://192.168.122.1:8204/")
				wantField(t, d, "spec.forProvider.readinessProbe.httpProxy.expectedStatus", int64(204))
				wantField(t, d, "spec.forProvider.vcpu", int64(1))        // XRD default
				wantField(t, d, "spec.forProvider.memoryMiB", int64(512)) // XRD default
				wantField(t, d, "spec.providerConfigRef.name", "default")
				out.wantUserData(t, "#cloud-config", "http_port 3128", "acl proxy_clients src 10.0.0.0/8", "visible_hostname egress")
			},
		},
		{
			name: "proxy-full", xr: proxyFull, composition: compositionV2, xrd: xrdV2,
			check: func(t *testing.T, out rendered) {
				out.wantComposed(t, "BaseImage/base-image/build-cache-image", "SeedVolume/seed/build-cache-seed", "KVMDomain/domain/build-cache", "Service/service/build-cache-proxy")
				bi := out.composed(t, "base-image")
				wantField(t, bi, "spec.forProvider.source.url", "http://192.168.122.1:8000/debian-12-testbed.qcow2")
				wantField(t, bi, "spec.forProvider.source.sha256", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
				d := out.composed(t, "domain")
				wantField(t, d, "spec.forProvider.baseImageRef.name", "build-cache-image")
				wantField(t, d, "spec.forProvider.vcpu", int64(2))
				wantField(t, d, "spec.forProvider.diskSizeGiB", int64(8))
				wantField(t, d, "spec.forProvider.readinessProbe.httpProxy.port", int64(8080))
				wantField(t, d, "spec.providerConfigRef.name", "lab")
				out.wantUserData(t, "http_port 8080", "acl proxy_clients src 10.42.0.0/16", "http_access deny blocked", "ops@example.org")
			},
		},
		{
			name: "xproxy-from-claim", composition: compositionLegacy, xrd: xrdLegacy, fullXR: true,
			check: func(t *testing.T, out rendered) {
				out.wantDefaults(t)
				out.wantStatus(t, map[string]any{"phase": "Creating", "message": "", "secretName": "egress-proxy", "host": "default"})
				out.wantComposed(t, "SeedVolume/seed/egress-seed", "KVMDomain/domain/egress", "Service/service/egress-proxy")
				for _, o := range out.objects[1:] {
					if o.GetKind() != "Result" && o.GetNamespace() != "team-c" {
						t.Errorf("%s %s is composed into namespace %q, want the claim's namespace team-c", o.GetKind(), o.GetName(), o.GetNamespace())
					}
				}
			},
		},
		{
			name: "proxy-booting", xr: proxyMinimal, composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-booting.yaml",
			check: func(t *testing.T, out rendered) {
				out.wantStatus(t, map[string]any{"phase": "Booting", "message": "running; waiting for the guest's IPv4 address", "secretName": "egress-proxy", "host": "default"})
				out.wantReady(t, "False", "Creating")
				out.wantComposed(t, "SeedVolume/seed/egress-seed", "KVMDomain/domain/egress", "Service/service/egress-proxy")
			},
		},
		{
			name: "proxy-ready", xr: proxyMinimal, composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-ready.yaml",
			check: func(t *testing.T, out rendered) {
				out.wantStatus(t, map[string]any{
					"phase": "Ready", "message": "", "secretName": "egress-proxy", "host": "default",
					"ip": "192.168.122.57", "url": "http://egress-proxy.team-a.svc:3128",
				})
				out.wantReady(t, "True", "Available")
				out.wantComposed(t, "SeedVolume/seed/egress-seed", "KVMDomain/domain/egress", "Service/service/egress-proxy", "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")
				data, _, _ := unstructured.NestedStringMap(out.composed(t, "secret").Object, "data")
				got := map[string]string{}
				for k, v := range data {
					b, err := base64.StdEncoding.DecodeString(v)
					if err != nil {
						t.Errorf("Secret key %s is not base64: %v", k, err)
					}
					got[k] = string(b)
				}
				want := map[string]string{"url": "http://egress-proxy.team-a.svc:3128", "host": "egress-proxy.team-a.svc", "ip": "192.168.122.57", "port": "3128"}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("Secret egress-proxy data (-want +got):\n%s", d)
				}
			},
		},
		// A roll-out of an edit (allowedCIDRs), from observed states internal/function's
		// TestRolloutFixtures writes: the generation 6dd82479 replaces the first one (egress).
		{
			name: "proxy-legacy-kept", xr: proxyMinimal, composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-legacy-ready.yaml",
			check: func(t *testing.T, out rendered) {
				// A Proxy composed before generations (names without an id), unchanged: kept.
				out.wantComposed(t, "SeedVolume/seed/egress-seed", "KVMDomain/domain/egress", "Service/service/egress-proxy", "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")
				out.wantReady(t, "True", "Available")
				out.wantCondition(t, "UpToDate", "True", "Current", "generation "+legacyGen+" is the spec's")
			},
		},
		{
			name: "rollout-booting", xr: testdata + "/proxy-edited.yaml", composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-rollout-booting.yaml",
			check: func(t *testing.T, out rendered) {
				out.wantComposed(t, append(rolloutBoth, "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")...)
				out.wantReady(t, "True", "Available") // the old generation serves
				out.wantServing(t, "Updating", "192.168.122.57", legacyGen)
				out.wantEndpoints(t, "192.168.122.57")
				out.wantSecretIP(t, "192.168.122.57")
				out.wantCondition(t, "UpToDate", "False", "Replacing", "spec changed (squid configuration (allowedCIDRs, allowedDomains, squidDirectives, sshAuthorizedKeys or the platform's rules)): generation "+newGen+" replaces "+legacyGen+" once Ready")
			},
		},
		{
			name: "rollout-new-ready", xr: testdata + "/proxy-edited.yaml", composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-rollout-ready.yaml",
			check: func(t *testing.T, out rendered) {
				out.wantComposed(t, append(rolloutBoth, "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")...)
				out.wantServing(t, "Updating", "192.168.122.57", legacyGen)
				out.wantEndpoints(t, "192.168.122.58") // the EndpointSlice first
				out.wantSecretIP(t, "192.168.122.57")
			},
		},
		{
			name: "rollout-endpoints-switched", xr: testdata + "/proxy-edited.yaml", composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-rollout-endpoints.yaml",
			check: func(t *testing.T, out rendered) {
				out.wantComposed(t, append(rolloutBoth, "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")...)
				out.wantServing(t, "Updating", "192.168.122.58", legacyGen)
				out.wantEndpoints(t, "192.168.122.58")
				out.wantSecretIP(t, "192.168.122.58") // then the Secret
			},
		},
		{
			name: "rollout-old-gone", xr: testdata + "/proxy-edited.yaml", composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-rollout-switched.yaml",
			check: func(t *testing.T, out rendered) {
				// The Secret is seen on the new generation: the old one drops out.
				out.wantComposed(t, "SeedVolume/seed-"+newGen+"/egress-"+newGen+"-seed", "KVMDomain/domain-"+newGen+"/egress-"+newGen,
					"Service/service/egress-proxy", "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")
				out.wantServing(t, "Ready", "192.168.122.58", newGen)
				out.wantCondition(t, "UpToDate", "True", "Current", "generation "+newGen+" is the spec's")
			},
		},
		{
			name: "rollout-failing", xr: testdata + "/proxy-edited.yaml", composition: compositionV2, xrd: xrdV2,
			observed: testdata + "/observed-rollout-failing.yaml",
			check: func(t *testing.T, out rendered) {
				// Not Ready 15 minutes after its KVMDomain was created: dropped, the old one serves.
				out.wantComposed(t, "SeedVolume/seed/egress-seed", "KVMDomain/domain/egress", "Service/service/egress-proxy", "EndpointSlice/endpoints/egress-proxy", "Secret/secret/egress-proxy")
				out.wantServing(t, "Ready", "192.168.122.57", legacyGen)
				msg := "generation " + newGen + " (changed: squid configuration (allowedCIDRs, allowedDomains, squidDirectives, sshAuthorizedKeys or the platform's rules)) was not Ready within 15m0s: readiness probe failing: HTTP 403 through 192.168.122.58:3128; generation " + legacyGen + " keeps serving; change the spec to try again"
				out.wantCondition(t, "UpToDate", "False", "ReplacementFailed", msg)
				wantField(t, out.xr(t), "status.failedGeneration.id", newGen)
			},
		},
		{
			name: "proxy-no-host-fits", xr: testdata + "/proxy-too-big.yaml", composition: compositionV2, xrd: xrdV2,
			// A platform that allows Proxies bigger than any host has room for.
			policy: "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\nlimits: {maxMemoryMiB: 204800}\n",
			check: func(t *testing.T, out rendered) {
				why := "no host fits: default: needs 102400 MiB of memory, 86016 MiB left; full: needs 102400 MiB of memory, 0 MiB left; maintenance: cordoned (spec.unschedulable)"
				out.wantStatus(t, map[string]any{"phase": "Pending", "message": why, "secretName": "huge-proxy"})
				out.wantComposed(t)
				out.wantReady(t, "False", "Creating") // not Available although nothing is composed
				out.wantCondition(t, "Placed", "False", "NoHostFits", why)
			},
		},
		{
			name: "replicas-preferred", composition: compositionV2, xrd: xrdV2, xrYAML: replicasXR,
			// Only "default" has room: Preferred anti-affinity puts replica 1 there too.
			check: func(t *testing.T, out rendered) {
				wantReplicas(t, out, "default", "default")
				out.wantCondition(t, "Placed", "True", "Placed",
					"placed on host default: 84992 MiB of memory and 231 vCPUs left there once placed (of 3 hosts considered); its 2 replicas are on default, default")
			},
		},
		{
			name: "replicas-strict", composition: compositionV2, xrd: xrdV2, xrYAML: replicasXR,
			policy: "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\nplacement: {antiAffinity: Strict}\n" +
				"destinations:\n  allowedRanges:\n  - {name: libvirt-host, cidr: 192.168.122.1/32}\n",
			// Strict: replica 1 has no host without a replica; it stays unplaced, and says why.
			check: func(t *testing.T, out rendered) {
				wantReplicas(t, out, "default")
				out.wantCondition(t, "Placed", "False", "NoHostFits",
					"1 of 2 replicas placed; replica 1: no host fits: default: holds a replica of this Proxy already (anti-affinity); full: needs 1024 MiB of memory, 0 MiB left; maintenance: cordoned (spec.unschedulable) (the platform's anti-affinity is Strict: replicas never share a host)")
			},
		},
		{
			name: "proxy-bad-cidrs", xr: testdata + "/proxy-bad.yaml", composition: compositionV2, xrd: xrdV2,
			wantFail: true,
			check: func(t *testing.T, out rendered) {
				for _, s := range []string{
					`Proxy team-a/broken`,
					`spec.allowedCIDRs[1]: "300.1.2.0/24" is not a CIDR`,
					`spec.allowedCIDRs[2]: "192.168.0.0/99" is not a CIDR`,
				} {
					if !strings.Contains(out.stderr, s) {
						t.Errorf("render's error does not say %q:\n%s", s, out.stderr)
					}
				}
				// render stops at a fatal result and prints no object at all; that the
				// function's own response holds no composed resources is tested in
				// internal/function (TestRunFunctionInvalid).
				for _, o := range out.objects {
					if o.GetKind() != "Result" {
						t.Errorf("a fatal result composed %s %s; want nothing", o.GetKind(), o.GetName())
					}
				}
			},
		},
		{
			name: "proxy-private-key", xr: testdata + "/proxy-private-key.yaml", composition: compositionV2, xrd: xrdV2,
			wantFail: true,
			check: func(t *testing.T, out rendered) {
				if want := "sshAuthorizedKeys[1]: is a private key, which is refused (its value is not repeated here)"; !strings.Contains(out.stderr, want) {
					t.Errorf("render's error does not say %q:\n%s", want, out.stderr)
				}
				// The refusal becomes a condition and an event in a cluster: the key must
				// not be in it, nor in anything rendered.
				for _, secret := range []string{"SECRET-MARKER-7f3a", "b3BlbnNzaC1rZXktdjE"} {
					if strings.Contains(out.stderr, secret) || strings.Contains(out.stdout, secret) {
						t.Errorf("render's output repeats the private key (%q):\nstderr:\n%s\nstdout:\n%s", secret, out.stderr, out.stdout)
					}
				}
				for _, o := range out.objects {
					if o.GetKind() != "Result" {
						t.Errorf("a fatal result composed %s %s; want nothing", o.GetKind(), o.GetName())
					}
				}
			},
		},
	}
	cases = append(cases, policyCases()...)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			xr := tc.xr
			switch {
			case xr == "" && tc.xrYAML != "":
				xr = writeYAML(t, t.TempDir(), "xr.yaml", tc.xrYAML)
			case xr == "":
				xr = legacyXR
			}
			if tc.policy != "" {
				tc.composition = withPolicy(t, filepath.Join(root, tc.composition), tc.policy)
			}
			// The hosts are required resources of every render; a case's own go beside them
			// (render takes one file or directory).
			required := hosts
			if tc.required != "" {
				required = t.TempDir()
				b, err := os.ReadFile(filepath.Join(root, hosts))
				if err != nil {
					t.Fatal(err)
				}
				writeYAMLDocs(t, required, "hosts.yaml", string(b))
				writeYAMLDocs(t, required, "required.yaml", tc.required)
			}
			args := []string{"render", xr, tc.composition, functions, "--xrd=" + tc.xrd, "--include-function-results", "--required-resources=" + required}
			if tc.observed != "" {
				args = append(args, "--observed-resources="+tc.observed)
			}
			if tc.fullXR {
				args = append(args, "--include-full-xr")
			}
			r := run(t, root, nil, cli, args...)
			t.Logf("crossplane render took %v", r.took.Round(time.Millisecond))
			if failed := r.err != nil; failed != tc.wantFail {
				t.Fatalf("render failed=%v (%v), want failed=%v\nstdout:\n%s\nstderr:\n%s", failed, r.err, tc.wantFail, r.stdout, r.stderr)
			}
			got := goldenText(r, tc.wantFail)
			compareGolden(t, filepath.Join("testdata", "golden", tc.name+".yaml"), got)
			out := rendered{objects: decodeAll(t, []byte(r.stdout)), stdout: r.stdout, stderr: r.stderr}
			tc.check(t, out)
		})
	}
}

// goldenText is what a golden file holds: render's stdout, and for a failed render also its
// error message. render's output has nothing nondeterministic for these inputs (composed
// resources come sorted, condition times are a fixed placeholder, the functions' own
// output is deterministic), so nothing is normalised but one thing: the error message names
// the functions file by its temporary path, which is replaced by functions.yaml.
func goldenText(r result, failed bool) string {
	if !failed {
		return r.stdout
	}
	msg := tempPath.ReplaceAllString(strings.TrimSpace(r.stderr), "functions.yaml")
	return "# crossplane render exited non-zero; its error:\n# " +
		strings.ReplaceAll(msg, "\n", "\n# ") + "\n" + r.stdout
}

var tempPath = regexp.MustCompile(`/\S*/functions\.yaml`)

func compareGolden(t *testing.T, file, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", file)
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (go test ./test/crossplane -run TestRender -update writes it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("crossplane render output differs from %s (-want +got); if the change is intended, rerun with -update:\n%s", file, d)
	}
}

// xproxyFromClaim writes the XProxy that Crossplane's claim reconciler would create for
// internal/function/testdata/proxyclaim.yaml: the claim's spec without its connection
// secret reference, a claimRef, the claim labels, and a generated name (fixed here).
func xproxyFromClaim(t *testing.T, dir string) string {
	t.Helper()
	objs := readObjects(t, filepath.Join(repoRoot, proxyClaim))
	if len(objs) != 1 || objs[0].GetKind() != "ProxyClaim" {
		t.Fatalf("%s: want one ProxyClaim", proxyClaim)
	}
	claim := objs[0]
	spec, _, _ := unstructured.NestedMap(claim.Object, "spec")
	delete(spec, "writeConnectionSecretToRef")
	spec["claimRef"] = map[string]any{
		"apiVersion": claim.GetAPIVersion(), "kind": claim.GetKind(),
		"name": claim.GetName(), "namespace": claim.GetNamespace(),
	}
	xr := map[string]any{
		"apiVersion": claim.GetAPIVersion(),
		"kind":       "XProxy",
		"metadata": map[string]any{
			"name": claim.GetName() + "-x7k2p",
			"labels": map[string]any{
				"crossplane.io/claim-name":      claim.GetName(),
				"crossplane.io/claim-namespace": claim.GetNamespace(),
			},
		},
		"spec": spec,
	}
	b, err := yaml.Marshal(xr)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "xproxy.yaml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// rendered is crossplane render's output: the XR first, then composed resources and results.
type rendered struct {
	objects        []*unstructured.Unstructured
	stdout, stderr string
}

func (r rendered) xr(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	if len(r.objects) == 0 {
		t.Fatal("render printed nothing")
	}
	return r.objects[0]
}

// wantCondition checks a condition of the XR.
func (r rendered) wantCondition(t *testing.T, typ, status, reason, message string) {
	t.Helper()
	conds, _, _ := unstructured.NestedSlice(r.xr(t).Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			got := []any{m["status"], m["reason"], m["message"]}
			if d := cmp.Diff([]any{status, reason, message}, got); d != "" {
				t.Errorf("XR condition %s (-want +got):\n%s", typ, d)
			}
			return
		}
	}
	t.Errorf("XR has no %s condition: %v", typ, conds)
}

func (r rendered) wantStatus(t *testing.T, want map[string]any) {
	t.Helper()
	st, _, _ := unstructured.NestedMap(r.xr(t).Object, "status")
	delete(st, "conditions")
	// The generations are in the golden files, and checked by the roll-out cases.
	delete(st, "generation")
	delete(st, "generations")
	// Every case here is a Proxy of one replica: Ready (or Updating) ones have it Ready.
	if len(st) > 0 && st["phase"] != "Pending" {
		ready := int64(0)
		if st["phase"] == "Ready" || st["phase"] == "Updating" {
			ready = 1
		}
		if st["replicas"] != int64(1) || st["readyReplicas"] != ready {
			t.Errorf("XR status replicas %v, readyReplicas %v, want 1 and %d", st["replicas"], st["readyReplicas"], ready)
		}
	}
	delete(st, "replicas")
	delete(st, "readyReplicas")
	if d := cmp.Diff(want, st); d != "" {
		t.Errorf("XR status (-want +got):\n%s", d)
	}
}

// wantDefaults checks that --xrd applied the XRD's defaults to the XR's spec (the function
// defaults the same fields itself, so the composed resources alone would not show it).
func (r rendered) wantDefaults(t *testing.T) {
	t.Helper()
	xr := r.xr(t)
	if h, ok, _ := unstructured.NestedString(xr.Object, "spec", "host"); ok {
		t.Errorf("spec.host = %q: the XRD must not default it (a Proxy without host is placed)", h)
	}
	wantField(t, xr, "spec.vcpu", int64(1))
	wantField(t, xr, "spec.memoryMiB", int64(512))
	wantField(t, xr, "spec.port", int64(3128))
	wantField(t, xr, "spec.replicas", int64(1))
	wantField(t, xr, "spec.probe.expectedStatus", int64(204))
	wantField(t, xr, "spec.allowedCIDRs", []any{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"})
}

func (r rendered) wantReady(t *testing.T, status, reason string) {
	t.Helper()
	conds, _, _ := unstructured.NestedSlice(r.xr(t).Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			if m["status"] != status || m["reason"] != reason {
				t.Errorf("XR Ready condition is %v/%v (%v), want %s/%s", m["status"], m["reason"], m["message"], status, reason)
			}
			return
		}
	}
	t.Errorf("XR has no Ready condition: %v", conds)
}

// replicasXR is a Proxy of two replicas, placed (no spec.host), caching its own image.
const replicasXR = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-b}
spec:
  replicas: 2
  image: {url: "http://192.168.122.1:8000/debian-12-testbed.qcow2", sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
  memoryMiB: 1024
  probe: {url: "http://192.168.122.1:8204/"}
`

// wantReplicas checks the composed KVMDomains of a Proxy of replicas (replica 0's domain
// "web", replica r's "web-r<r>-<id>") are on hosts, one per replica, each with its BaseImage on
// the same host, and status.replicas says how many.
func wantReplicas(t *testing.T, out rendered, hosts ...string) {
	t.Helper()
	var got []string
	for _, o := range out.objects {
		if o.GetKind() != "KVMDomain" && o.GetKind() != "BaseImage" {
			continue
		}
		h, _, _ := unstructured.NestedString(o.Object, "spec", "providerConfigRef", "name")
		name := o.GetName()
		if i := strings.Index(name, "-r1-"); i > 0 {
			name = name[:i+3] + "-<id>" + name[i+3+9:]
		}
		got = append(got, o.GetKind()+"/"+name+"@"+h)
	}
	var want []string
	for r, h := range hosts {
		if r == 0 {
			want = append(want, "KVMDomain/web@"+h, "BaseImage/web-image@"+h)
			continue
		}
		want = append(want, fmt.Sprintf("KVMDomain/web-r%d-<id>@%s", r, h))
	}
	if d := cmp.Diff(want, got, sortStrings); d != "" {
		t.Errorf("replicas' KVMDomains and BaseImages (-want +got):\n%s", d)
	}
	wantField(t, out.xr(t), "status.replicas", int64(len(hosts)))
}

// composedKeys lists composed resources as Kind/composition-resource-name/name.
// The generations of the roll-out fixtures (internal/function's TestRolloutFixtures).
const (
	legacyGen = "b30bd3eb"
	newGen    = "94d412d5"
)

// rolloutBoth are the two generations' resources while one replaces the other.
var rolloutBoth = []string{"SeedVolume/seed/egress-seed", "KVMDomain/domain/egress",
	"SeedVolume/seed-" + newGen + "/egress-" + newGen + "-seed", "KVMDomain/domain-" + newGen + "/egress-" + newGen, "Service/service/egress-proxy"}

// wantServing checks the XR's phase, the address it says serves and status.generation.
func (r rendered) wantServing(t *testing.T, phase, ip, gen string) {
	t.Helper()
	wantField(t, r.xr(t), "status.phase", phase)
	wantField(t, r.xr(t), "status.ip", ip)
	wantField(t, r.xr(t), "status.generation", gen)
}

// wantEndpoints checks the addresses of the composed EndpointSlice.
func (r rendered) wantEndpoints(t *testing.T, ips ...string) {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(r.composed(t, "endpoints").Object, "endpoints")
	var got []string
	for _, e := range eps {
		as, _, _ := unstructured.NestedStringSlice(e.(map[string]any), "addresses")
		got = append(got, as...)
	}
	if d := cmp.Diff(ips, got); d != "" {
		t.Errorf("EndpointSlice addresses (-want +got):\n%s", d)
	}
}

// wantSecretIP checks the ip key of the composed Secret.
func (r rendered) wantSecretIP(t *testing.T, ip string) {
	t.Helper()
	v, _, _ := unstructured.NestedString(r.composed(t, "secret").Object, "data", "ip")
	b, _ := base64.StdEncoding.DecodeString(v)
	if string(b) != ip {
		t.Errorf("Secret ip = %q, want %q", b, ip)
	}
}

func (r rendered) composedKeys() []string {
	var keys []string
	for _, o := range r.objects[1:] {
		if o.GetKind() == "Result" {
			continue
		}
		keys = append(keys, o.GetKind()+"/"+o.GetAnnotations()["crossplane.io/composition-resource-name"]+"/"+o.GetName())
	}
	return keys
}

func (r rendered) wantComposed(t *testing.T, want ...string) {
	t.Helper()
	if d := cmp.Diff(want, r.composedKeys(), sortStrings); d != "" {
		t.Errorf("composed resources (-want +got):\n%s", d)
	}
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func (r rendered) composed(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range r.objects[1:] {
		if o.GetAnnotations()["crossplane.io/composition-resource-name"] == name {
			return o
		}
	}
	t.Fatalf("no composed resource %q in %v", name, r.composedKeys())
	return nil
}

// userData returns the composed SeedVolume's user-data.
func (r rendered) userData(t *testing.T) string {
	t.Helper()
	ud, ok, _ := unstructured.NestedString(r.composed(t, "seed").Object, "spec", "forProvider", "userData")
	if !ok {
		t.Fatal("the SeedVolume has no spec.forProvider.userData")
	}
	return ud
}

// wantUserData fails unless the composed SeedVolume's user-data contains every line part.
func (r rendered) wantUserData(t *testing.T, parts ...string) {
	t.Helper()
	ud := r.userData(t)
	for _, s := range parts {
		if !strings.Contains(ud, s) {
			t.Errorf("seed user-data lacks %q:\n%s", s, ud)
		}
	}
}

func wantField(t *testing.T, o *unstructured.Unstructured, path string, want any) {
	t.Helper()
	got, ok, err := unstructured.NestedFieldNoCopy(o.Object, strings.Split(path, ".")...)
	if err != nil || !ok {
		t.Errorf("%s %s has no %s", o.GetKind(), o.GetName(), path)
		return
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s %s %s (-want +got):\n%s", o.GetKind(), o.GetName(), path, d)
	}
}
