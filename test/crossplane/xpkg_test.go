package crossplane

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// buildTimeout bounds cluster/xpkg/build.sh in TestXpkgBuild: on a cold build cache it compiles
// mkxpkg (crossplane-runtime's package builder and what it imports) before anything else.
const buildTimeout = 15 * time.Minute

// arches are the architectures of the runtime images the packages ship.
var arches = []string{"amd64", "arm64"} //nolint:gochecknoglobals // a constant list

// TestXpkgBuild builds the three packages with cluster/xpkg/build.sh (what `make xpkg` runs)
// into a temporary directory and reads each back: the objects in its package.yaml (every
// field of the sources kept, the XRDs' scale subresource among them), its examples layer and
// its runtime image per platform. A small Go stand-in replaces the provider and function
// commands, so the test does not wait for two static builds per platform; the packaging steps
// (staging, the cross-compile, mkimage, mkxpkg and its linter) are the real ones. Then the
// real CLI pushes each pair of per-platform packages to a loopback registry (crane) as users
// push them, and the test reads the OCI image index back: linux/amd64 and linux/arm64, each
// with an ELF binary of its machine.
func TestXpkgBuild(t *testing.T) {
	cli := crossplaneCLI(t)
	crane := tool(t, "CRANE", "crane")
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out, in := t.TempDir(), t.TempDir()
	ca := filepath.Join(in, "ca.crt")
	if err := os.WriteFile(ca, []byte("test CA bundle\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What an earlier build left in the output directory is not pushed with this one.
	if err := os.WriteFile(filepath.Join(out, "provider-kvm.xpkg"), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runFor(t, buildTimeout, root, []string{
		"XPKG_OUTPUT_DIR=" + out, "VERSION=v0.0.0-test", "XPKG_ARCHES=" + strings.Join(arches, " "),
		"PROVIDER_CMD=./test/crossplane/testdata/standin", "FUNCTION_CMD=./test/crossplane/testdata/standin",
		"CA_BUNDLE=" + ca,
	}, filepath.Join(root, "cluster", "xpkg", "build.sh"))
	if r.err != nil {
		t.Fatalf("cluster/xpkg/build.sh: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	t.Logf("cluster/xpkg/build.sh took %v:\n%s%s", r.took, r.stdout, r.stderr)
	var files []string
	for _, m := range mustGlob(t, filepath.Join(out, "*")) {
		files = append(files, filepath.Base(m))
	}
	wantFiles := []string{"configuration-kvm-proxy.xpkg"}
	for _, a := range arches {
		wantFiles = append(wantFiles, "provider-kvm-"+a+".xpkg", "function-kvm-proxy-"+a+".xpkg")
	}
	if d := cmp.Diff(wantFiles, files, sortStrings); d != "" {
		t.Errorf("files in the output directory (-want +got):\n%s", d)
	}

	provider := []string{"meta.pkg.crossplane.io/v1 Provider provider-kvm"}
	providerSources := []string{"crossplane.yaml"}
	for _, f := range mustGlob(t, filepath.Join(repoRoot, "package", "crds", "*.yaml")) {
		providerSources = append(providerSources, filepath.Join("crds", filepath.Base(f)))
		for _, o := range readObjects(t, f) {
			provider = append(provider, "apiextensions.k8s.io/v1 CustomResourceDefinition "+o.GetName())
		}
	}
	if len(provider) != 7 {
		t.Errorf("package/crds has %d CRDs, want 6 (ProviderConfig, ClusterProviderConfig, ProviderConfigUsage, BaseImage, SeedVolume, KVMDomain)", len(provider)-1)
	}
	functionSources := []string{"function/crossplane.yaml"}
	for _, f := range mustGlob(t, filepath.Join(repoRoot, "package", "function", "input", "*.yaml")) {
		functionSources = append(functionSources, filepath.Join("function", "input", filepath.Base(f)))
	}
	type pkgCase struct {
		name    string
		objects []string
		// sources: the files under package/ whose objects the package holds, every field kept
		sources []string
		// files the runtime image must hold (path → content; an ELF binary of the platform's
		// machine for the entrypoint); nil: no runtime image
		image map[string]string
		entry string
		arch  string
		// examples: the folders of examples/ the package's examples layer holds
		examples []string
	}
	var cases []pkgCase
	for _, a := range arches {
		cases = append(cases, pkgCase{
			name:    "provider-kvm-" + a,
			objects: provider,
			sources: providerSources,
			image: map[string]string{
				"usr/local/bin/provider":            elfFile,
				"etc/ssl/certs/ca-certificates.crt": "test CA bundle\n",
			},
			entry:    "/usr/local/bin/provider",
			arch:     a,
			examples: []string{"provider", "baseimage", "seedvolume", "kvmdomain"},
		}, pkgCase{
			name:    "function-kvm-proxy-" + a,
			objects: []string{"meta.pkg.crossplane.io/v1beta1 Function function-kvm-proxy", "apiextensions.k8s.io/v1 CustomResourceDefinition proxypolicies.proxy.fn.kvm.crossplane.io"},
			sources: functionSources,
			image:   map[string]string{"usr/local/bin/function": elfFile},
			entry:   "/usr/local/bin/function",
			arch:    a,
		})
	}
	cases = append(cases, pkgCase{
		name:     "configuration-kvm-proxy",
		examples: []string{"proxy", "app", "rbac"},
		objects: []string{
			"meta.pkg.crossplane.io/v1 Configuration configuration-kvm-proxy",
			"apiextensions.crossplane.io/v2 CompositeResourceDefinition proxies.platform.kvm.crossplane.io",
			"apiextensions.crossplane.io/v1 CompositeResourceDefinition xproxies.platform.kvm.crossplane.io",
			"apiextensions.crossplane.io/v1 Composition proxies.platform.kvm.crossplane.io",
			"apiextensions.crossplane.io/v1 Composition xproxies.platform.kvm.crossplane.io",
		},
		sources: []string{"configuration/crossplane.yaml", "configuration/xrd.yaml", "configuration/xrd-legacy.yaml",
			"configuration/composition.yaml", "configuration/composition-legacy.yaml"},
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pkg := filepath.Join(out, tc.name+".xpkg")
			// The CLI reads the package back as users' tools do.
			gz := filepath.Join(t.TempDir(), tc.name+".gz")
			mustRun(t, out, nil, cli, "xpkg", "extract", "--from-xpkg", pkg, "-o", gz)
			var got []string
			packaged := map[string]*unstructured.Unstructured{}
			for _, o := range decodeAll(t, gunzip(t, gz)) {
				key := o.GetAPIVersion() + " " + o.GetKind() + " " + o.GetName()
				got = append(got, key)
				packaged[key] = o
			}
			if d := cmp.Diff(tc.objects, got, sortStrings); d != "" {
				t.Errorf("objects in %s's package.yaml (-want +got):\n%s", tc.name, d)
			}
			// Every field of every source object is in the package, unchanged.
			for _, f := range tc.sources {
				for _, o := range readObjects(t, filepath.Join(repoRoot, "package", f)) {
					key := o.GetAPIVersion() + " " + o.GetKind() + " " + o.GetName()
					p, ok := packaged[key]
					if !ok {
						continue // reported above
					}
					if lost := lostFields(o.Object, p.Object, ""); len(lost) > 0 {
						t.Errorf("%s in %s lost or changed fields of package/%s:\n  %s", key, tc.name, f, strings.Join(lost, "\n  "))
					}
				}
			}
			if tc.name == "configuration-kvm-proxy" {
				checkScale(t, packaged)
			}
			examples := checkRuntimeImage(t, pkg, tc.image, tc.entry, tc.arch)
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

	t.Run("multi-platform push", func(t *testing.T) {
		reg := startRegistry(t, crane)
		for _, p := range []struct{ name, bin string }{{"provider-kvm", "usr/local/bin/provider"}, {"function-kvm-proxy", "usr/local/bin/function"}} {
			var pkgs []string
			for _, a := range arches {
				pkgs = append(pkgs, filepath.Join(out, p.name+"-"+a+".xpkg"))
			}
			ref := reg + "/provider-kvm/" + p.name + ":v0.0.0-test"
			mustRun(t, out, nil, cli, "xpkg", "push", "-f", strings.Join(pkgs, ","), ref)
			var index struct {
				MediaType string `json:"mediaType"`
				Manifests []struct {
					MediaType string `json:"mediaType"`
					Platform  struct {
						OS           string `json:"os"`
						Architecture string `json:"architecture"`
					} `json:"platform"`
				} `json:"manifests"`
			}
			m := mustRun(t, out, nil, crane, "manifest", ref)
			if err := json.Unmarshal([]byte(m.stdout), &index); err != nil {
				t.Fatalf("crane manifest %s: %v\n%s", ref, err, m.stdout)
			}
			var platforms []string
			for _, d := range index.Manifests {
				platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
			}
			wantPlatforms := []string{"linux/amd64", "linux/arm64"}
			if !strings.Contains(index.MediaType, "index") && !strings.Contains(index.MediaType, "manifest.list") {
				t.Errorf("%s is a %q, want an image index", ref, index.MediaType)
			}
			if d := cmp.Diff(wantPlatforms, platforms, sortStrings); d != "" {
				t.Errorf("platforms of %s (-want +got):\n%s", ref, d)
			}
			// What a node of each platform pulls runs there: the entrypoint is an ELF of its machine.
			for _, a := range arches {
				fs := filepath.Join(t.TempDir(), "fs.tar")
				mustRun(t, out, nil, crane, "export", "--platform", "linux/"+a, ref, fs)
				b := tarFile(t, fs, p.bin)
				if err := checkELF(b, a); err != nil {
					t.Errorf("%s of %s pulled for linux/%s: %v", p.bin, ref, a, err)
				}
			}
		}
	})
}

// elfFile stands for a runtime image's binary in checkRuntimeImage's expected files: an ELF
// executable of the image's architecture.
const elfFile = "<ELF binary>"

// checkScale checks that both packaged XRDs serve the scale subresource on every version, as
// `kubectl scale proxy/x` needs.
func checkScale(t *testing.T, packaged map[string]*unstructured.Unstructured) {
	t.Helper()
	want := map[string]any{"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
	for _, key := range []string{
		"apiextensions.crossplane.io/v2 CompositeResourceDefinition proxies.platform.kvm.crossplane.io",
		"apiextensions.crossplane.io/v1 CompositeResourceDefinition xproxies.platform.kvm.crossplane.io",
	} {
		xrd, ok := packaged[key]
		if !ok {
			continue // reported by the caller
		}
		versions, _, _ := unstructured.NestedSlice(xrd.Object, "spec", "versions")
		if len(versions) == 0 {
			t.Errorf("%s has no versions", key)
		}
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			scale, _, _ := unstructured.NestedMap(vm, "subresources", "scale")
			if d := cmp.Diff(want, scale); d != "" {
				t.Errorf("%s version %v: subresources.scale (-want +got):\n%s", key, vm["name"], d)
			}
		}
	}
}

// lostFields returns the paths of the fields of src that got does not hold with the same
// value. got may hold more (what the builder's typed encoder adds, such as an XRD's empty
// status).
func lostFields(src, got any, at string) []string {
	switch s := src.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: a %T, want an object", at, got)}
		}
		keys := make([]string, 0, len(s))
		for k := range s {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var lost []string
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				lost = append(lost, at+"."+k+": missing")
				continue
			}
			lost = append(lost, lostFields(s[k], gv, at+"."+k)...)
		}
		return lost
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(s) {
			return []string{fmt.Sprintf("%s: %d items, want %d", at, len(g), len(s))}
		}
		var lost []string
		for i := range s {
			lost = append(lost, lostFields(s[i], g[i], fmt.Sprintf("%s[%d]", at, i))...)
		}
		return lost
	default:
		if !reflect.DeepEqual(src, got) {
			return []string{fmt.Sprintf("%s: %v, want %v", at, got, src)}
		}
		return nil
	}
}

// checkELF returns an error unless b is a static little-endian ELF executable for arch.
func checkELF(b []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF file: %w", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("an ELF %v %v %v, want %v %v %v", f.Class, f.Type, f.Machine, elf.ELFCLASS64, elf.ET_EXEC, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (has an interpreter), want static")
		}
	}
	return nil
}

// startRegistry starts crane's in-memory OCI registry on a loopback port for the test and
// returns its address.
func startRegistry(t *testing.T, crane string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(crane, "registry", "serve", "--address", addr)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("crane registry serve: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("crane registry serve does not listen on %s: %v\n%s", addr, err, log.String())
		}
	}
}

// tarFile returns the content of the regular file name in the tarball file.
func tarFile(t *testing.T, file, name string) []byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in %s", name, file)
		}
		if err != nil {
			t.Fatal(err)
		}
		if path.Clean(h.Name) == name && h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// checkRuntimeImage reads an .xpkg (a docker-archive image tarball) and checks that its
// layers below the package and examples layers hold exactly files (no runtime layers when
// files is nil; elfFile for an ELF executable of arch), and the image config's entrypoint,
// user and platform. It returns the examples layer's .up/examples.yaml.
func checkRuntimeImage(t *testing.T, pkg string, files map[string]string, entry, arch string) (examples string) {
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
			if files[h.Name] == elfFile {
				if err := checkELF(b, arch); err != nil {
					t.Errorf("%s in %s: %v", h.Name, filepath.Base(pkg), err)
				} else {
					b = []byte(elfFile)
				}
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
	if cfg.OS != "linux" || cfg.Architecture != arch {
		t.Errorf("image platform is %s/%s, want linux/%s", cfg.OS, cfg.Architecture, arch)
	}
	return examples
}

// imageConfig is what the tests read of an image's config.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
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
