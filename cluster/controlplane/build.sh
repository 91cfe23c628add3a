#!/usr/bin/env bash
# Build the control plane binaries from Go modules only: no Docker, no kind, no release
# tarballs. kube-apiserver and etcd are what controller-runtime's envtest needs; make e2e and
# make demo also run kube-controller-manager (only its garbage collector: Crossplane relies on
# it to delete composed resources) and use kubectl. The node (cluster/node: pods on a real
# kubelet) adds kubelet, kube-proxy and kube-scheduler. The binaries land in a cache directory
# outside the repository so later runs (and later CI runs on the same machine) skip the build.
#
#   cluster/controlplane/build.sh [BIN_DIR] [TARGET...]
#       BIN_DIR default ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin
#       TARGET: kube-apiserver etcd kube-controller-manager kubectl (default: these four)
#               kubelet kube-proxy kube-scheduler (cluster/node/build.sh asks for these)
#   KUBEBUILDER_ASSETS=BIN_DIR go test ./...
#
# Idempotent: a binary that already reports the wanted version is kept. Concurrent builds are
# serialised with flock; a run whose targets are built takes no lock. Knobs: K8S_VERSION
# (v1.35.3), ETCD_VERSION (v3.6.6), WORK_DIR.
# Every missing k8s.io/kubernetes command is built by ONE `go build` (one package graph, each
# shared package compiled once, links in parallel), from one scratch module and GOCACHE.
#
# Why these versions: crossplane-runtime/v2 v2.4.0 pins k8s.io/* v0.35.3, so kube-apiserver
# v1.35.3 is the exact match; etcd v3.6.6 is the version k8s v1.35.3 itself pins.
set -euo pipefail

BIN=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin}
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(kube-apiserver etcd kube-controller-manager kubectl)
K8S_VERSION=${K8S_VERSION:-v1.35.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.6}
WORK=${WORK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/controlplane-build}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

log() { printf '[controlplane] %s\n' "$*" >&2; }

mkdir -p "$BIN" "$WORK"
BIN=$(cd "$BIN" && pwd)

# has_version FILE WANT: the first line of `FILE --version` contains WANT.
has_version() {
	local out
	[[ -x $1 ]] && out=$("$1" --version 2>/dev/null) && [[ ${out%%$'\n'*} == *"$2"* ]]
}

# k8s.io/kubernetes points its staging modules (k8s.io/api, ...) at ./staging/..., which a
# dependent module cannot see. A scratch module re-points each v0.0.0 requirement at the
# published v0.<minor>.<patch> release of the same Kubernetes version.
# The commands built from k8s.io/kubernetes; the scratch module lists them as tools so that
# `go mod tidy` records every module they need. .tidy-ok holds the list it was tidied for.
K8S_TOOLS="cmd/kube-apiserver cmd/kube-controller-manager cmd/kubectl cmd/kubelet cmd/kube-proxy cmd/kube-scheduler"
k8s_module() {
	local dir=$WORK/k8s-$K8S_VERSION json gomod t
	mkdir -p "$dir"
	if [[ ! -e $dir/.tidy-ok || $(cat "$dir/.tidy-ok") != "$K8S_TOOLS" ]]; then
		json=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION")
		gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$json")
		[[ -s $gomod ]] || { log "cannot read go.mod of k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
		{
			printf 'module controlplane/k8s\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n'
			printf 'require k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
			for t in $K8S_TOOLS; do printf 'tool k8s.io/kubernetes/%s\n' "$t"; done
			printf '\n'
			printf 'replace (\n'
			awk -v v="v0.${K8S_VERSION#v1.}" '
				/^require \(/ {r=1; next}  r && /^\)/ {r=0}
				r && $2 == "v0.0.0" {printf "\t%s => %s %s\n", $1, $1, v}' "$gomod"
			printf ')\n'
		} >"$dir/go.mod"
		(cd "$dir" && go mod tidy) >&2
		echo "$K8S_TOOLS" >"$dir/.tidy-ok"
	fi
	echo "$dir"
}

# build_k8s NAME...: build k8s.io/kubernetes/cmd/NAME into $BIN/NAME for each NAME, all in
# one go build, version-stamped.
build_k8s() {
	local dir minor ld="-s -w" p n t0=$SECONDS pkgs=() tmp
	dir=$(k8s_module)
	minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	# Without these stamps /version reports v0.0.0-master and clients warn about skew.
	for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	for n in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$n"); done
	log "building $* $K8S_VERSION (cold build cache, 2 cores: kube-apiserver about 7 min, then kube-controller-manager 3, kubectl 1; see cluster/node/README.md for the node's)"
	tmp=$BIN/.k8s-build.tmp
	rm -rf "$tmp"; mkdir -p "$tmp"
	(cd "$dir" && go build -trimpath -ldflags="$ld" -o "$tmp/" "${pkgs[@]}")
	for n in "$@"; do mv -f "$tmp/$n" "$BIN/$n"; done
	rmdir "$tmp"
	log "$* built in $((SECONDS - t0))s"
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

# kubectl has no --version; its `version --client` prints "Client Version: v1.35.3".
kubectl_ok() {
	local out
	[[ -x $BIN/kubectl ]] && out=$("$BIN/kubectl" version --client 2>/dev/null) && [[ ${out%%$'\n'*} == "Client Version: $K8S_VERSION" ]]
}

# The build lock is taken only when a target is missing or of another version, and the targets
# are checked again under it: a run that finds them built (make test's envtest-bins beside
# .ci/run's second half, which builds for minutes) does not wait for another run's build.
needed=0
for t in "${TARGETS[@]}"; do
	case $t in
	kubectl) kubectl_ok || needed=1 ;;
	etcd) has_version "$BIN/etcd" "etcd Version: ${ETCD_VERSION#v}" || needed=1 ;;
	*) has_version "$BIN/$t" "Kubernetes $K8S_VERSION" || needed=1 ;;
	esac
done
if [[ $needed == 1 ]]; then
	exec 9>"$BIN/.build.lock"
	flock 9
fi

K8S_BUILD=()
for t in "${TARGETS[@]}"; do
	case $t in
	kube-apiserver | kube-controller-manager | kubelet | kube-proxy | kube-scheduler)
		has_version "$BIN/$t" "Kubernetes $K8S_VERSION" || K8S_BUILD+=("$t") ;;
	kubectl)
		kubectl_ok || K8S_BUILD+=(kubectl) ;;
	etcd)
		has_version "$BIN/etcd" "etcd Version: ${ETCD_VERSION#v}" || build_etcd ;;
	*)
		log "unknown target $t"
		exit 2 ;;
	esac
done
[[ ${#K8S_BUILD[@]} -eq 0 ]] || build_k8s "${K8S_BUILD[@]}"

for t in "${TARGETS[@]}"; do
	case $t in
	etcd) log "etcd: $("$BIN/etcd" --version 2>&1 | head -n1)" ;;
	kubectl) log "kubectl: $("$BIN/kubectl" version --client 2>/dev/null | head -n1)" ;;
	*) log "$t: $("$BIN/$t" --version)" ;;
	esac
done
echo "$BIN"
