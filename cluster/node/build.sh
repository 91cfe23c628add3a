#!/usr/bin/env bash
# build.sh [BIN_DIR] -- the node's Kubernetes binaries: kubelet, kube-proxy and kube-scheduler
# v1.35.3, built by cluster/controlplane/build.sh from the same k8s.io/kubernetes scratch module,
# GOCACHE and version stamps as kube-apiserver, in one `go build` (shared packages compile
# once). Idempotent: binaries that report the wanted version are kept. Prints BIN_DIR.
#   BIN_DIR default ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin
# Cost measured on 2 cores: see cluster/node/README.md.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
exec nice -n "${NICE:-10}" "$HERE/../controlplane/build.sh" "${1:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin}" \
	kubelet kube-proxy kube-scheduler
