#!/usr/bin/env bash
# Build the binaries that controller-runtime's envtest needs (kube-apiserver and etcd) from Go
# modules only: no Docker, no kind, no release tarballs. The binaries land in a cache directory
# outside the repository so later runs (and later CI runs on the same machine) skip the build.
#
#   cluster/controlplane/build.sh [BIN_DIR]     # default ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin
#   KUBEBUILDER_ASSETS=BIN_DIR go test ./...
#
# Idempotent: a binary that already reports the wanted version is kept. Concurrent runs are
# serialised with flock. Knobs: K8S_VERSION (v1.35.3), ETCD_VERSION (v3.6.6), WORK_DIR.
#
# Why these versions: crossplane-runtime/v2 v2.4.0 pins k8s.io/* v0.35.3, so kube-apiserver
# v1.35.3 is the exact match; etcd v3.6.6 is the version k8s v1.35.3 itself pins.
set -euo pipefail

BIN=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin}
K8S_VERSION=${K8S_VERSION:-v1.35.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.6}
WORK=${WORK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/controlplane-build}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

log() { printf '[controlplane] %s\n' "$*" >&2; }

mkdir -p "$BIN" "$WORK"
BIN=$(cd "$BIN" && pwd)
exec 9>"$BIN/.build.lock"
flock 9

# has_version FILE WANT: the first line of `FILE --version` contains WANT.
has_version() {
	local out
	[[ -x $1 ]] && out=$("$1" --version 2>/dev/null) && [[ ${out%%$'\n'*} == *"$2"* ]]
}

# k8s.io/kubernetes points its staging modules (k8s.io/api, ...) at ./staging/..., which a
# dependent module cannot see. A scratch module re-points each v0.0.0 requirement at the
# published v0.<minor>.<patch> release of the same Kubernetes version.
k8s_module() {
	local dir=$WORK/k8s-$K8S_VERSION json gomod
	mkdir -p "$dir"
	if [[ ! -e $dir/.tidy-ok ]]; then
		json=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION")
		gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$json")
		[[ -s $gomod ]] || { log "cannot read go.mod of k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
		{
			printf 'module controlplane/k8s\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n'
			printf 'require k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
			printf 'tool k8s.io/kubernetes/cmd/kube-apiserver\n\n'
			printf 'replace (\n'
			awk -v v="v0.${K8S_VERSION#v1.}" '
				/^require \(/ {r=1; next}  r && /^\)/ {r=0}
				r && $2 == "v0.0.0" {printf "\t%s => %s %s\n", $1, $1, v}' "$gomod"
			printf ')\n'
		} >"$dir/go.mod"
		(cd "$dir" && go mod tidy) >&2
		touch "$dir/.tidy-ok"
	fi
	echo "$dir"
}

build_apiserver() {
	local dir minor ld="-s -w" p t0=$SECONDS
	dir=$(k8s_module)
	minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	# Without these stamps /version reports v0.0.0-master and clients warn about skew.
	for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	log "building kube-apiserver $K8S_VERSION (about 7 minutes on 2 cores with a cold build cache)"
	(cd "$dir" && go build -trimpath -ldflags="$ld" -o "$BIN/.kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
	mv -f "$BIN/.kube-apiserver.tmp" "$BIN/kube-apiserver"
	log "kube-apiserver built in $((SECONDS - t0))s"
}

build_etcd() {
	local dir=$WORK/etcd-$ETCD_VERSION t0=$SECONDS
	mkdir -p "$dir"
	cat >"$dir/main.go" <<-'EOF'
		// Command etcd is a plain build of the upstream etcd server.
		package main

		import (
			"os"

			"go.etcd.io/etcd/server/v3/etcdmain"
		)

		func main() { etcdmain.Main(os.Args) }
	EOF
	if [[ ! -e $dir/.tidy-ok ]]; then
		printf 'module controlplane/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$dir/go.mod"
		(cd "$dir" && go mod tidy) >&2
		touch "$dir/.tidy-ok"
	fi
	log "building etcd $ETCD_VERSION"
	(cd "$dir" && go build -trimpath -ldflags="-s -w" -o "$BIN/.etcd.tmp" .)
	mv -f "$BIN/.etcd.tmp" "$BIN/etcd"
	log "etcd built in $((SECONDS - t0))s"
}

has_version "$BIN/kube-apiserver" "Kubernetes $K8S_VERSION" || build_apiserver
has_version "$BIN/etcd" "etcd Version: ${ETCD_VERSION#v}" || build_etcd

log "$("$BIN/kube-apiserver" --version), $("$BIN/etcd" --version 2>&1 | head -n1)"
echo "$BIN"
