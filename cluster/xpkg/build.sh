#!/usr/bin/env bash
# Build the project's three Crossplane packages offline, without Docker, with crossplane-runtime's
# package builder (cluster/xpkg/mkxpkg):
#
#   _output/xpkg/provider-kvm-ARCH.xpkg        package/crossplane.yaml + package/crds, with the
#                                              linux/ARCH runtime image of cmd/provider
#   _output/xpkg/function-kvm-proxy-ARCH.xpkg  package/function/crossplane.yaml, with the
#                                              linux/ARCH runtime image of cmd/function
#   _output/xpkg/configuration-kvm-proxy.xpkg  package/configuration: meta, XRDs, Compositions
#
# ARCH is amd64 and arm64. The per-platform packages of one name pushed together make a
# multi-platform package (an OCI image index):
#   crossplane xpkg push -f _output/xpkg/provider-kvm-amd64.xpkg,_output/xpkg/provider-kvm-arm64.xpkg REF
#
#   cluster/xpkg/build.sh            # what `make xpkg` runs (after `make tools`)
#
# Environment:
#   XPKG_OUTPUT_DIR  where the .xpkg files go (default _output/xpkg in the repository)
#   VERSION          version stamped into the binaries and the image tags (default: the release
#                    tag on HEAD, else v0.1.0, which the Configuration's constraints accept)
#   XPKG_ARCHES      the platforms' architectures (default "amd64 arm64"; "amd64" skips the
#                    arm64 cross-compile where only amd64 nodes run the packages)
#   PROVIDER_CMD, FUNCTION_CMD
#                    build these Go packages instead of ./cmd/provider and ./cmd/function
#                    (test/crossplane uses a small stand-in to stay fast)
#   CA_BUNDLE        CA certificates copied into the provider's image, so that BaseImages can
#                    be fetched over https (default /etc/ssl/certs/ca-certificates.crt; empty: none)
#
# Each runtime image is one layer with one static binary (CGO_ENABLED=0, -trimpath, cross-compiled
# for each ARCH), made by cluster/xpkg/mkimage. mkxpkg lints each package as Crossplane does and
# keeps every field of the XRDs, which `crossplane xpkg build` v2.2.1 does not (it drops their
# scale subresource, decision 78). Every package is built from a staging directory holding
# exactly the files that belong in it, because the builder takes every YAML file under its
# package root (package/ holds the function's and the configuration's folders too); each
# package's examples are staged the same way.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${XPKG_OUTPUT_DIR:-$ROOT/_output/xpkg}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # a relative XPKG_OUTPUT_DIR is relative to the caller's directory
cd "$ROOT"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

VERSION=${VERSION:-$(git describe --tags --exact-match 2>/dev/null || echo v0.1.0)}
read -r -a ARCHES <<<"${XPKG_ARCHES:-amd64 arm64}"
CA_BUNDLE=${CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
LDFLAGS="-s -w -X github.com/provider-kvm/provider-kvm/internal/version.Version=$VERSION"
REGISTRY=xpkg.crossplane.io/provider-kvm

log() { printf '[xpkg] %s\n' "$*" >&2; }

for arch in "${ARCHES[@]}"; do
	[[ $arch == amd64 || $arch == arm64 ]] || {
		log "XPKG_ARCHES: unknown architecture $arch (amd64, arm64)"
		exit 1
	}
done
[[ ${#ARCHES[@]} -gt 0 ]] || {
	log "XPKG_ARCHES is empty"
	exit 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/provider-kvm-xpkg.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

log "version $VERSION; building binaries for linux/{${ARCHES[*]}}"
mkdir -p "$WORK/bin"
(cd cluster/xpkg/mkimage && go build -o "$WORK/bin/mkimage" .) # modules of their own
(cd cluster/xpkg/mkxpkg && go build -o "$WORK/bin/mkxpkg" .)
for arch in "${ARCHES[@]}"; do
	for cmd in provider function; do
		pkg=${cmd^^}_CMD
		t0=$SECONDS
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$LDFLAGS" \
			-o "$WORK/bin/$cmd-$arch" "${!pkg:-./cmd/$cmd}"
		log "$cmd linux/$arch built in $((SECONDS - t0))s"
	done
done

ca=()
if [[ -n $CA_BUNDLE ]]; then
	[[ -r $CA_BUNDLE ]] || {
		log "CA bundle $CA_BUNDLE not readable (install ca-certificates, or set CA_BUNDLE= to build without one)"
		exit 1
	}
	ca=(-file "$CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt")
fi
for arch in "${ARCHES[@]}"; do
	"$WORK/bin/mkimage" -binary "$WORK/bin/provider-$arch" -path /usr/local/bin/provider -arch "$arch" \
		-tag "$REGISTRY/provider-kvm:$VERSION-$arch" "${ca[@]}" -o "$WORK/bin/provider-image-$arch.tar"
	"$WORK/bin/mkimage" -binary "$WORK/bin/function-$arch" -path /usr/local/bin/function -arch "$arch" \
		-tag "$REGISTRY/function-kvm-proxy:$VERSION-$arch" -o "$WORK/bin/function-image-$arch.tar"
done

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

# What an earlier build left (another XPKG_ARCHES, the single-platform names before
# multi-platform packages) would be pushed with this build's packages: gone first.
rm -f "$OUT"/provider-kvm*.xpkg "$OUT"/function-kvm-proxy*.xpkg "$OUT"/configuration-kvm-proxy*.xpkg

# xpkg FILE ROOT EXAMPLES [IMAGE]: build $OUT/FILE from ROOT with the examples in EXAMPLES,
# embedding the runtime image IMAGE if given.
xpkg() {
	local args=(-package-root "$2" -examples-root "$3" -o "$OUT/$1")
	[[ -z ${4:-} ]] || args+=(-runtime-image "$4")
	"$WORK/bin/mkxpkg" "${args[@]}"
}
files=()
for arch in "${ARCHES[@]}"; do
	xpkg "provider-kvm-$arch.xpkg" "$WORK/provider" "$WORK/examples-provider" "$WORK/bin/provider-image-$arch.tar"
	xpkg "function-kvm-proxy-$arch.xpkg" "$WORK/function/function" "$WORK/examples-function" "$WORK/bin/function-image-$arch.tar"
	files+=("provider-kvm-$arch.xpkg" "function-kvm-proxy-$arch.xpkg")
done
xpkg configuration-kvm-proxy.xpkg "$WORK/configuration/configuration" "$WORK/examples-configuration"
files+=(configuration-kvm-proxy.xpkg)

for f in "${files[@]}"; do
	printf '%-55s %8s bytes\n' "$OUT/$f" "$(stat -c %s "$OUT/$f")"
done
