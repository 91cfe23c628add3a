// Command mkxpkg builds one Crossplane package (.xpkg) from a directory of YAML files with
// crossplane-runtime's package builder (pkg/xpkg), the one `crossplane xpkg build` wraps, but
// with the types of crossplane/apis v2.4.0: the CLI v2.2.1 parses an XRD with a type that has
// no spec.versions[].subresources and drops them (decision 78).
//
//	mkxpkg -package-root package/ -examples-root examples/ \
//	  -runtime-image provider-image-arm64.tar -o provider-kvm-arm64.xpkg
//
// The builder parses every YAML file under -package-root, lints the package as Crossplane does
// (exactly one Provider, Function or Configuration meta with valid constraints, and only the
// objects that kind of package may carry), writes package.yaml as one layer and the examples
// under -examples-root (if that directory exists) as .up/examples.yaml in another, each
// annotated through the image config's labels, on top of the runtime image if one is given
// (an image tarball as cluster/xpkg/mkimage writes it). The result is a docker-archive image
// tarball, what `crossplane xpkg push` reads; several of them, one per platform, pushed
// together become an OCI image index.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crossplane/crossplane-runtime/v2/pkg/xpkg"
	"github.com/crossplane/crossplane-runtime/v2/pkg/xpkg/parser"
	"github.com/crossplane/crossplane-runtime/v2/pkg/xpkg/parser/examples"
	"github.com/crossplane/crossplane-runtime/v2/pkg/xpkg/parser/yaml"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/spf13/afero"
	"k8s.io/apimachinery/pkg/api/meta"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkxpkg:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mkxpkg", flag.ContinueOnError)
	root := fs.String("package-root", "", "directory of the package's crossplane.yaml and objects (required)")
	ex := fs.String("examples-root", "", "directory of the examples to ship (none if empty or missing)")
	rt := fs.String("runtime-image", "", "image tarball to embed as the package's runtime (Provider and Function packages)")
	out := fs.String("o", "", "the .xpkg file to write (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *root == "" || *out == "" {
		return errors.New("-package-root and -o are required")
	}
	var base v1.Image
	if *rt != "" {
		img, err := tarball.ImageFromPath(*rt, nil)
		if err != nil {
			return fmt.Errorf("cannot read the runtime image %s: %w", *rt, err)
		}
		base = img
	}
	img, name, err := Build(ctx, *root, *ex, base)
	if err != nil {
		return err
	}
	if err := Write(img, *out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("cannot compute the package's digest: %w", err)
	}
	fmt.Printf("%s: package %s, %s\n", *out, name, d)
	return nil
}

// Build builds the package of the YAML files under root, with the examples under examplesRoot
// (none when it is empty or does not exist), on base when base is not nil. It returns the
// package image and the name of its meta object. The package is linted as Crossplane lints it.
func Build(ctx context.Context, root, examplesRoot string, base v1.Image) (v1.Image, string, error) {
	osfs := afero.NewOsFs()
	filters := func(skip ...parser.FilterFn) parser.BackendOption {
		return parser.FsFilters(append([]parser.FilterFn{parser.SkipDirs(), parser.SkipNotYAML(), parser.SkipEmpty()}, skip...)...)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, "", err
	}
	pkgFilters := filters()
	exDir := filepath.Join(root, "no-examples-given") // absent: no examples layer
	if examplesRoot != "" {
		if exDir, err = filepath.Abs(examplesRoot); err != nil {
			return nil, "", err
		}
		pkgFilters = filters(xpkg.SkipContains(exDir)) // examples under the package root are not package objects
	}
	pp, err := yaml.New()
	if err != nil {
		return nil, "", fmt.Errorf("cannot make the package parser: %w", err)
	}
	b := xpkg.New(
		parser.NewFsBackend(osfs, parser.FsDir(root), pkgFilters),
		parser.NewFsBackend(osfs, parser.FsDir(exDir), filters()),
		pp, examples.New())
	var opts []xpkg.BuildOpt
	if base != nil {
		opts = append(opts, xpkg.WithBase(base))
	}
	img, m, err := b.Build(ctx, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("cannot build the package of %s: %w", root, err)
	}
	acc, err := meta.Accessor(m)
	if err != nil {
		return nil, "", fmt.Errorf("the package meta of %s has no name: %w", root, err)
	}
	return img, acc.GetName(), nil
}

// Write writes img to file as a docker-archive tarball without a tag, as `crossplane xpkg
// build` does; file is replaced only once it is complete.
func Write(img v1.Image, file string) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".mkxpkg-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename; best effort otherwise
	if err := tarball.Write(nil, img, tmp); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // G302: a package is public, as the CLI writes it
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	return nil
}
