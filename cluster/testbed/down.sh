#!/usr/bin/env bash
# down.sh -- undo up.sh: stop the domains/networks of OUR libvirtd, then the daemons up.sh
# started (by the PIDs recorded in $TB/run), remove the netns only if up.sh created it and
# give /dev/kvm its old mode back. Keys and pool files are kept (PURGE=1 removes $TB).
set -uo pipefail
TB=${TB:-/var/lib/provider-kvm-testbed}
NS=${NS:-kvmhost}
RUN=$TB/run
PIDS=$RUN # alive, pid_of, stop_one: cluster/lib/proc.sh
# shellcheck source=cluster/lib/proc.sh
. "$(dirname "$(readlink -f "$0")")/../lib/proc.sh"
proc_log() { echo "down.sh: $*"; }

if alive libvirtd; then
  V="virsh -q -c qemu:///system"
  for d in $($V list --name 2>/dev/null); do echo "down.sh: destroy domain $d"; $V destroy "$d" >/dev/null; done
  for n in $($V net-list --name 2>/dev/null); do echo "down.sh: stop network $n"; $V net-destroy "$n" >/dev/null; done
  for p in $($V pool-list --name 2>/dev/null); do $V pool-destroy "$p" >/dev/null 2>&1; done
fi
# sshd's per-connection children first, then the daemons themselves
if alive sshd; then
  s=$(ps -o pid= --ppid "$(pid_of sshd)" || true)
  # shellcheck disable=SC2086
  [ -z "$s" ] || kill $s 2>/dev/null || true
fi
for d in sshd libvirtd virtlogd; do stop_one "$d" 5; done
if [ -e "$RUN/netns.created" ]; then
  left=$(ip netns pids "$NS" 2>/dev/null | tr '\n' ' ')
  [ -n "$left" ] && echo "down.sh: WARNING processes still in netns $NS: $left (not ours to kill)"
  ip netns del "$NS" 2>/dev/null && echo "down.sh: removed netns $NS"
  rm -f "$RUN/netns.created"
fi
if [ -s "$RUN/kvm.mode" ] && [ -c /dev/kvm ]; then
  read -r mode user group < "$RUN/kvm.mode"
  chown "$user:$group" /dev/kvm && chmod "$mode" /dev/kvm
  rm -f "$RUN/kvm.mode"
fi
[ "${PURGE:-0}" = 1 ] && rm -rf "$TB"
echo "down.sh: done"
