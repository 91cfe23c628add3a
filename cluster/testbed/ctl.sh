#!/usr/bin/env bash
# ctl.sh -- start/stop/restart the test bed's daemons by their recorded PIDs, inside the
# network namespace, and inject faults for the integration tests:
#   ctl.sh start-virtlogd|start-libvirtd|start-sshd
#   ctl.sh restart-sshd       stop sshd (recorded PID) and its sessions, start it again
#   ctl.sh restart-libvirtd   stop libvirtd (recorded PID), start it again, wait for the socket
#   ctl.sh stop-libvirtd      stop libvirtd (recorded PID); start-libvirtd starts it again
#   ctl.sh kill-ssh-sessions [PID]
#                             kill sshd's per-connection children (drops every SSH connection);
#                             with PID, only those of PID's own connections, so a package that
#                             shares the bed with others cuts its connections alone (fails when
#                             PID has none)
#   ctl.sh count-ssh-conns    established TCP connections to 127.0.0.1:$SSH_PORT inside $NS
#   ctl.sh reset              remove what an earlier run that was cut left: its test processes
#                             in $NS, every domain, the volumes of $POOL, the pools and networks
#                             tests defined (only while holding /tmp/testbed.lock)
set -euo pipefail
TB=${TB:-/var/lib/provider-kvm-testbed}
NS=${NS:-kvmhost}
SSH_PORT=${SSH_PORT:-2222}
POOL=${POOL:-testbed}
RUN=$TB/run
KEYS=$TB/ssh

