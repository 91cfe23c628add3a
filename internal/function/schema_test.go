package function

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/utils/ptr"

	xpv2 "github.com/crossplane/crossplane/apis/v2/apiextensions/v2"
)

// proxySchema is xrd.yaml's schema as the API server would use it: checked the way a CRD
// is checked on creation (structural, CEL rules compile and fit the cost budget), ready to
// default and validate Proxies with OpenAPI and CEL.
type proxySchema struct {
	structural *structuralschema.Structural
	openAPI    validation.SchemaValidator
	cel        *cel.Validator
}

func loadProxySchema(t *testing.T) proxySchema {
	t.Helper()
	var xrd xpv2.CompositeResourceDefinition
	readStrict(t, "xrd.yaml", &xrd)
	var v1props extv1.JSONSchemaProps
	if err := json.Unmarshal(xrd.Spec.Versions[0].Schema.OpenAPIV3Schema.Raw, &v1props); err != nil {
		t.Fatal(err)
	}
	props := &apiextensions.JSONSchemaProps{}
	if err := extv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1props, props, nil); err != nil {
		t.Fatal(err)
	}

	// The CRD Crossplane derives from the XRD has this schema (plus Crossplane's own
	// fields), so the API server must accept it as a CRD schema.
	crd := &apiextensions.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: xrd.Name},
		Spec: apiextensions.CustomResourceDefinitionSpec{
			Group: xrd.Spec.Group,
			Names: apiextensions.CustomResourceDefinitionNames{
				Plural: xrd.Spec.Names.Plural, Singular: xrd.Spec.Names.Singular,
				Kind: xrd.Spec.Names.Kind, ListKind: xrd.Spec.Names.ListKind,
			},
			Scope: apiextensions.NamespaceScoped,
			Versions: []apiextensions.CustomResourceDefinitionVersion{{
				Name: "v1alpha1", Served: true, Storage: true,
			}},
			Validation:            &apiextensions.CustomResourceValidation{OpenAPIV3Schema: props},
			Subresources:          &apiextensions.CustomResourceSubresources{Status: &apiextensions.CustomResourceSubresourceStatus{}},
			PreserveUnknownFields: ptr.To(false),
		},
		Status: apiextensions.CustomResourceDefinitionStatus{StoredVersions: []string{"v1alpha1"}},
	}
	if errs := extvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		for _, e := range errs {
			t.Errorf("xrd.yaml's schema is not a valid CRD schema: %s: %s %s", e.Field, e.Type, e.Detail)
		}
		t.FailNow()
	}

	s, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := validation.NewSchemaValidator(props)
	if err != nil {
		t.Fatal(err)
	}
	return proxySchema{structural: s, openAPI: v, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
}

// admit defaults and validates a Proxy the way the API server would on create.
func (s proxySchema) admit(obj map[string]any) field.ErrorList {
	defaulting.Default(obj, s.structural)
	errs := validation.ValidateCustomResource(nil, obj, s.openAPI)
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

func TestXRDSchemaDefaults(t *testing.T) {
	s := loadProxySchema(t)
	xr := obj(t, minimalXR)
	if errs := s.admit(xr); len(errs) > 0 {
		t.Fatalf("minimal Proxy rejected: %v", errs.ToAggregate())
	}
	want := obj(t, `
image: {baseImageName: debian-12}
vcpu: 1
memoryMiB: 512
port: 3128
replicas: 1
allowedCIDRs: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16]
probe: {url: "http://192.168.122.1:8204/", expectedStatus: 204}
`)
	b, _ := json.Marshal(xr) // defaulting writes int64s; compare as JSON numbers
	xr = obj(t, string(b))
	if d := cmp.Diff(want, xr["spec"]); d != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", d)
	}

	// The function composes the same from the defaulted spec as from the bare one.
	bare := run(t, newRequest(t, minimalXR, nil))
	defaulted := run(t, newRequest(t, string(b), nil))
	if d := cmp.Diff(desired(bare), desired(defaulted)); d != "" {
		t.Errorf("function output differs with the XRD's defaults applied (-bare +defaulted):\n%s", d)
	}
}

