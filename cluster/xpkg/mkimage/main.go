// Command mkimage writes the runtime image of one static binary as an OCI image tarball,
// without Docker or a registry: the tarball `crossplane xpkg build
// --embed-runtime-image-tarball` takes (cluster/xpkg/build.sh).
//
//	mkimage -binary _output/provider -path /usr/local/bin/provider -arch amd64 \
//	  -tag xpkg.crossplane.io/provider-kvm/provider-kvm:v0.1.0 \
//	  -file /etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt \
//	  -o provider-image.tar
//
// The image has one layer: the binary at -path (also the entrypoint), a world-writable
// /tmp (the provider stages seed ISOs there), and any -file. It runs as 65532:65532 on
// linux/-arch (amd64 or arm64; the binary must be built for it). Every timestamp is the Unix epoch and the layer is written in a fixed order,
// so the same inputs give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// User is the user and group the image runs as: the conventional "nonroot" of distroless
// images, without a passwd entry.
const User = "65532:65532"

// epoch is every timestamp in the image.
var epoch = time.Unix(0, 0).UTC()

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// fileFlags collects repeated -file SRC=DST flags.
type fileFlags map[string]string

func (f fileFlags) String() string { return fmt.Sprint(map[string]string(f)) }

func (f fileFlags) Set(v string) error {
	src, dst, ok := strings.Cut(v, "=")
	if !ok || src == "" || !path.IsAbs(dst) {
		return fmt.Errorf("want SRC=/absolute/destination, got %q", v)
	}
	f[dst] = src
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	bin := fs.String("binary", "", "static binary to put in the image (required)")
	at := fs.String("path", "/usr/local/bin/app", "absolute path of the binary in the image; also the entrypoint")
	tag := fs.String("tag", "example.invalid/app:v0.0.0", "image reference recorded in the tarball")
	out := fs.String("o", "image.tar", "output tarball")
	arch := fs.String("arch", "amd64", "the image's architecture (linux/ARCH): amd64 or arm64")
	extra := fileFlags{}
	fs.Var(extra, "file", "extra file SRC=/DST to add (mode 0644); repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" {
		return errors.New("-binary is required")
	}
	if !knownArch(*arch) {
		return fmt.Errorf("-arch %q: want one of amd64, arm64", *arch)
	}
	files := map[string]File{}
	data, err := os.ReadFile(*bin)
	if err != nil {
		return fmt.Errorf("cannot read the binary: %w", err)
	}
	files[*at] = File{Data: data, Mode: 0o755}
	for dst, src := range extra {
		b, err := os.ReadFile(src) //nolint:gosec // G304: the build script names the files to embed
		if err != nil {
			return fmt.Errorf("cannot read extra file %s: %w", src, err)
		}
		files[dst] = File{Data: b, Mode: 0o644}
	}
	img, err := Image(files, *at, *arch)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("invalid -tag: %w", err)
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return fmt.Errorf("cannot write %s: %w", *out, err)
	}
	return nil
}

// File is a regular file of the image.
type File struct {
	Data []byte
	Mode int64
}

// knownArch reports whether an image may be built for arch: the architectures the packages ship.
func knownArch(arch string) bool { return arch == "amd64" || arch == "arm64" }

// Image returns a linux/arch image with one layer holding files (keyed by absolute path)
// and /tmp, whose entrypoint is entrypoint, running as User.
func Image(files map[string]File, entrypoint, arch string) (v1.Image, error) {
	if _, ok := files[entrypoint]; !ok {
		return nil, fmt.Errorf("the entrypoint %s is not one of the image's files", entrypoint)
	}
	layerData, err := layerTar(files)
	if err != nil {
		return nil, fmt.Errorf("cannot write the layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot make the layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "mkimage"},
	})
	if err != nil {
		return nil, fmt.Errorf("cannot append the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("cannot set the image config: %w", err)
	}
	return img, nil
}

// layerTar writes files, their parent directories and /tmp as a tar stream: directories
// first, then files, each sorted by path, all owned by root with epoch timestamps.
func layerTar(files map[string]File) ([]byte, error) {
	dirs := map[string]int64{"tmp": 0o1777} // world-writable with the sticky bit, as usual
	paths := make([]string, 0, len(files))
	for p := range files {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("%q is not a clean absolute file path", p)
		}
		paths = append(paths, p)
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := dirs[d[1:]]; !ok {
				dirs[d[1:]] = 0o755
			}
		}
	}
	dirNames := make([]string, 0, len(dirs))
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames) // a parent sorts before its children
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirNames {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirs[d], ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("directory %s: %w", d, err)
		}
	}
	for _, p := range paths {
		f := files[p]
		h := &tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("file %s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("file %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
