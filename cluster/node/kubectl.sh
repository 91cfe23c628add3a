#!/usr/bin/env bash
# kubectl.sh ARGS... -- kubectl as admin on the node's cluster (cluster/node/up.sh), run in netns
# node: its API server is reachable nowhere else.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
exec ip netns exec "$NETNS" "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"
