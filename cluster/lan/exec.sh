#!/usr/bin/env bash
# exec.sh NAME CMD... -- run CMD where it belongs on the LAN test bed (cluster/lan/up.sh):
#   exec.sh host-a virsh list --all   in host-a's network, mount and UTS namespaces (its own
#                                     libvirt socket, state and hostname; what its sshd sees)
#   exec.sh node go test ./...        in netns node with the LAN_* variables of $LAN_DIR/env.sh
#   exec.sh lan ip -s link            in netns lan (the bridge and dnsmasq)
# GOPROXY=off: no namespace has a way out; modules must already be in the module cache.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/lan/lib.sh
. "$HERE/lib.sh"
[ $# -ge 2 ] || { sed -n '2,7p' "$0" >&2; exit 2; }
[ -r "$LAN_DIR/env.sh" ] || { echo "exec.sh: $LAN_DIR/env.sh missing; run cluster/lan/up.sh first" >&2; exit 1; }
# shellcheck disable=SC1091
. "$LAN_DIR/env.sh"
export GOPROXY=off
name=$1; shift
case "$name" in
  host-a|host-b) exec nsenter --net="/run/netns/$name" --mount="$(mnt_ns "$name")" --uts="$(uts_ns "$name")" "$@" ;;
  "$NODE_NS"|"$LAN_NS") exec ip netns exec "$name" "$@" ;;
  *) echo "exec.sh: unknown name $name (host-a, host-b, $NODE_NS, $LAN_NS)" >&2; exit 2 ;;
esac
