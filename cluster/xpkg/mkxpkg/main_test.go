package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const configMeta = `apiVersion: meta.pkg.crossplane.io/v1
kind: Configuration
metadata: {name: demo}
spec:
  crossplane: {version: ">=v2.0.0"}
`

const xrd = `apiVersion: apiextensions.crossplane.io/v2
kind: CompositeResourceDefinition
metadata: {name: widgets.example.org}
spec:
  group: example.org
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    referenceable: true
    subresources:
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema: {type: object}
`

// write writes files (name → content) into a new directory and returns it.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunKeepsTheXRDsScaleSubresource(t *testing.T) {
	root := write(t, map[string]string{"crossplane.yaml": configMeta, "xrd.yaml": xrd, "notes.txt": "not YAML: skipped"})
	ex := write(t, map[string]string{"widget.yaml": "apiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w}\n"})
	out := filepath.Join(t.TempDir(), "demo.xpkg")
	if err := run(context.Background(), []string{"-package-root", root, "-examples-root", ex, "-o", out}); err != nil {
		t.Fatalf("run: %v", err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatalf("read the package back: %v", err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("package has %d layers, want 2 (package.yaml, examples)", len(layers))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var annotated []string
	for k, v := range cf.Config.Labels {
		if strings.HasPrefix(k, "io.crossplane.xpkg:") {
			annotated = append(annotated, v)
		}
	}
	if len(annotated) != 2 {
		t.Errorf("image config labels %v: want the package and examples layers annotated", cf.Config.Labels)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"subresources:", "specReplicasPath: .spec.replicas", "statusReplicasPath: .status.replicas"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the package layer has no %q:\n%s", want, b)
		}
	}
}

func TestRunLintsThePackage(t *testing.T) {
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
	for name, files := range map[string]map[string]string{
		"no meta":               {"xrd.yaml": xrd},
		"two metas":             {"crossplane.yaml": configMeta, "again.yaml": strings.Replace(configMeta, "demo", "again", 1)},
		"object not allowed":    {"crossplane.yaml": configMeta, "d.yaml": deployment},
		"bad crossplane semver": {"crossplane.yaml": strings.Replace(configMeta, ">=v2.0.0", "not a range", 1)},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "x.xpkg")
			if err := run(context.Background(), []string{"-package-root", write(t, files), "-o", out}); err == nil {
				t.Errorf("run succeeded, want the linter's error")
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("%s written for a package that does not lint (stat: %v)", out, err)
			}
		})
	}
}
