#!/usr/bin/env bash
# Build the project's three Crossplane packages offline, with the real CLI and no Docker:
#
#   _output/xpkg/provider-kvm.xpkg             package/crossplane.yaml + package/crds, with the
#                                              runtime image of cmd/provider
#   _output/xpkg/function-kvm-proxy.xpkg       package/function/crossplane.yaml, with the runtime
#                                              image of cmd/function
#   _output/xpkg/configuration-kvm-proxy.xpkg  package/configuration: meta, XRDs, Compositions
#
#   cluster/xpkg/build.sh            # what `make xpkg` runs (after `make tools`)
#
# Environment:
#   XPKG_OUTPUT_DIR  where the .xpkg files go (default _output/xpkg in the repository)
#   VERSION          version stamped into the binaries and the image tags (default: the release
#                    tag on HEAD, else v0.1.0, which the Configuration's constraints accept)
#   CROSSPLANE_CLI   the crossplane CLI (default ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin/crossplane,
#                    built by cluster/crossplane/build.sh)
#   PROVIDER_BIN, FUNCTION_BIN
#                    package these files instead of building cmd/provider and cmd/function
#                    (test/crossplane uses small stand-ins to stay fast)
#   CA_BUNDLE        CA certificates copied into the provider's image, so that BaseImages can
#                    be fetched over https (default /etc/ssl/certs/ca-certificates.crt; empty: none)
#
# Each runtime image is one layer with one static binary (CGO_ENABLED=0, -trimpath), made by
# cluster/xpkg/mkimage. `crossplane xpkg build` also lints each package. Every package is built
# from a staging directory holding exactly the files that belong in it, because the CLI takes
# every YAML file under --package-root (package/ holds the function's and the configuration's
# folders too) and would pick up ./examples unless told otherwise; each package's examples are
# staged the same way.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${XPKG_OUTPUT_DIR:-$ROOT/_output/xpkg}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # a relative XPKG_OUTPUT_DIR is relative to the caller's directory
cd "$ROOT"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

VERSION=${VERSION:-$(git describe --tags --exact-match 2>/dev/null || echo v0.1.0)}
CLI=${CROSSPLANE_CLI:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin/crossplane}
CA_BUNDLE=${CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
LDFLAGS="-s -w -X github.com/provider-kvm/provider-kvm/internal/version.Version=$VERSION"
REGISTRY=xpkg.crossplane.io/provider-kvm

log() { printf '[xpkg] %s\n' "$*" >&2; }

[[ -x $CLI ]] || {
	log "no crossplane CLI at $CLI: run 'make tools' (cluster/crossplane/build.sh) or set CROSSPLANE_CLI"
	exit 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/provider-kvm-xpkg.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

log "version $VERSION; building binaries"
mkdir -p "$WORK/bin"
(cd cluster/xpkg/mkimage && go build -o "$WORK/bin/mkimage" .) # a module of its own
for cmd in provider function; do
	prebuilt=${cmd^^}_BIN
	if [[ -n ${!prebuilt:-} ]]; then
		cp "${!prebuilt}" "$WORK/bin/$cmd"
	else
		CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "$LDFLAGS" -o "$WORK/bin/$cmd" "./cmd/$cmd"
	fi
done

ca=()
if [[ -n $CA_BUNDLE ]]; then
	[[ -r $CA_BUNDLE ]] || {
		log "CA bundle $CA_BUNDLE not readable (install ca-certificates, or set CA_BUNDLE= to build without one)"
		exit 1
	}
	ca=(-file "$CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt")
fi
"$WORK/bin/mkimage" -binary "$WORK/bin/provider" -path /usr/local/bin/provider \
	-tag "$REGISTRY/provider-kvm:$VERSION" "${ca[@]}" -o "$WORK/bin/provider-image.tar"
"$WORK/bin/mkimage" -binary "$WORK/bin/function" -path /usr/local/bin/function \
	-tag "$REGISTRY/function-kvm-proxy:$VERSION" -o "$WORK/bin/function-image.tar"

# stage NAME FILE... copies the files (paths relative to package/) into $WORK/NAME.
stage() {
	local dir=$WORK/$1 f
	shift
	for f in "$@"; do
		mkdir -p "$dir/$(dirname "$f")"
		cp "package/$f" "$dir/$f"
	done
}
(cd package && ls crds/*.yaml) >"$WORK/crds.list"
mapfile -t crds <"$WORK/crds.list"
stage provider crossplane.yaml "${crds[@]}"
# The function's input CRD (ProxyPolicy) travels with it, as function-template-go's
# package/input does: Crossplane installs it with the Function, so tools can explain and
# validate a Composition's input against it.
(cd package && ls function/input/*.yaml) >"$WORK/function-input.list"
mapfile -t fninput <"$WORK/function-input.list"
stage function function/crossplane.yaml "${fninput[@]}"
stage configuration configuration/crossplane.yaml configuration/xrd.yaml configuration/xrd-legacy.yaml \
	configuration/composition.yaml configuration/composition-legacy.yaml

# The examples users copy travel in the packages (an examples layer, shown by registries and
# tools): the managed resources' and the host configs' with the provider, the Proxy's, the
# application Pod's and the app team's RBAC with the configuration.
examples() {
	local dir=$WORK/examples-$1 d
	shift
	mkdir -p "$dir"
	for d in "$@"; do cp -r "examples/$d" "$dir/$d"; done
}
examples provider provider baseimage seedvolume kvmdomain
examples configuration proxy app rbac
mkdir -p "$WORK/examples-function"

# xpkg NAME ROOT EXAMPLES [IMAGE]: build $OUT/NAME.xpkg from ROOT with the examples in EXAMPLES,
# embedding IMAGE if given.
xpkg() {
	local name=$1 root=$2 examples=$3 image=${4:-}
	local args=(xpkg build --package-root="$root" --examples-root="$examples"
		--package-file="$OUT/$name.xpkg")
	[[ -z $image ]] || args+=(--embed-runtime-image-tarball="$image")
	rm -f "$OUT/$name.xpkg"
	"$CLI" "${args[@]}"
}
xpkg provider-kvm "$WORK/provider" "$WORK/examples-provider" "$WORK/bin/provider-image.tar"
xpkg function-kvm-proxy "$WORK/function/function" "$WORK/examples-function" "$WORK/bin/function-image.tar"
xpkg configuration-kvm-proxy "$WORK/configuration/configuration" "$WORK/examples-configuration"

for name in provider-kvm function-kvm-proxy configuration-kvm-proxy; do
	printf '%-50s %8s bytes\n' "$OUT/$name.xpkg" "$(stat -c %s "$OUT/$name.xpkg")"
done
