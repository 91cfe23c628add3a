#!/usr/bin/env bash
# ctl.sh -- start/stop/restart the test bed's daemons by their recorded PIDs, inside the
# network namespace, and inject faults for the integration tests:
#   ctl.sh start-virtlogd|start-libvirtd|start-sshd
#   ctl.sh restart-sshd       stop sshd (recorded PID) and its sessions, start it again
#   ctl.sh restart-libvirtd   stop libvirtd (recorded PID), start it again, wait for the socket
#   ctl.sh kill-ssh-sessions  kill sshd's per-connection children (drops every SSH connection)
#   ctl.sh count-ssh-conns    established TCP connections to 127.0.0.1:$SSH_PORT inside $NS
set -euo pipefail
TB=${TB:-/var/lib/provider-kvm-testbed}
NS=${NS:-kvmhost}
SSH_PORT=${SSH_PORT:-2222}
RUN=$TB/run
KEYS=$TB/ssh

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop_pid() { # stop_pid NAME
  local f=$RUN/$1.pid pid
  alive "$f" || { rm -f "$f"; return 0; }
  pid=$(cat "$f"); kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$f"
}
sessions() { # children of the recorded sshd: one per SSH connection
  alive "$RUN/sshd.pid" || return 0
  ps -o pid= --ppid "$(cat "$RUN/sshd.pid")" || true
}
wait_libvirt() {
  for _ in $(seq 100); do
    [ -S /run/libvirt/libvirt-sock ] && virsh -q -c qemu:///system version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "ctl.sh: libvirtd did not answer" >&2; return 1
}
# daemon CMD...: start a daemon with no file descriptor of ours but stdin/out/err (set to
# /dev/null): a daemon that inherited, say, a caller's flock or a test's output pipe would hold
# it for as long as it runs.
daemon() {
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [[ $fd -gt 2 ]] && eval "exec $fd>&-" 2>/dev/null
    done
    exec ip netns exec "$NS" "$@" </dev/null >/dev/null 2>&1
  )
}
start_virtlogd() {
  alive "$RUN/virtlogd.pid" && return 0
  daemon /usr/sbin/virtlogd --daemon --pid-file "$RUN/virtlogd.pid"
  for _ in $(seq 50); do alive "$RUN/virtlogd.pid" && break; sleep 0.1; done
  echo "ctl.sh: virtlogd pid $(cat "$RUN/virtlogd.pid")"
}
start_libvirtd() {
  if ! alive "$RUN/libvirtd.pid"; then
    mkdir -p /run/libvirt
    daemon /usr/sbin/libvirtd --daemon --pid-file "$RUN/libvirtd.pid"
    for _ in $(seq 100); do alive "$RUN/libvirtd.pid" && break; sleep 0.1; done
    echo "ctl.sh: libvirtd pid $(cat "$RUN/libvirtd.pid")"
  fi
  wait_libvirt
}
start_sshd() {
  alive "$RUN/sshd.pid" && return 0
  daemon /usr/sbin/sshd -f "$KEYS/sshd_config"
  for _ in $(seq 50); do alive "$RUN/sshd.pid" && break; sleep 0.1; done
  # wait until it accepts connections
  for _ in $(seq 50); do
    out=$(ip netns exec "$NS" ss -Hltn "( sport = :$SSH_PORT )" 2>/dev/null || true)
    [ -n "$out" ] && break; sleep 0.1
  done
  echo "ctl.sh: sshd pid $(cat "$RUN/sshd.pid") on 127.0.0.1:$SSH_PORT in netns $NS"
}
kill_sessions() {
  local s; s=$(sessions)
  # shellcheck disable=SC2086
  [ -z "$s" ] || kill $s 2>/dev/null || true
}

case "${1:-}" in
  start-virtlogd) start_virtlogd ;;
  start-libvirtd) start_libvirtd ;;
  start-sshd) start_sshd ;;
  restart-sshd) kill_sessions; stop_pid sshd; start_sshd ;;
  restart-libvirtd) stop_pid libvirtd; start_libvirtd ;;
  kill-ssh-sessions) kill_sessions ;;
  count-ssh-conns)
    out=$(ip netns exec "$NS" ss -Htn state established "( dport = :$SSH_PORT )")
    if [ -z "$out" ]; then echo 0; else printf '%s\n' "$out" | wc -l; fi ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
