package crds

import (
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestCRDsEstablished proves the API server accepted every CRD in package/crds.
func TestCRDsEstablished(t *testing.T) {
	ctx := testContext(t)
	var got []string
	for _, c := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := kube.Get(ctx, types.NamespacedName{Name: c.GetName()}, crd); err != nil {
			t.Fatalf("get CRD %s: %v", c.GetName(), err)
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				got = append(got, crd.Spec.Names.Kind)
			}
		}
	}
	sort.Strings(got)
	want := []string{"BaseImage", "ClusterProviderConfig", "KVMDomain", "ProviderConfig", "ProviderConfigUsage", "SeedVolume"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("established CRDs: -want, +got:\n%s", diff)
	}
}

// TestEveryFieldDocumented walks each CRD's schema: `kubectl explain` shows a property's
// description, so every property must have one.
func TestEveryFieldDocumented(t *testing.T) {
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			var missing []string
			walkSchema(v.Schema.OpenAPIV3Schema, "", &missing)
			if len(missing) > 0 {
				t.Errorf("%s %s: properties without a description:\n  %s", c.Spec.Names.Kind, v.Name, strings.Join(missing, "\n  "))
			}
		}
	}
}

func walkSchema(s *apiextensionsv1.JSONSchemaProps, path string, missing *[]string) {
	if s == nil {
		return
	}
	for name, p := range s.Properties {
		if path == "" && name == "metadata" {
			continue // kubectl explain documents ObjectMeta from the core API
		}
		if strings.TrimSpace(p.Description) == "" {
			*missing = append(*missing, path+"."+name)
		}
		walkSchema(&p, path+"."+name, missing)
	}
	if s.Items != nil {
		walkSchema(s.Items.Schema, path+"[]", missing)
	}
}
