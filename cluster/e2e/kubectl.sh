#!/usr/bin/env bash
# kubectl.sh ARGS... -- kubectl (v1.35.3 from ~/.cache/provider-kvm/bin) against the API server
# of `make demo` (or of a running `make e2e`), which listens on loopback inside the test bed's
# network namespace. Example: cluster/e2e/kubectl.sh -n demo get proxy squid
set -euo pipefail
export TB=${TB:-/var/lib/provider-kvm-testbed}
WORK=${E2E_WORK:-/var/lib/provider-kvm-e2e}
BIN=${BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin}
[[ -s $WORK/kubeconfig ]] || { echo "kubectl.sh: no $WORK/kubeconfig: is make demo up?" >&2; exit 1; }
exec "$(dirname "$0")/../testbed/run-in-netns.sh" env KUBECONFIG="$WORK/kubeconfig" "$BIN/kubectl" "$@"
