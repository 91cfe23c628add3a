package function

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	xpv1 "github.com/crossplane/crossplane/apis/v2/apiextensions/v1"
	xpv2 "github.com/crossplane/crossplane/apis/v2/apiextensions/v2"
	metav1pkg "github.com/crossplane/crossplane/apis/v2/pkg/meta/v1"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

const configDir = "../../package/configuration"

// readStrict decodes a package file into a typed Crossplane object, refusing unknown fields
// so that a misspelt field fails here rather than being dropped by the API server.
func readStrict(t *testing.T, file string, into any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(configDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return b
}

// schemaOf returns the openAPIV3Schema of an XRD version as a map.
func schemaOf(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConfigurationFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(b, &tm); err != nil {
			t.Fatalf("%s is not YAML: %v", f, err)
		}
		got[filepath.Base(f)] = tm.APIVersion + " " + tm.Kind + " " + tm.Metadata.Name
	}
	want := map[string]string{
		"crossplane.yaml":         "meta.pkg.crossplane.io/v1 Configuration configuration-kvm-proxy",
		"xrd.yaml":                "apiextensions.crossplane.io/v2 CompositeResourceDefinition proxies.platform.kvm.crossplane.io",
		"xrd-legacy.yaml":         "apiextensions.crossplane.io/v1 CompositeResourceDefinition xproxies.platform.kvm.crossplane.io",
		"composition.yaml":        "apiextensions.crossplane.io/v1 Composition proxies.platform.kvm.crossplane.io",
		"composition-legacy.yaml": "apiextensions.crossplane.io/v1 Composition xproxies.platform.kvm.crossplane.io",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("files in %s (-want +got):\n%s", configDir, d)
	}
}

func TestXRDs(t *testing.T) {
	var xrd xpv2.CompositeResourceDefinition
	readStrict(t, "xrd.yaml", &xrd)
	if xrd.Spec.Scope != xpv2.CompositeResourceScopeNamespaced {
		t.Errorf("xrd.yaml scope = %q, want Namespaced", xrd.Spec.Scope)
	}
	if xrd.Spec.Group != "platform.kvm.crossplane.io" || xrd.Spec.Names.Kind != "Proxy" || xrd.Spec.Names.Plural != "proxies" {
		t.Errorf("xrd.yaml group/names = %s %+v", xrd.Spec.Group, xrd.Spec.Names)
	}
	if xrd.Name != xrd.Spec.Names.Plural+"."+xrd.Spec.Group {
		t.Errorf("xrd.yaml name %q is not <plural>.<group>", xrd.Name)
	}
	if len(xrd.Spec.Versions) != 1 || xrd.Spec.Versions[0].Name != "v1alpha1" || !xrd.Spec.Versions[0].Served || !xrd.Spec.Versions[0].Referenceable {
		t.Fatalf("xrd.yaml versions = %+v", xrd.Spec.Versions)
	}

	var legacy xpv1.CompositeResourceDefinition
	readStrict(t, "xrd-legacy.yaml", &legacy)
	if legacy.Spec.Scope == nil || *legacy.Spec.Scope != xpv1.CompositeResourceScopeLegacyCluster {
		t.Errorf("xrd-legacy.yaml must set scope LegacyCluster (the only scope with claims)")
	}
	if legacy.Spec.ClaimNames == nil || legacy.Spec.ClaimNames.Kind != "ProxyClaim" || legacy.Spec.ClaimNames.Plural != "proxyclaims" {
		t.Errorf("xrd-legacy.yaml claimNames = %+v", legacy.Spec.ClaimNames)
	}
	if legacy.Spec.Group != xrd.Spec.Group || legacy.Spec.Names.Kind != "XProxy" {
		t.Errorf("xrd-legacy.yaml group/names = %s %+v", legacy.Spec.Group, legacy.Spec.Names)
	}
	if legacy.Name != legacy.Spec.Names.Plural+"."+legacy.Spec.Group {
		t.Errorf("xrd-legacy.yaml name %q is not <plural>.<group>", legacy.Name)
	}
	kinds := map[string]bool{}
	for _, k := range []string{xrd.Spec.Names.Kind, legacy.Spec.Names.Kind, legacy.Spec.ClaimNames.Kind} {
		if kinds[k] {
			t.Errorf("kind %s is defined twice in group %s", k, xrd.Spec.Group)
		}
		kinds[k] = true
	}
	if d := cmp.Diff([]string{"url", "host", "port"}, legacy.Spec.ConnectionSecretKeys); d != "" {
		t.Errorf("xrd-legacy.yaml connectionSecretKeys (-want +got):\n%s", d)
	}
	if len(legacy.Spec.Versions) != 1 || legacy.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("xrd-legacy.yaml versions = %+v", legacy.Spec.Versions)
	}

	// Both serve the scale subresource on spec.replicas (kubectl scale); Crossplane gives the
	// claim's CRD the same.
	wantScale := &extv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"}
	var got2, got1 *extv1.CustomResourceSubresourceScale
	if sr := xrd.Spec.Versions[0].Subresources; sr != nil {
		got2 = sr.Scale
	}
	if sr := legacy.Spec.Versions[0].Subresources; sr != nil {
		got1 = sr.Scale
	}
	if d := cmp.Diff(wantScale, got2); d != "" {
		t.Errorf("xrd.yaml scale subresource (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantScale, got1); d != "" {
		t.Errorf("xrd-legacy.yaml scale subresource (-want +got):\n%s", d)
	}

	// Both XRDs offer the same spec and status.
	v2s := schemaOf(t, xrd.Spec.Versions[0].Schema.OpenAPIV3Schema.Raw)
	v1s := schemaOf(t, legacy.Spec.Versions[0].Schema.OpenAPIV3Schema.Raw)
	props := func(s map[string]any) any { return s["properties"] }
	if d := cmp.Diff(props(v2s), props(v1s)); d != "" {
		t.Errorf("xrd.yaml and xrd-legacy.yaml differ in spec or status (-xrd +legacy):\n%s", d)
	}
	checkDescribed(t, "openAPIV3Schema", v2s)
	checkSpecFields(t, v2s)
}

