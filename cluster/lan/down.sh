#!/usr/bin/env bash
# down.sh -- undo cluster/lan/up.sh, idempotent: destroy the running domains of OUR two
# libvirtd (over their private sockets), stop sshd (and its sessions), libvirtd, virtlogd and
# dnsmasq by the PIDs recorded in $LAN_DIR/pids, unbind the hosts' mount and UTS namespace files
# and delete the network namespaces, each only when $LAN_DIR/created says up.sh made it. Keys,
# pools and domain definitions are kept (PURGE=1 removes $LAN_DIR). cluster/testbed is untouched.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/lan/lib.sh
. "$HERE/lib.sh"
log() { echo "lan-down: $*"; }

[ "$(id -u)" = 0 ] || { echo "lan-down: must run as root" >&2; exit 1; }
[ -d "$LAN_DIR" ] || { log "nothing to stop ($LAN_DIR does not exist)"; exit 0; }

for h in "${HOSTS[@]}"; do
  if alive "$h.libvirtd" && [ -e "$(mnt_ns "$h")" ]; then
    V=(in_host "$h" virsh -q -c qemu:///system)
    for d in $("${V[@]}" list --name 2>/dev/null || true); do
      log "$h: destroy domain $d"; "${V[@]}" destroy "$d" >/dev/null 2>&1 || true
    done
    for p in $("${V[@]}" pool-list --name 2>/dev/null || true); do "${V[@]}" pool-destroy "$p" >/dev/null 2>&1 || true; done
  fi
  if alive "$h.sshd"; then # the per-connection children first
    s=$(ps -o pid= --ppid "$(pid_of "$h.sshd")" || true)
    # shellcheck disable=SC2086
    [ -z "$s" ] || kill $s 2>/dev/null || true
  fi
  for d in sshd libvirtd virtlogd; do stop_one "$h.$d" 5; done
  # a qemu our libvirtd started and left behind (libvirtd killed): its PID is in OUR run dir
  for f in "$(host_dir "$h")"/run/qemu/*.pid; do
    [ -e "$f" ] || continue
    stop_one "$f" 5
  done
done
stop_one dnsmasq 5

for h in "${HOSTS[@]}"; do
  if [ -e "$MARK/mntns-$h" ]; then
    for f in "$(mnt_ns "$h")" "$(uts_ns "$h")"; do
      if [ "$(findmnt -n -o FSTYPE "$f" 2>/dev/null || true)" = nsfs ]; then umount "$f"; fi
      rm -f "$f"
    done
    rm -f "$MARK/mntns-$h"
    log "$h: released its mount and UTS namespaces"
  fi
done
if [ -e "$MARK/nsdir-mount" ]; then
  if mountpoint -q "$LAN_NSDIR"; then umount "$LAN_NSDIR"; fi
  rmdir "$LAN_NSDIR" 2>/dev/null || true
  rm -f "$MARK/nsdir-mount"
fi

for ns in "${HOSTS[@]}" "$NODE_NS" "$LAN_NS"; do
  [ -e "$MARK/netns-$ns" ] || continue
  left=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
  [ -z "$left" ] || log "WARNING processes still in netns $ns: $left(not started by up.sh, not ours to kill)"
  if [ -e "/run/netns/$ns" ]; then ip netns del "$ns" && log "removed netns $ns"; fi
  rm -f "$MARK/netns-$ns"
done

if [ "${PURGE:-0}" = 1 ]; then rm -rf "$LAN_DIR"; log "removed $LAN_DIR"; fi
log "done"
