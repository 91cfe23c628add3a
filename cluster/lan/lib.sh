# lib.sh -- sourced by cluster/lan/{up,down,exec,run-in-node}.sh: the names, addresses and
# paths of the LAN test bed; processes by recorded PID and start time only (cluster/lib/proc.sh).
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

# start, daemon, alive, pid_of, stop_one: cluster/lib/proc.sh, on $PIDS (every daemon here
# writes its own pid file: daemon NAME CMD... with CMD writing $PIDS/NAME.pid).
# shellcheck source=cluster/lib/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/proc.sh"
proc_log() { echo "lan: $*"; }

# host_nsargs HOST: nsenter's options into HOST's network, mount and UTS namespaces, in
# HOST_NSARGS: its namespace files, or, where those are not namespaces (inside netns node: ip
# netns exec makes a mount namespace of its own, and the kernel copies no mount namespace file
# into a new one), the namespaces of HOST's virtlogd (up.sh starts it first, ctl.sh leaves it).
host_nsargs() {
  local h=$1
  if [ "$(findmnt -n -o FSTYPE "$(mnt_ns "$h")" 2>/dev/null)" = nsfs ]; then
    HOST_NSARGS=(--net="/run/netns/$h" --mount="$(mnt_ns "$h")" --uts="$(uts_ns "$h")")
  elif alive "$h.virtlogd"; then
    HOST_NSARGS=(--target="$(pid_of "$h.virtlogd")" --net --mount --uts)
  else
    echo "lan: $h: neither its namespace files nor its virtlogd can be entered" >&2
    return 1
  fi
}

# lan_start_libvirtd HOST: start HOST's libvirtd in its namespaces (through the lan-libvirtd
# symlink up.sh makes; its PID recorded in $PIDS) unless it runs, then wait until it answers on
# its socket.
lan_start_libvirtd() {
  local h=$1 i
  host_nsargs "$h" || return 1
  if ! alive "$h.libvirtd"; then
    daemon "$h.libvirtd" nsenter "${HOST_NSARGS[@]}" "$LAN_DIR/bin/lan-libvirtd" --daemon --pid-file "$PIDS/$h.libvirtd.pid" ||
      { echo "lan: $h: libvirtd did not start (log: $(host_dir "$h")/log)" >&2; return 1; }
    proc_log "$h: libvirtd pid $(pid_of "$h.libvirtd")"
  fi
  for ((i = 0; i < 300; i++)); do
    nsenter "${HOST_NSARGS[@]}" virsh -q -c qemu:///system version >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "lan: $h: libvirtd does not answer on its socket" >&2
  return 1
}

# lan_stop_libvirtd HOST: stop HOST's libvirtd by its recorded PID (its guests keep running).
lan_stop_libvirtd() { stop_one "$1.libvirtd" 5; }