// TestXRDSchemaAndFunctionAgree admits Proxies through the XRD's schema and runs them
// through the function: the API server should reject what the function would reject, and
// the function must reject whatever slips past the schema (CIDRs, which CEL could only
// check on newer API servers).
func TestXRDSchemaAndFunctionAgree(t *testing.T) {
	s := loadProxySchema(t)
	const head = "apiVersion: platform.kvm.crossplane.io/v1alpha1\nkind: Proxy\nmetadata: {name: web, namespace: team-a}\n"
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string]struct {
		spec      string
		schemaErr string // "" when the API server admits it
		fnOK      bool
	}{
		"Minimal":  {spec: "{image: {baseImageName: deb}}", fnOK: true},
		"Full":     {spec: strings.SplitN(fullXR, "spec:\n", 2)[1], fnOK: true},
		"CacheURL": {spec: "{image: {url: 'https://x.example/a.qcow2', sha256: " + sum + "}}", fnOK: true},
		"BothImageWays": {
			spec:      "{image: {baseImageName: deb, url: 'https://x.example/a.qcow2', sha256: " + sum + "}}",
			schemaErr: "set either image.baseImageName, or image.url and image.sha256, not both",
		},
		"NeitherImageWay":  {spec: "{image: {}}", schemaErr: "set either image.baseImageName"},
		"NoImage":          {spec: "{vcpu: 2}", schemaErr: "spec.image: Required value"},
		"URLWithoutSHA256": {spec: "{image: {url: 'https://x.example/a.qcow2'}}", schemaErr: "image.url and image.sha256 go together"},
		"SHA256Upper": {
			spec:      "{image: {url: 'https://x.example/a.qcow2', sha256: " + strings.ToUpper(sum) + "}}",
			schemaErr: "spec.image.sha256",
		},
		"DirectiveNewline": {
			spec:      `{image: {baseImageName: deb}, squidDirectives: ["a\nb"]}`,
			schemaErr: "spec.squidDirectives[0]",
		},
		"SSHKeyNewline": {
			spec:      `{image: {baseImageName: deb}, sshAuthorizedKeys: ["a\nb"]}`,
			schemaErr: "spec.sshAuthorizedKeys[0]",
		},
		"PortZero":        {spec: "{image: {baseImageName: deb}, port: 0}", schemaErr: "spec.port"},
		"PortTooHigh":     {spec: "{image: {baseImageName: deb}, port: 65536}", schemaErr: "spec.port"},
		"NoCIDRs":         {spec: "{image: {baseImageName: deb}, allowedCIDRs: []}", schemaErr: "spec.allowedCIDRs"},
		"CIDRNoMask":      {spec: "{image: {baseImageName: deb}, allowedCIDRs: [10.0.0.1]}", schemaErr: "spec.allowedCIDRs[0]"},
		"ProbeHTTPS":      {spec: "{image: {baseImageName: deb}, probe: {url: 'https://x/'}}", schemaErr: "spec.probe.url"},
		"ProbeNoURL":      {spec: "{image: {baseImageName: deb}, probe: {expectedStatus: 200}}", schemaErr: "spec.probe.url"},
		"HostInvalid":     {spec: "{image: {baseImageName: deb}, host: Lab_Host}", schemaErr: "spec.host"},
		"HostAndSelector": {spec: "{image: {baseImageName: deb}, host: lab, hostSelector: {zone: east}}", schemaErr: "set either host"},
		"SelectorOnly":    {spec: "{image: {baseImageName: deb}, hostSelector: {zone: east}}", fnOK: true},
		"SelectorBadKey":  {spec: "{image: {baseImageName: deb}, hostSelector: {'bad key': x}}", fnOK: false},
		"VCPUZero":        {spec: "{image: {baseImageName: deb}, vcpu: 0}", schemaErr: "spec.vcpu"},
		"MemoryTiny":      {spec: "{image: {baseImageName: deb}, memoryMiB: 64}", schemaErr: "spec.memoryMiB"},
		"ReplicasTwo":     {spec: "{image: {baseImageName: deb}, replicas: 2}", fnOK: true},
		"ReplicasZero":    {spec: "{image: {baseImageName: deb}, replicas: 0}", schemaErr: "spec.replicas"},
		"ReplicasTooMany": {spec: "{image: {baseImageName: deb}, replicas: 17}", schemaErr: "spec.replicas"},
		"DomainWildcard":  {spec: "{image: {baseImageName: deb}, allowedDomains: [.example.com, www.example.org, 192.168.122.1]}", fnOK: true},
		"DomainStarTLD":   {spec: "{image: {baseImageName: deb}, allowedDomains: ['example.*']}", schemaErr: "spec.allowedDomains[0]"},
		"DomainStarLabel": {spec: "{image: {baseImageName: deb}, allowedDomains: ['*.example.com']}", schemaErr: "spec.allowedDomains[0]"},
		"DomainUpperCase": {spec: "{image: {baseImageName: deb}, allowedDomains: [Example.com]}", schemaErr: "spec.allowedDomains[0]"},
		"DomainsEmpty":    {spec: "{image: {baseImageName: deb}, allowedDomains: []}", schemaErr: "spec.allowedDomains"},
		"DomainBadIPv4":   {spec: "{image: {baseImageName: deb}, allowedDomains: [10.0.0.300]}", fnOK: false}, // the schema checks the shape only
		"UnknownField":    {spec: "{image: {baseImageName: deb}, namespace: other}", fnOK: true},              // pruned by the API server; ignored by the function
		// The schema only checks the shape of a CIDR; the function parses it.
		"CIDRBadOctet": {spec: "{image: {baseImageName: deb}, allowedCIDRs: [10.0.0.300/8]}", fnOK: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			y := head + "spec:\n" + indent(tc.spec)
			errs := s.admit(obj(t, y))
			switch {
			case tc.schemaErr == "" && len(errs) > 0:
				t.Errorf("schema rejects it: %v", errs.ToAggregate())
			case tc.schemaErr != "" && len(errs) == 0:
				t.Errorf("schema admits it, want an error with %q", tc.schemaErr)
			case tc.schemaErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.schemaErr):
				t.Errorf("schema error %q does not contain %q", errs.ToAggregate(), tc.schemaErr)
			}
			rsp := run(t, newRequest(t, y, nil))
			// Whatever the schema rejects, the function rejects too (it also runs where no
			// API server checked the XR, e.g. crossplane render).
			want := tc.fnOK && tc.schemaErr == ""
			if fnOK := len(fatals(rsp)) == 0; fnOK != want {
				t.Errorf("function ok = %v, want %v (results %q)", fnOK, want, fatals(rsp))
			}
		})
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  ") {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestExamples admits the examples in testdata through the XRD's schema and composes them.
func TestExamples(t *testing.T) {
	s := loadProxySchema(t)
	for _, tc := range []struct{ file, wantNS string }{
		{"proxy-minimal.yaml", "team-a"},
		{"proxy-full.yaml", "team-b"},
		{"proxyclaim.yaml", "team-c"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			xr := obj(t, string(b))
			if xr["kind"] == "ProxyClaim" {
				// What Crossplane makes of the claim: a cluster-scoped XProxy with a claimRef.
				md := xr["metadata"].(map[string]any)
				spec := xr["spec"].(map[string]any)
				delete(spec, "writeConnectionSecretToRef")
				spec["claimRef"] = map[string]any{"apiVersion": xr["apiVersion"], "kind": "ProxyClaim", "name": md["name"], "namespace": md["namespace"]}
				xr["kind"] = "XProxy"
				xr["metadata"] = map[string]any{"name": md["name"].(string) + "-x7k2p"}
				claimSpec := map[string]any{"spec": map[string]any{}}
				for k, v := range spec {
					if k != "claimRef" {
						claimSpec["spec"].(map[string]any)[k] = v
					}
				}
				if errs := s.admit(claimSpec); len(errs) > 0 {
					t.Fatalf("schema rejects it: %v", errs.ToAggregate())
				}
			} else if errs := s.admit(xr); len(errs) > 0 {
				t.Fatalf("schema rejects it: %v", errs.ToAggregate())
			}
			j, _ := json.Marshal(xr)
			req := newRequest(t, string(j), nil)
			req.Input = compositionInput(t, "composition.yaml") // the shipped policy admits the examples
			rsp := run(t, req)
			mustNoFatal(t, rsp)
			for name, o := range desired(rsp) {
				if ns := o["metadata"].(map[string]any)["namespace"]; ns != tc.wantNS {
					t.Errorf("%s composed into %v, want %s", name, ns, tc.wantNS)
				}
			}
		})
	}
}

