package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is what the test compares of a tar header and its content.
type entry struct {
	Type    byte
	Mode    int64
	UID     int
	ModTime time.Time
	Data    string
}

func TestRunWritesARunnableImageTarball(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) { testRunWritesImage(t, arch) })
	}
}

func testRunWritesImage(t *testing.T, arch string) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!not really a binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	tag := "example.invalid/team/app:v1.2.3"
	if err := run([]string{"-binary", bin, "-path", "/usr/local/bin/app", "-tag", tag,
		"-file", ca + "=/etc/ssl/certs/ca-certificates.crt", "-arch", arch, "-o", out}); err != nil {
		t.Fatalf("run: %v", err)
	}

	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &ref)
	if err != nil {
		t.Fatalf("read the tarball back: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	type config struct {
		OS, Arch, User, WorkingDir string
		Entrypoint                 []string
		Created                    time.Time
	}
	gotCfg := config{cf.OS, cf.Architecture, cf.Config.User, cf.Config.WorkingDir, cf.Config.Entrypoint, cf.Created.UTC()}
	wantCfg := config{"linux", arch, "65532:65532", "/", []string{"/usr/local/bin/app"}, time.Unix(0, 0).UTC()}
	if d := cmp.Diff(wantCfg, gotCfg); d != "" {
		t.Errorf("image config (-want +got):\n%s", d)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = entry{h.Typeflag, h.Mode, h.Uid, h.ModTime.UTC(), string(b)}
	}
	epoch := time.Unix(0, 0).UTC()
	dir755 := entry{Type: tar.TypeDir, Mode: 0o755, ModTime: epoch}
	want := map[string]entry{
		"etc/":                              dir755,
		"etc/ssl/":                          dir755,
		"etc/ssl/certs/":                    dir755,
		"etc/ssl/certs/ca-certificates.crt": {Type: tar.TypeReg, Mode: 0o644, ModTime: epoch, Data: "-----BEGIN CERTIFICATE-----\n"},
		"tmp/":                              {Type: tar.TypeDir, Mode: 0o1777, ModTime: epoch},
		"usr/":                              dir755,
		"usr/local/":                        dir755,
		"usr/local/bin/":                    dir755,
		"usr/local/bin/app":                 {Type: tar.TypeReg, Mode: 0o755, ModTime: epoch, Data: "#!not really a binary\n"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("layer contents (-want +got):\n%s", d)
	}
}

func TestImageIsReproducible(t *testing.T) {
	files := map[string]File{"/app": {Data: []byte("x"), Mode: 0o755}}
	digest := func() string {
		img, err := Image(files, "/app", "amd64")
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	if a, b := digest(), digest(); a != b {
		t.Errorf("two builds of the same files differ: %s and %s", a, b)
	}
}

func TestRunRejects(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.tar")
	for name, args := range map[string][]string{
		"no binary":          {"-o", out},
		"missing binary":     {"-binary", filepath.Join(dir, "nope"), "-o", out},
		"relative path":      {"-binary", bin, "-path", "usr/bin/app", "-o", out},
		"bad tag":            {"-binary", bin, "-tag", "Not A Tag", "-o", out},
		"file without dest":  {"-binary", bin, "-file", bin, "-o", out},
		"file relative dest": {"-binary", bin, "-file", bin + "=etc/x", "-o", out},
		"unknown arch":       {"-binary", bin, "-arch", "s390x", "-o", out},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(args); err == nil {
				t.Errorf("run(%q) succeeded, want an error", args)
			}
		})
	}
}