// checkDescribed fails for every schema node, property or item, without a description.
func checkDescribed(t *testing.T, path string, s map[string]any) {
	t.Helper()
	if d, _ := s["description"].(string); d == "" {
		t.Errorf("xrd.yaml: %s has no description", path)
	}
	if p, ok := s["properties"].(map[string]any); ok {
		for name, sub := range p {
			checkDescribed(t, path+"."+name, sub.(map[string]any))
		}
	}
	if it, ok := s["items"].(map[string]any); ok {
		checkDescribed(t, path+"[]", it)
	}
}

// checkSpecFields keeps the XRD in step with ProxySpec and the function's defaults.
func checkSpecFields(t *testing.T, s map[string]any) {
	t.Helper()
	spec := s["properties"].(map[string]any)["spec"].(map[string]any)["properties"].(map[string]any)
	var fields []string
	for k := range spec {
		fields = append(fields, k)
	}
	want := []string{"allowedCIDRs", "allowedDomains", "diskSizeGiB", "host", "hostSelector", "image", "memoryMiB", "port", "probe", "replicas", "squidDirectives", "sshAuthorizedKeys", "vcpu"}
	if d := cmp.Diff(want, sorted(fields)); d != "" {
		t.Errorf("spec fields (-want +got):\n%s", d)
	}
	def := func(f string) any { return spec[f].(map[string]any)["default"] }
	wantDefaults := map[string]any{
		"host": nil, "vcpu": float64(DefaultVCPU), "memoryMiB": float64(DefaultMemoryMiB),
		"port": float64(DefaultPort), "replicas": float64(DefaultReplicas), "allowedCIDRs": []any{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"},
	}
	gotDefaults := map[string]any{}
	for f := range wantDefaults {
		gotDefaults[f] = def(f)
	}
	if d := cmp.Diff(wantDefaults, gotDefaults); d != "" {
		t.Errorf("spec defaults (-want +got):\n%s", d)
	}
	probe := spec["probe"].(map[string]any)["properties"].(map[string]any)
	if got := probe["expectedStatus"].(map[string]any)["default"]; got != float64(DefaultExpectedStatus) {
		t.Errorf("probe.expectedStatus default = %v", got)
	}
	status := s["properties"].(map[string]any)["status"].(map[string]any)["properties"].(map[string]any)
	var sf []string
	for k := range status {
		sf = append(sf, k)
	}
	if d := cmp.Diff([]string{"failedGeneration", "generation", "generations", "host", "ip", "message", "phase", "readyReplicas", "replicas", "secretName", "url"}, sorted(sf)); d != "" {
		t.Errorf("status fields (-want +got):\n%s", d)
	}
}

// compositionInput is the input of a Composition's compose-proxy step, as the function gets it.
func compositionInput(t *testing.T, file string) *structpb.Struct {
	t.Helper()
	var c xpv1.Composition
	readStrict(t, file, &c)
	for _, s := range c.Spec.Pipeline {
		if s.Step == "compose-proxy" && s.Input != nil {
			var m map[string]any
			if err := json.Unmarshal(s.Input.Raw, &m); err != nil {
				t.Fatal(err)
			}
			in, err := structpb.NewStruct(m)
			if err != nil {
				t.Fatal(err)
			}
			return in
		}
	}
	t.Fatalf("%s has no compose-proxy step with an input", file)
	return nil
}

func TestCompositions(t *testing.T) {
	for file, kind := range map[string]string{"composition.yaml": "Proxy", "composition-legacy.yaml": "XProxy"} {
		var c xpv1.Composition
		readStrict(t, file, &c)
		if c.Spec.CompositeTypeRef.APIVersion != "platform.kvm.crossplane.io/v1alpha1" || c.Spec.CompositeTypeRef.Kind != kind {
			t.Errorf("%s compositeTypeRef = %+v", file, c.Spec.CompositeTypeRef)
		}
		if c.Spec.Mode != xpv1.CompositionModePipeline {
			t.Errorf("%s mode = %q", file, c.Spec.Mode)
		}
		var steps []string
		for _, s := range c.Spec.Pipeline {
			steps = append(steps, s.Step+"="+s.FunctionRef.Name)
		}
		want := []string{"compose-proxy=" + functionName(t, "function-kvm-proxy"), "auto-ready=" + functionName(t, "function-auto-ready")}
		if d := cmp.Diff(want, steps); d != "" {
			t.Errorf("%s pipeline (-want +got):\n%s", file, d)
		}
	}
	// Both Compositions give the function the same policy, and the function reads it.
	v2, legacyIn := compositionInput(t, "composition.yaml"), compositionInput(t, "composition-legacy.yaml")
	if d := cmp.Diff(v2.AsMap(), legacyIn.AsMap()); d != "" {
		t.Errorf("the Compositions' ProxyPolicy inputs differ (-composition.yaml +composition-legacy.yaml):\n%s", d)
	}
	pol, err := readPolicy(&fnv1.RunFunctionRequest{Input: v2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveRules(pol.Rules); err != nil {
		t.Errorf("composition.yaml's ProxyPolicy: %v", err)
	}

	var legacy xpv1.Composition
	readStrict(t, "composition-legacy.yaml", &legacy)
	if legacy.Spec.WriteConnectionSecretsToNamespace == nil || *legacy.Spec.WriteConnectionSecretsToNamespace != "crossplane-system" {
		t.Errorf("composition-legacy.yaml must set writeConnectionSecretsToNamespace for claim connection secrets")
	}
}

func TestConfigurationMeta(t *testing.T) {
	var c metav1pkg.Configuration
	readStrict(t, "crossplane.yaml", &c)
	var deps []string
	for _, d := range c.Spec.DependsOn {
		if d.Kind == nil || d.Package == nil || d.Version == "" {
			t.Errorf("dependency %+v lacks kind, package or version", d)
			continue
		}
		deps = append(deps, *d.Kind+" "+*d.Package)
	}
	want := []string{
		"Provider xpkg.crossplane.io/provider-kvm/provider-kvm",
		"Function xpkg.crossplane.io/provider-kvm/function-kvm-proxy",
		"Function xpkg.crossplane.io/crossplane-contrib/function-auto-ready",
	}
	if d := cmp.Diff(want, deps); d != "" {
		t.Errorf("dependsOn (-want +got):\n%s", d)
	}
}

// functionName is the name Crossplane gives the Function that the Configuration's dependsOn
// entry for the repository ending in /suffix installs: the repository path (without the
// registry) as a DNS label. The Compositions must use these names, or an installed
// Configuration's pipeline would name Functions that do not exist.
func functionName(t *testing.T, suffix string) string {
	t.Helper()
	var c metav1pkg.Configuration
	readStrict(t, "crossplane.yaml", &c)
	for _, d := range c.Spec.DependsOn {
		if d.Kind == nil || *d.Kind != "Function" || d.Package == nil || !strings.HasSuffix(*d.Package, "/"+suffix) {
			continue
		}
		repo := *d.Package
		if i := strings.Index(repo, "/"); i >= 0 && strings.ContainsAny(repo[:i], ".:") {
			repo = repo[i+1:]
		}
		return strings.ReplaceAll(repo, "/", "-")
	}
	t.Fatalf("crossplane.yaml has no Function dependency ending in /%s", suffix)
	return ""
}
