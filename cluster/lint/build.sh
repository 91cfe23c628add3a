#!/usr/bin/env bash
# Build golangci-lint from its Go module (no release download) into the cache directory
# outside the repository, so later runs skip the build.
#
#   cluster/lint/build.sh        # -> ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin/golangci-lint
#
# Idempotent: a binary recorded as built for the wanted version is kept (FORCE=1 rebuilds).
# Built in a scratch module with `go get module@exact-version` and `go build -mod=mod`, like
# cluster/crossplane/build.sh (the Go proxy here refuses some version lists).
set -euo pipefail

BIN=${BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin}
WORK=${WORK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/lint-build}
VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

log() { printf '[lint] %s\n' "$*" >&2; }

mkdir -p "$BIN" "$WORK"
BIN=$(cd "$BIN" && pwd)
exec 9>"$BIN/.lint-build.lock"
flock 9

out=$BIN/golangci-lint
if [[ ${FORCE:-0} != 1 && -x $out && -f $out.version && $(cat "$out.version") == "$VERSION" ]]; then
	log "golangci-lint $VERSION: cached"
	exit 0
fi
log "building golangci-lint $VERSION (about 4 minutes on 2 cores the first time)"
t0=$SECONDS
dir=$WORK/golangci-lint-$VERSION
mkdir -p "$dir"
cd "$dir"
[[ -f go.mod ]] || go mod init provider-kvm.local/golangci-lint >/dev/null 2>&1
go get "github.com/golangci/golangci-lint/v2@$VERSION"
go build -mod=mod -trimpath -ldflags "-s -w -X main.version=${VERSION#v}" -o "$out.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
mv "$out.tmp" "$out"
echo "$VERSION" >"$out.version"
"$out" version >&2
log "built golangci-lint $VERSION in $((SECONDS - t0)) s"
