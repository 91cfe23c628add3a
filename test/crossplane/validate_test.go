package crossplane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Our API groups: examples of any other kind (Namespaces, Secrets) have no schema to
// validate against and are left out.
var ourGroups = map[string]bool{"kvm.crossplane.io": true, "platform.kvm.crossplane.io": true}

// TestValidate runs `crossplane beta validate` offline: every example of ours (managed
// resources, ProviderConfigs, Proxies, ProxyClaims) against package/crds and the XRDs, and
// the Compositions and XRDs against Crossplane's own CRDs, the Compositions' function inputs
// against package/function/input. Missing schemas are errors, and
// every resource must be reported as validated, so nothing passes by being skipped.
func TestValidate(t *testing.T) {
	cli := crossplaneCLI(t)
	cache := seedValidateCache(t, cli)
	dir := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	extensions := strings.Join([]string{"package/crds", xrdV2, xrdLegacy, "package/function/input"}, ",")

	examples, names := ourExamples(t)
	if len(names) < 10 {
		t.Fatalf("found only %d examples of our kinds: %v", len(names), names)
	}
	badProxy := writeYAML(t, dir, "bad-proxy.yaml", `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: bad, namespace: team-a}
spec:
  image: {baseImageName: debian-12}
  port: 0
  colour: blue
`)
	badClaim := writeYAML(t, dir, "bad-claim.yaml", `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: ProxyClaim
metadata: {name: bad, namespace: team-c}
spec:
  image: {baseImageName: debian-12, url: "https://images.example.org/x.qcow2"}
  allowedCIDRs: []
`)

	cases := []struct {
		name      string
		resources []string
		wantOK    bool
		want      []string // lines or fragments the output must contain
	}{
		{
			name:      "examples",
			resources: []string{examples},
			wantOK:    true,
			want:      validated(names),
		},
		{
			name:      "compositions and XRDs",
			resources: []string{compositionV2, compositionLegacy, xrdV2, xrdLegacy},
			wantOK:    true,
			want: validated([]string{
				"apiextensions.crossplane.io/v1, Kind=Composition, proxies.platform.kvm.crossplane.io",
				"apiextensions.crossplane.io/v1, Kind=Composition, xproxies.platform.kvm.crossplane.io",
				"apiextensions.crossplane.io/v2, Kind=CompositeResourceDefinition, proxies.platform.kvm.crossplane.io",
				"apiextensions.crossplane.io/v1, Kind=CompositeResourceDefinition, xproxies.platform.kvm.crossplane.io",
				// Each Composition's compose-proxy input, against package/function/input.
				"proxy.fn.kvm.crossplane.io/v1alpha1, Kind=ProxyPolicy, ",
				"proxy.fn.kvm.crossplane.io/v1alpha1, Kind=ProxyPolicy, ",
			}),
		},
		{
			name:      "a Proxy with port 0 and an unknown field",
			resources: []string{badProxy},
			want: []string{
				"spec.port in body should be greater than or equal to 1",
				`spec.colour: Invalid value: "colour": unknown field: "colour"`,
			},
		},
		{
			name:      "a ProxyClaim with both image ways and no CIDRs",
			resources: []string{badClaim},
			want: []string{
				"spec.image: Invalid value: set either image.baseImageName, or image.url and image.sha256, not both",
				"spec.allowedCIDRs in body should have at least 1 items",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, root, nil, cli, "beta", "validate", extensions, strings.Join(tc.resources, ","),
				"--cache-dir="+cache, "--error-on-missing-schemas")
			out := r.stdout + r.stderr
			t.Logf("crossplane beta validate took %v:\n%s", r.took, out)
			if ok := r.err == nil; ok != tc.wantOK {
				t.Fatalf("validate succeeded=%v, want %v:\n%s", ok, tc.wantOK, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// validated is the success line crossplane beta validate prints for each resource.
// The summary line must count them all as successes.
func validated(resources []string) []string {
	out := make([]string, len(resources), len(resources)+1)
	for i, r := range resources {
		out[i] = "[✓] " + r + " validated successfully"
	}
	n := len(resources)
	return append(out, fmt.Sprintf("Total %d resources: 0 missing schemas, %d success cases, 0 failure cases", n, n))
}

// ourExamples writes every object of our API groups in examples/*/*.yaml into one file and
// returns it with the objects' "group/version, Kind=kind, name" as validate prints them.
func ourExamples(t *testing.T) (string, []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var docs []string
	var names []string
	for _, f := range files {
		for _, o := range readObjects(t, f) {
			gv := o.GroupVersionKind()
			if !ourGroups[gv.Group] {
				continue
			}
			b, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
			names = append(names, fmt.Sprintf("%s, Kind=%s, %s", o.GetAPIVersion(), o.GetKind(), o.GetName()))
		}
	}
	sort.Strings(names)
	f := filepath.Join(t.TempDir(), "examples.yaml")
	if err := os.WriteFile(f, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, names
}

func writeYAML(t *testing.T, dir, name, content string) string {
	t.Helper()
	var probe map[string]any
	if err := yaml.Unmarshal([]byte(content), &probe); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// seedValidateCache returns a validate cache directory holding Crossplane's own CRDs as the
// package `beta validate` would otherwise pull (xpkg.crossplane.io/crossplane/crossplane at
// the CLI's version). The CRDs come from the same crossplane/v2 Go module the CLI was built
// from (cluster/crds), found in the module cache.
func seedValidateCache(t *testing.T, cli string) string {
	t.Helper()
	v := strings.TrimSpace(strings.TrimPrefix(mustRun(t, ".", nil, cli, "version", "--client").stdout, "Client Version:"))
	if !strings.HasPrefix(v, "v2.") {
		t.Fatalf("crossplane version --client says %q; want a v2 version (is the CLI built with its version set?)", v)
	}
	// The XRDs are for the core the project runs (cluster/crossplane/build.sh CORE_VERSION),
	// newer than the CLI: validate against its CRDs (v2.2's XRD has no subresources.scale),
	// filed under the CLI's version, where the CLI looks.
	crds := crossplaneCRDs(t, coreVersion, "core-"+coreVersion)
	files, err := filepath.Glob(filepath.Join(crds, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", crds, err)
	}
	var pkg strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pkg.Write(b)
		pkg.WriteString("\n---\n")
	}
	cache := t.TempDir()
	dir := filepath.Join(cache, "xpkg.crossplane.io", "crossplane", "crossplane@"+v)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.yaml"), []byte(pkg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return cache
}

// coreVersion is the Crossplane core the project runs (cluster/crossplane/build.sh).
const coreVersion = "v2.4.0"

// crossplaneCRDs returns cluster/crds of github.com/crossplane/crossplane/v2 at version v:
// from the module cache, or downloaded by `go mod download` in the scratch module
// cluster/crossplane/build.sh built it in (scratch, under its crossplane-build).
func crossplaneCRDs(t *testing.T, v, scratchDir string) string {
	t.Helper()
	const mod = "github.com/crossplane/crossplane/v2"
	modCache := strings.TrimSpace(mustRun(t, ".", nil, "go", "env", "GOMODCACHE").stdout)
	dir := filepath.Join(modCache, filepath.FromSlash(mod)+"@"+v)
	if _, err := os.Stat(filepath.Join(dir, "cluster", "crds")); err != nil {
		scratch := filepath.Join(filepath.Dir(cacheBin()), "crossplane-build", scratchDir)
		r := run(t, scratch, nil, "go", "mod", "download", "-json", mod+"@"+v)
		var info struct{ Dir, Error string }
		if jerr := json.Unmarshal([]byte(r.stdout), &info); r.err != nil || jerr != nil || info.Dir == "" {
			msg := fmt.Sprintf("cannot find %s@%s in the module cache (go mod download: %v %s %s); run `make tools`", mod, v, r.err, info.Error, r.stderr)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip("SKIPPING: " + msg)
		}
		dir = info.Dir
	}
	return filepath.Join(dir, "cluster", "crds")
}

// TestExamplesCoverProxyAPI makes sure examples/proxy shows each way to ask for a proxy.
func TestExamplesCoverProxyAPI(t *testing.T) {
	got := map[string]int{}
	var shared, own int
	for _, f := range mustGlob(t, filepath.Join(repoRoot, "examples", "proxy", "*.yaml")) {
		for _, o := range readObjects(t, f) {
			got[o.GetKind()]++
			if o.GetKind() == "Proxy" {
				if _, ok, _ := unstructured.NestedString(o.Object, "spec", "image", "baseImageName"); ok {
					shared++
				} else {
					own++
				}
			}
		}
	}
	if d := cmp.Diff(map[string]int{"BaseImage": 1, "ClusterRole": 1, "Proxy": 3, "ProxyClaim": 1}, got); d != "" {
		t.Errorf("kinds in examples/proxy (-want +got):\n%s", d)
	}
	if shared != 2 || own != 1 {
		t.Errorf("examples/proxy has %d Proxies sharing a BaseImage and %d caching their own; want 2 and 1", shared, own)
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("nothing matches %s: %v", pattern, err)
	}
	return files
}