// TestXRDHostOnUpdate: a placed Proxy cannot be given a host later, nor a given host removed,
// nor a hostSelector changed (placement happens once and is kept).
func TestXRDHostOnUpdate(t *testing.T) {
	s := loadProxySchema(t)
	const head = "apiVersion: platform.kvm.crossplane.io/v1alpha1\nkind: Proxy\nmetadata: {name: web, namespace: team-a}\n"
	cases := map[string]struct {
		old, new string
		wantErr  string // "" admitted
	}{
		"Unchanged":       {old: "{image: {baseImageName: deb}}", new: "{image: {baseImageName: deb}, vcpu: 2}"},
		"HostAdded":       {old: "{image: {baseImageName: deb}}", new: "{image: {baseImageName: deb}, host: lab}", wantErr: "host cannot be set or removed after creation"},
		"HostRemoved":     {old: "{image: {baseImageName: deb}, host: lab}", new: "{image: {baseImageName: deb}}", wantErr: "host cannot be set or removed after creation"},
		"HostChanged":     {old: "{image: {baseImageName: deb}, host: lab}", new: "{image: {baseImageName: deb}, host: other}", wantErr: "host cannot change after creation"},
		"SelectorChanged": {old: "{image: {baseImageName: deb}, hostSelector: {zone: a}}", new: "{image: {baseImageName: deb}, hostSelector: {zone: b}}", wantErr: "hostSelector cannot change"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			oldObj, newObj := obj(t, head+"spec:\n"+indent(tc.old)), obj(t, head+"spec:\n"+indent(tc.new))
			errs, _ := s.cel.Validate(context.Background(), nil, s.structural, newObj, oldObj, celconfig.RuntimeCELCostBudget)
			got := errs.ToAggregate()
			switch {
			case tc.wantErr == "" && got != nil:
				t.Errorf("update refused: %v", got)
			case tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)):
				t.Errorf("update error %v, want one with %q", got, tc.wantErr)
			}
		})
	}
}
