package crossplane

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestXpkgBuild builds the three packages with cluster/xpkg/build.sh (what `make xpkg` runs)
// into a temporary directory and reads each back: the objects in its package.yaml, through
// `crossplane xpkg extract`, and its runtime image. Small stand-ins replace the provider and
// function binaries, so the test does not wait for two static builds; the packaging steps
// (staging, mkimage, xpkg build and its linter) are the real ones.
func TestXpkgBuild(t *testing.T) {
	cli := crossplaneCLI(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out, in := t.TempDir(), t.TempDir()
	stub := filepath.Join(in, "stub")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\necho stand-in\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(in, "ca.crt")
	if err := os.WriteFile(ca, []byte("test CA bundle\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, root, []string{
		"XPKG_OUTPUT_DIR=" + out, "CROSSPLANE_CLI=" + cli, "VERSION=v0.0.0-test",
		"PROVIDER_BIN=" + stub, "FUNCTION_BIN=" + stub, "CA_BUNDLE=" + ca,
	}, filepath.Join(root, "cluster", "xpkg", "build.sh"))
	t.Logf("cluster/xpkg/build.sh took %v:\n%s", r.took, r.stdout)

	provider := []string{"meta.pkg.crossplane.io/v1 Provider provider-kvm"}
	for _, f := range mustGlob(t, filepath.Join(repoRoot, "package", "crds", "*.yaml")) {
		for _, o := range readObjects(t, f) {
			provider = append(provider, "apiextensions.k8s.io/v1 CustomResourceDefinition "+o.GetName())
		}
	}
	if len(provider) != 7 {
		t.Errorf("package/crds has %d CRDs, want 6 (ProviderConfig, ClusterProviderConfig, ProviderConfigUsage, BaseImage, SeedVolume, KVMDomain)", len(provider)-1)
	}
	cases := []struct {
		name    string
		objects []string
		// files the runtime image must hold (path → content); nil: no runtime image
		image map[string]string
		entry string
		// examples: the folders of examples/ the package's examples layer holds
		examples []string
	}{
		{
			name:    "provider-kvm",
			objects: provider,
			image: map[string]string{
				"usr/local/bin/provider":            "#!/bin/sh\necho stand-in\n",
				"etc/ssl/certs/ca-certificates.crt": "test CA bundle\n",
			},
			entry:    "/usr/local/bin/provider",
			examples: []string{"provider", "baseimage", "seedvolume", "kvmdomain"},
		},
		{
			name:    "function-kvm-proxy",
			objects: []string{"meta.pkg.crossplane.io/v1beta1 Function function-kvm-proxy", "apiextensions.k8s.io/v1 CustomResourceDefinition proxypolicies.proxy.fn.kvm.crossplane.io"},
			image:   map[string]string{"usr/local/bin/function": "#!/bin/sh\necho stand-in\n"},
			entry:   "/usr/local/bin/function",
		},
		{
			name:     "configuration-kvm-proxy",
			examples: []string{"proxy", "app", "rbac"},
			objects: []string{
				"meta.pkg.crossplane.io/v1 Configuration configuration-kvm-proxy",
				"apiextensions.crossplane.io/v2 CompositeResourceDefinition proxies.platform.kvm.crossplane.io",
				"apiextensions.crossplane.io/v1 CompositeResourceDefinition xproxies.platform.kvm.crossplane.io",
				"apiextensions.crossplane.io/v1 Composition proxies.platform.kvm.crossplane.io",
				"apiextensions.crossplane.io/v1 Composition xproxies.platform.kvm.crossplane.io",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pkg := filepath.Join(out, tc.name+".xpkg")
			gz := filepath.Join(t.TempDir(), tc.name+".gz")
			mustRun(t, out, nil, cli, "xpkg", "extract", "--from-xpkg", pkg, "-o", gz)
			var got []string
			for _, o := range decodeAll(t, gunzip(t, gz)) {
				got = append(got, o.GetAPIVersion()+" "+o.GetKind()+" "+o.GetName())
			}
			if d := cmp.Diff(tc.objects, got, sortStrings); d != "" {
				t.Errorf("objects in %s's package.yaml (-want +got):\n%s", tc.name, d)
			}
			examples := checkRuntimeImage(t, pkg, tc.image, tc.entry)
			// The examples layer holds exactly the objects of the package's example folders.
			var want []string
			for _, d := range tc.examples {
				for _, f := range mustGlob(t, filepath.Join(repoRoot, "examples", d, "*.yaml")) {
					for _, o := range readObjects(t, f) {
						want = append(want, o.GetAPIVersion()+" "+o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
					}
				}
			}
			var shipped []string
			for _, o := range decodeAll(t, []byte(examples)) {
				shipped = append(shipped, o.GetAPIVersion()+" "+o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
			}
			if d := cmp.Diff(want, shipped, sortStrings); d != "" {
				t.Errorf("objects in %s's examples (-want +got):\n%s", tc.name, d)
			}
		})
	}
}

// checkRuntimeImage reads an .xpkg (a docker-archive image tarball) and checks that its
// layers below the package and examples layers hold exactly files (no runtime layers when
// files is nil), and the image config's entrypoint and user. It returns the examples layer's
// .up/examples.yaml.
func checkRuntimeImage(t *testing.T, pkg string, files map[string]string, entry string) (examples string) {
	t.Helper()
	layers, cfg := readImageTarball(t, pkg)
	got := map[string]string{}
	for _, l := range layers {
		tr := tar.NewReader(bytes.NewReader(l))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag != tar.TypeReg || h.Name == "package.yaml" {
				continue // directories, and the package layer itself
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if h.Name == ".up/examples.yaml" {
				examples = string(b)
				continue
			}
			got[h.Name] = string(b)
		}
	}
	want := files
	if want == nil {
		want = map[string]string{}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("runtime files in %s (-want +got):\n%s", filepath.Base(pkg), d)
	}
	if files == nil {
		return examples
	}
	if d := cmp.Diff([]string{entry}, cfg.Config.Entrypoint); d != "" {
		t.Errorf("entrypoint (-want +got):\n%s", d)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("image user is %q, want 65532:65532", cfg.Config.User)
	}
	return examples
}

// imageConfig is what the tests read of an image's config.
type imageConfig struct {
	Config struct {
		Entrypoint []string
		User       string
	} `json:"config"`
}

// readImageTarball reads a docker-archive tarball (manifest.json naming the config and the
// layers, each a file of the tarball) with the standard library: its layers, uncompressed, in
// order, and its config.
func readImageTarball(t *testing.T, file string) ([][]byte, imageConfig) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("cannot read %s as an image tarball: %v", file, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[path.Clean(h.Name)] = b
	}
	var manifest []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json of %s: %v (%d images, want 1)", file, err, len(manifest))
	}
	var cfg imageConfig
	if err := json.Unmarshal(entries[path.Clean(manifest[0].Config)], &cfg); err != nil {
		t.Fatalf("config of %s: %v", file, err)
	}
	var layers [][]byte
	for _, l := range manifest[0].Layers {
		b, ok := entries[path.Clean(l)]
		if !ok {
			t.Fatalf("%s: layer %s is not in the tarball", file, l)
		}
		if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: layer %s: %v", file, l, err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: layer %s: %v", file, l, err)
			}
		}
		layers = append(layers, b)
	}
	return layers, cfg
}

func gunzip(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return data
}
