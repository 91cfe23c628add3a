# lib.sh -- sourced by cluster/lan/{up,down,exec,run-in-node}.sh: the names, addresses and
# paths of the LAN test bed, and the helpers that act on recorded PIDs only.
# shellcheck shell=bash disable=SC2034

LAN_DIR=${LAN_DIR:-/var/lib/provider-kvm-lan}
# Namespace files (mount, UTS) of the hosts; a private bind mount of itself, like /run/netns.
LAN_NSDIR=${LAN_NSDIR:-/run/provider-kvm-lan}
PIDS=$LAN_DIR/pids
MARK=$LAN_DIR/created # one empty file per thing up.sh created (netns, mounts): down.sh undoes only those

# The one private range, used only inside the namespaces below.
SUBNET=10.77.0.0/24
PREFIX=10.77.0
DHCP_IP=$PREFIX.1 # the LAN bridge's own address: dnsmasq (DHCP only)
NODE_IP=$PREFIX.10
DHCP_FIRST=$PREFIX.100
DHCP_LAST=$PREFIX.199
LAN_NS=lan
NODE_NS=node
LAN_BRIDGE=lanbr # the switch, in netns lan
HOST_BRIDGE=br0  # on each host, enslaving its LAN veth: guests attach here
HOSTS=(host-a host-b)
SSH_PORT=22

host_ip() { case "$1" in host-a) echo "$PREFIX.11" ;; host-b) echo "$PREFIX.12" ;; *) return 1 ;; esac; }
host_dir() { echo "$LAN_DIR/$1"; }
pool_name() { echo "pool-$1"; }
mnt_ns() { echo "$LAN_NSDIR/$1.mnt"; }
uts_ns() { echo "$LAN_NSDIR/$1.uts"; }

# The private directories of a host, each bind-mounted over the libvirt path (inside its mount ns).
PRIVATE_DIRS=(run:/run/libvirt lib:/var/lib/libvirt log:/var/log/libvirt cache:/var/cache/libvirt etc:/etc/libvirt)

# in_host HOST CMD...: run CMD in HOST's network, mount and UTS namespaces (what its daemons
# and its SSH sessions see).
in_host() {
  local h=$1; shift
  nsenter --net="/run/netns/$h" --mount="$(mnt_ns "$h")" --uts="$(uts_ns "$h")" "$@"
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pid FILE NAME: stop the process recorded in FILE (TERM, then KILL after 5 s).
stop_pid() {
  local f=$1 name=$2 pid
  if alive "$f"; then
    pid=$(cat "$f"); echo "lan: stop $name (pid $pid)"; kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then echo "lan: $name still alive, SIGKILL"; kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$f"
}

# daemon CMD...: start a daemon holding no file descriptor of ours but stdin/out/err
# (/dev/null): a daemon that inherited a caller's flock or a test's pipe would hold it.
daemon() {
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [[ $fd -gt 2 ]] && eval "exec $fd>&-" 2>/dev/null
    done
    exec "$@" </dev/null >/dev/null 2>&1
  )
}
