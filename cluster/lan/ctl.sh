#!/usr/bin/env bash
# ctl.sh HOST ACTION -- fault injection on one host of the LAN test bed (cluster/lan/up.sh):
#   ctl.sh host-b stop-libvirtd    stop host-b's libvirtd (recorded PID; guests keep running)
#   ctl.sh host-b start-libvirtd   start it again (unless it runs) and wait for its socket
# Run it as root from the root namespace or netns node (test/lan does), holding
# /tmp/lan.lock as every user of the LAN bed does; leave every libvirtd running.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/lan/lib.sh
. "$HERE/lib.sh"
[ $# -eq 2 ] || { sed -n '2,6p' "$0" >&2; exit 2; }
h=$1
host_ip "$h" >/dev/null || { echo "ctl.sh: unknown host $h (${HOSTS[*]})" >&2; exit 2; }
[ -e "/run/netns/$h" ] || { echo "ctl.sh: $h's namespaces do not exist; run cluster/lan/up.sh first" >&2; exit 1; }
case "$2" in
  stop-libvirtd) lan_stop_libvirtd "$h" ;;
  start-libvirtd) lan_start_libvirtd "$h" ;;
  *) echo "ctl.sh: unknown action $2 (stop-libvirtd, start-libvirtd)" >&2; exit 2 ;;
esac
