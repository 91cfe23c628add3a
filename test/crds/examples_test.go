package crds

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// xrGroup is the API group of the Proxy XRDs' composite resources and claims.
const xrGroup = "platform.kvm.crossplane.io"

// TestExamplesApply creates every object in examples/ on the real API server, so the
// examples never drift from the CRDs, and reads each back.
//
// Proxies and ProxyClaims (examples/proxy) are left out: their CRDs are made by Crossplane
// from the XRDs in package/configuration, and no Crossplane runs here. crossplane beta
// validate checks them against those XRDs instead (test/crossplane).
func TestExamplesApply(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(), "examples", "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	ensureNamespace(t, "crossplane-system")
	created := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 || u.GroupVersionKind().Group == xrGroup {
				continue
			}
			ctx := testContext(t)
			if ns := u.GetNamespace(); ns != "" {
				ensureNamespace(t, ns)
			}
			if err := kube.Create(ctx, u); err != nil && (!kerrors.IsAlreadyExists(err) || u.GetKind() != "Namespace") {
				t.Errorf("%s: create %s %s: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
				continue
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(u.GroupVersionKind())
			if err := kube.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, got); err != nil {
				t.Errorf("%s: read back %s %s: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
			created++
		}
	}
	if created < 8 {
		t.Errorf("created %d objects from examples, want at least 8 (one per kind plus Secrets)", created)
	}
}