HERE=$(dirname "$(readlink -f "$0")")
PIDS=$RUN # daemon, alive, pid_of, stop_one: cluster/lib/proc.sh
# shellcheck source=cluster/lib/proc.sh
. "$HERE/../lib/proc.sh"
proc_log() { echo "ctl.sh: $*"; }
sessions() { # children of the recorded sshd: one per SSH connection
  alive sshd || return 0
  ps -o pid= --ppid "$(pid_of sshd)" || true
}
wait_libvirt() {
  for _ in $(seq 100); do
    [ -S /run/libvirt/libvirt-sock ] && virsh -q -c qemu:///system version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "ctl.sh: libvirtd did not answer" >&2; return 1
}
# Each daemon forks and writes its pid file $RUN/NAME.pid (which Go's internal/testbed reads as
# a bare PID); proc.sh's daemon runs it inside $NS holding no descriptor of ours.
start_virtlogd() {
  alive virtlogd && return 0
  daemon virtlogd ip netns exec "$NS" /usr/sbin/virtlogd --daemon --pid-file "$RUN/virtlogd.pid" ||
    { echo "ctl.sh: virtlogd did not start" >&2; return 1; }
  echo "ctl.sh: virtlogd pid $(pid_of virtlogd)"
}
start_libvirtd() {
  if ! alive libvirtd; then
    mkdir -p /run/libvirt
    daemon libvirtd ip netns exec "$NS" /usr/sbin/libvirtd --daemon --pid-file "$RUN/libvirtd.pid" ||
      { echo "ctl.sh: libvirtd did not start" >&2; return 1; }
    echo "ctl.sh: libvirtd pid $(pid_of libvirtd)"
  fi
  wait_libvirt
}
start_sshd() {
  alive sshd && return 0
  daemon sshd ip netns exec "$NS" /usr/sbin/sshd -f "$KEYS/sshd_config" ||
    { echo "ctl.sh: sshd did not start" >&2; return 1; }
  # wait until it accepts connections
  for _ in $(seq 50); do
    out=$(ip netns exec "$NS" ss -Hltn "( sport = :$SSH_PORT )" 2>/dev/null || true)
    [ -n "$out" ] && break; sleep 0.1
  done
  echo "ctl.sh: sshd pid $(pid_of sshd) on 127.0.0.1:$SSH_PORT in netns $NS"
}
kill_sessions() {
  local s; s=$(sessions)
  # shellcheck disable=SC2086
  [ -z "$s" ] || kill $s 2>/dev/null || true
}
# sessions_of PID: the sshd sessions (children of the recorded sshd) at the other end of PID's
# established connections to sshd. ss -p names the processes holding each socket: PID on the
# client's side, by its local port; the session on the server's side, by the same peer port.
sessions_of() {
  local pid=$1 ports p all
  ports=$(ip netns exec "$NS" ss -Htnp state established "( dport = :$SSH_PORT )" |
    awk -v want="pid=$pid," 'index($0, want) { n = split($3, a, ":"); print a[n] }')
  [ -n "$ports" ] || return 0
  all=" $(sessions | tr '\n' ' ') "
  for p in $ports; do
    ip netns exec "$NS" ss -Htnp state established "( sport = :$SSH_PORT and dport = :$p )" |
      grep -o 'pid=[0-9]*' | cut -d= -f2
  done | sort -u | while read -r s; do
    case $all in *" $s "*) echo "$s" ;; esac
  done
}
kill_sessions_of() {
  local s; s=$(sessions_of "$1")
  if [ -z "$s" ]; then
    echo "ctl.sh: process $1 has no SSH session to sshd on :$SSH_PORT" >&2; return 1
  fi
  # shellcheck disable=SC2086
  kill $s 2>/dev/null || true
  echo "ctl.sh: killed $(wc -w <<<"$s") SSH session(s) of process $1"
}
# reset: a run whose lock holder was killed (flock -o: the lock is flock's own) can leave its
# go command and test binaries running, with the envtest servers they started, and whatever
# its tests made on the host: domains of fixed names, volumes, pools, networks. The next run
# would meet them as objects it does not own. Processes are matched by executable, never by
# namespace alone: the daemons, their sessions, libvirt's dnsmasq and the guests stay (the
# guests go with their domains).
reset() {
  local p exe n=0
  for p in $(ip netns pids "$NS" 2>/dev/null); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    case ${exe##*/} in
      *.test | go | kube-apiserver | etcd) kill -9 "$p" 2>/dev/null && n=$((n + 1)) ;;
    esac
  done
  alive libvirtd || { echo "ctl.sh: reset: libvirtd is not running" >&2; return 1; }
  local V="virsh -q -c qemu:///system" d v pool net x
  local doms=0 vols=0 pools=0 nets=0
  for d in $($V list --all --name); do
    $V destroy "$d" >/dev/null 2>&1 || true
    $V undefine --nvram "$d" >/dev/null 2>&1 || $V undefine "$d" >/dev/null
    doms=$((doms + 1))
  done
  for pool in $($V pool-list --all --name); do
    [ "$pool" = "$POOL" ] && continue
    x=$($V pool-dumpxml "$pool" 2>/dev/null) || continue # gone meanwhile (a transient pool)
    [[ $x == *"<path>$TB/"* ]] || continue
    $V pool-destroy "$pool" >/dev/null 2>&1 || true
    $V pool-undefine "$pool" >/dev/null
    pools=$((pools + 1))
  done
  $V pool-refresh "$POOL" >/dev/null
  for v in $($V vol-list "$POOL" | awk '{print $1}'); do
    $V vol-delete --pool "$POOL" "$v" >/dev/null
    vols=$((vols + 1))
  done
  for net in $($V net-list --all --name); do
    [ "$net" = default ] && continue
    $V net-destroy "$net" >/dev/null 2>&1 || true
    $V net-undefine "$net" >/dev/null
    nets=$((nets + 1))
  done
  echo "ctl.sh: reset: $n leftover test processes killed; removed $doms domains, $vols volumes of pool $POOL, $pools pools, $nets networks"
}

case "${1:-}" in
  start-virtlogd) start_virtlogd ;;
  start-libvirtd) start_libvirtd ;;
  start-sshd) start_sshd ;;
  restart-sshd) kill_sessions; stop_one sshd 5; start_sshd ;;
  restart-libvirtd) stop_one libvirtd 5; start_libvirtd ;;
  stop-libvirtd) stop_one libvirtd 5 ;;
  kill-ssh-sessions) if [ -n "${2:-}" ]; then kill_sessions_of "$2"; else kill_sessions; fi ;;
  count-ssh-conns)
    out=$(ip netns exec "$NS" ss -Htn state established "( dport = :$SSH_PORT )")
    if [ -z "$out" ]; then echo 0; else printf '%s\n' "$out" | wc -l; fi ;;
  reset) reset ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
