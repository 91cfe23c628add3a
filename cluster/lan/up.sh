#!/usr/bin/env bash
# up.sh -- idempotent "small data centre" test bed, all inside network namespaces it creates:
#   lan     a Linux bridge (lanbr, 10.77.0.1) and dnsmasq: DHCP for guests (.100-.199), no DNS
#   node    a cluster node stand-in (10.77.0.10): the clients, the tests, later the provider
#   host-a  a libvirt host (10.77.0.11) with its own mount and UTS namespaces: private libvirt
#   host-b  state, socket, logs, config and pool; libvirtd + virtlogd + sshd (port 22 on its
#           LAN address); bridge br0 enslaving its LAN veth, so guests are on the LAN
# joined by veth pairs to lanbr. Nothing is added to the root namespace: no interface, no
# address, no route. Packages come from cluster/packages/install.sh, run here in the root
# namespace before anything enters a namespace. Every daemon is recorded in $LAN_DIR/pids,
# everything created in $LAN_DIR/created; down.sh acts on those only. Writes $LAN_DIR/env.sh.
# The single-host test bed (cluster/testbed, netns kvmhost) is never touched and may run too.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/lan/lib.sh
. "$HERE/lib.sh"

log() { echo "lan-up: $*"; }
die() { echo "lan-up: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

# ------------------------------------------------------------------ 1. packages (root netns)
"$HERE/../packages/install.sh"

mkdir -p "$LAN_DIR" "$PIDS" "$MARK" "$LAN_DIR/ssh" "$LAN_DIR/bin" "$LAN_DIR/$LAN_NS"
# libvirt's DAC driver runs qemu as libvirt-qemu: it must traverse to the pool volumes.
chmod 0755 "$LAN_DIR" "$(dirname "$LAN_DIR")"
chmod 0700 "$LAN_DIR/ssh"

# ------------------------------------------------------------------ 2. nothing of ours in root
# The range must be unused by the root namespace (its own routes and addresses; a lookup, no traffic).
rootaddr=$(ip -4 -o addr show)
rootroute=$(ip -4 route show "$SUBNET")
[[ $rootaddr != *" $PREFIX."* ]] || die "the root namespace has an address in $SUBNET; choose another range"
[ -z "$rootroute" ] || die "the root namespace routes $SUBNET ($rootroute); choose another range"

# ------------------------------------------------------------------ 3. network namespaces
for ns in "$LAN_NS" "$NODE_NS" "${HOSTS[@]}"; do
  if [ -e "/run/netns/$ns" ]; then
    [ -e "$MARK/netns-$ns" ] || die "netns $ns exists but was not created by cluster/lan/up.sh: not sharing it"
  else
    ip netns add "$ns"
    touch "$MARK/netns-$ns"
    log "netns $ns"
  fi
  ip -n "$ns" link set lo up
done

has_link() { ip -n "$1" link show "$2" >/dev/null 2>&1; }
if ! has_link "$LAN_NS" "$LAN_BRIDGE"; then
  ip -n "$LAN_NS" link add "$LAN_BRIDGE" type bridge stp_state 0 forward_delay 0
  ip -n "$LAN_NS" addr add "$DHCP_IP/24" dev "$LAN_BRIDGE"
fi
ip -n "$LAN_NS" link set "$LAN_BRIDGE" up
for peer in "$NODE_NS" "${HOSTS[@]}"; do
  port=p-$peer
  # created inside netns lan with its peer end directly in $peer: never in the root namespace
  has_link "$LAN_NS" "$port" || ip -n "$LAN_NS" link add "$port" type veth peer name lan0 netns "$peer"
  ip -n "$LAN_NS" link set "$port" master "$LAN_BRIDGE" up
done
if [ -z "$(ip -n "$NODE_NS" -4 -o addr show dev lan0)" ]; then
  ip -n "$NODE_NS" addr add "$NODE_IP/24" dev lan0
fi
ip -n "$NODE_NS" link set lan0 up
for h in "${HOSTS[@]}"; do
  has_link "$h" "$HOST_BRIDGE" || ip -n "$h" link add "$HOST_BRIDGE" type bridge stp_state 0 forward_delay 0
  ip -n "$h" link set lan0 master "$HOST_BRIDGE" up
  if [ -z "$(ip -n "$h" -4 -o addr show dev "$HOST_BRIDGE")" ]; then
    ip -n "$h" addr add "$(host_ip "$h")/24" dev "$HOST_BRIDGE"
  fi
  ip -n "$h" link set "$HOST_BRIDGE" up
done

# ------------------------------------------------------------------ 4. dnsmasq on the LAN bridge
# DHCP only (--port=0: no DNS at all, so nothing is forwarded anywhere), bound to lanbr only,
# no router and no DNS server handed out: guests reach the LAN and nothing else.
LEASES=$LAN_DIR/$LAN_NS/dnsmasq.leases
if ! alive dnsmasq; then
  touch "$LEASES"
  daemon dnsmasq ip netns exec "$LAN_NS" /usr/sbin/dnsmasq --conf-file=/dev/null --no-resolv --no-hosts \
    --port=0 --interface="$LAN_BRIDGE" --bind-interfaces --except-interface=lo \
    --dhcp-range="$DHCP_FIRST,$DHCP_LAST,255.255.255.0,1h" --dhcp-authoritative \
    --dhcp-option=option:router --dhcp-option=option:dns-server \
    --dhcp-leasefile="$LEASES" --pid-file="$PIDS/dnsmasq.pid" \
    --log-dhcp --log-facility="$LAN_DIR/$LAN_NS/dnsmasq.log" --user=root ||
    die "dnsmasq did not start: $(tail -n 5 "$LAN_DIR/$LAN_NS/dnsmasq.log" 2>/dev/null)"
  log "dnsmasq pid $(pid_of dnsmasq) on $LAN_BRIDGE ($DHCP_IP) in netns $LAN_NS"
fi

# ------------------------------------------------------------------ 5. mount + UTS namespaces
# Namespace files live in $LAN_NSDIR, made a private bind mount of itself (as ip netns does for
# /run/netns) so that a mount namespace file can be bound there.
mkdir -p "$LAN_NSDIR"
if ! mountpoint -q "$LAN_NSDIR"; then
  mount --bind "$LAN_NSDIR" "$LAN_NSDIR"
  touch "$MARK/nsdir-mount"
fi
mount --make-private "$LAN_NSDIR"

# the libvirt directories the packages ship (their owner and mode are copied from the package's)
mapfile -t SHIPPED < <(
  for p in $(dpkg-query -W -f='${Package} ${Status}\n' 'libvirt-daemon*' | awk '/ installed$/ {print $1}'); do
    dpkg -L "$p"
  done | grep -E '^/(etc/libvirt|var/lib/libvirt|var/log/libvirt|var/cache/libvirt)(/|$)' | sort -u)

skeleton() { # skeleton HOSTDIR: private copies of the package's libvirt directories and config
  local H=$1 pair sub dst f rel
  for pair in "${PRIVATE_DIRS[@]}"; do mkdir -p "$H/${pair%%:*}"; done
  chmod 0755 "$H" "$H/run"
  for f in "${SHIPPED[@]}"; do
    [ -e "$f" ] || continue
    for pair in "${PRIVATE_DIRS[@]}"; do
      sub=${pair%%:*}; dst=${pair#*:}
      [[ $f == "$dst" || $f == "$dst"/* ]] || continue
      rel=${f#"$dst"}
      if [ -d "$f" ]; then
        mkdir -p "$H/$sub$rel"
        chown --reference="$f" "$H/$sub$rel"; chmod --reference="$f" "$H/$sub$rel"
      elif [ ! -e "$H/$sub$rel" ]; then
        cp -p "$f" "$H/$sub$rel"
      fi
    done
  done
}

setup_mounts() { # runs inside HOST's net + mount namespaces; $1 = host dir
  local H=$1 pair
  # drop the copies of the namespace bind mounts (they would keep every other namespace alive)
  umount -l /run/netns 2>/dev/null || true
  umount -l "$LAN_NSDIR" 2>/dev/null || true
  # sysfs of this network namespace (libvirt reads /sys/class/net), as ip netns exec does
  umount -l /sys
  mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
  for pair in "${PRIVATE_DIRS[@]}"; do
    mkdir -p "${pair#*:}"
    mount --bind "$H/${pair%%:*}" "${pair#*:}"
  done
}

NSARGS=()
nsargs() { NSARGS=(--net="/run/netns/$1" --mount="$(mnt_ns "$1")" --uts="$(uts_ns "$1")"); }
ln -sfn /usr/sbin/libvirtd "$LAN_DIR/bin/lan-libvirtd"
ln -sfn /usr/sbin/virtlogd "$LAN_DIR/bin/lan-virtlogd"

for h in "${HOSTS[@]}"; do
  H=$(host_dir "$h")
  mkdir -p "$H/pool" "$H/ssh"
  skeleton "$H"
  chmod 0755 "$H/pool"; chmod 0700 "$H/ssh"
  # libvirt's host UUID: one per host, kept across runs (virsh sysinfo/capabilities show it)
  [ -s "$H/host-uuid" ] || cat /proc/sys/kernel/random/uuid > "$H/host-uuid"
  conf=$H/etc/libvirtd.conf
  grep -q '^host_uuid' "$conf" || printf '\n# cluster/lan/up.sh: this host'"'"'s identity\nhost_uuid = "%s"\n' "$(cat "$H/host-uuid")" >> "$conf"

  m=$(mnt_ns "$h") u=$(uts_ns "$h")
  if [ "$(findmnt -n -o FSTYPE "$m" 2>/dev/null || true)" != nsfs ]; then
    touch "$m" "$u"
    unshare --mount="$m" --uts="$u" --propagation private true
    touch "$MARK/mntns-$h"
    log "$h: mount + UTS namespaces $m $u"
  fi
  nsargs "$h"
  if ! nsenter "${NSARGS[@]}" mountpoint -q /var/lib/libvirt; then
    nsenter "${NSARGS[@]}" bash -c "$(declare -f setup_mounts); $(declare -p PRIVATE_DIRS LAN_NSDIR); setup_mounts '$H'"
  fi
  nsenter "${NSARGS[@]}" hostname "$h"
  [ "$(nsenter "${NSARGS[@]}" readlink -f /run/libvirt)" = /run/libvirt ] || die "$h: /run/libvirt is a symlink"
done

# ------------------------------------------------------------------ 6. virtlogd + libvirtd
# Started through symlinks named lan-virtlogd / lan-libvirtd: cluster/testbed/up.sh refuses to
# run next to a process named libvirtd or virtlogd that it did not start.
for h in "${HOSTS[@]}"; do
  nsargs "$h"
  if ! alive "$h.virtlogd"; then
    daemon "$h.virtlogd" nsenter "${NSARGS[@]}" "$LAN_DIR/bin/lan-virtlogd" --daemon --pid-file "$PIDS/$h.virtlogd.pid" ||
      die "$h: virtlogd did not start"
    log "$h: virtlogd pid $(pid_of "$h.virtlogd")"
  fi
  # started (unless it runs) and waited for on its socket; cluster/lan/ctl.sh stops and starts it too
  lan_start_libvirtd "$h" || die "$h: libvirtd is not up"
done

# ------------------------------------------------------------------ 7. keys + sshd
KEYS=$LAN_DIR/ssh
[ -s "$KEYS/id_ed25519" ] || ssh-keygen -q -t ed25519 -C lan-client -f "$KEYS/id_ed25519" -N ""
cp "$KEYS/id_ed25519.pub" "$KEYS/authorized_keys"
chmod 0600 "$KEYS/id_ed25519" "$KEYS/authorized_keys"
: > "$KEYS/known_hosts.new"
mkdir -p /run/sshd; chmod 0755 /run/sshd
for h in "${HOSTS[@]}"; do
  H=$(host_dir "$h") ip=$(host_ip "$h")
  [ -s "$H/ssh/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -C "$h" -f "$H/ssh/ssh_host_ed25519_key" -N ""
  chmod 0600 "$H/ssh/ssh_host_ed25519_key"
  echo "$ip $(cut -d' ' -f1,2 "$H/ssh/ssh_host_ed25519_key.pub")" >> "$KEYS/known_hosts.new"
  cat > "$H/ssh/sshd_config" <<EOF
# generated by cluster/lan/up.sh for $h
Port $SSH_PORT
ListenAddress $ip
HostKey $H/ssh/ssh_host_ed25519_key
PidFile $PIDS/$h.sshd.pid
AuthorizedKeysFile $KEYS/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
AllowStreamLocalForwarding yes
AllowTcpForwarding yes
MaxSessions 100
MaxStartups 100:30:200
EOF
  /usr/sbin/sshd -t -f "$H/ssh/sshd_config"
  if ! alive "$h.sshd"; then
    nsargs "$h"
    daemon "$h.sshd" nsenter "${NSARGS[@]}" /usr/sbin/sshd -f "$H/ssh/sshd_config" ||
      die "$h: sshd did not start"
    log "$h: sshd pid $(pid_of "$h.sshd") on $ip:$SSH_PORT"
  fi
  for _ in $(seq 50); do
    [ -n "$(ip netns exec "$h" ss -Hltn "( sport = :$SSH_PORT )" 2>/dev/null || true)" ] && break; sleep 0.1
  done
done
mv "$KEYS/known_hosts.new" "$KEYS/known_hosts"; chmod 0644 "$KEYS/known_hosts"

# ------------------------------------------------------------------ 8. pools
for h in "${HOSTS[@]}"; do
  nsargs "$h"
  V=(nsenter "${NSARGS[@]}" virsh -q -c qemu:///system)
  P=$(pool_name "$h") D=$(host_dir "$h")/pool
  "${V[@]}" pool-info "$P" >/dev/null 2>&1 || "${V[@]}" pool-define-as "$P" dir --target "$D" >/dev/null
  [ "$("${V[@]}" pool-info "$P" | awk '$1=="State:"{print $2}')" = running ] || "${V[@]}" pool-start "$P" >/dev/null
done

# ------------------------------------------------------------------ 9. check from node + env
for h in "${HOSTS[@]}"; do
  got=$(ip netns exec "$NODE_NS" ssh -q -i "$KEYS/id_ed25519" -p "$SSH_PORT" -o BatchMode=yes -o IdentitiesOnly=yes \
    -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$KEYS/known_hosts" -o GlobalKnownHostsFile=/dev/null \
    -o ConnectTimeout=5 "root@$(host_ip "$h")" 'test -S /run/libvirt/libvirt-sock && hostname')
  [ "$got" = "$h" ] || die "ssh from $NODE_NS to $h answered hostname '$got'"
done

{
  echo "# generated by cluster/lan/up.sh; addresses are only reachable inside the namespaces"
  echo "export LAN_DIR=$LAN_DIR"
  echo "export LAN_CLUSTER_DIR=$HERE"
  echo "export LAN_SUBNET=$SUBNET"
  echo "export LAN_NETNS=$LAN_NS"
  echo "export LAN_NODE_NETNS=$NODE_NS"
  echo "export LAN_NODE_IP=$NODE_IP"
  echo "export LAN_BRIDGE=$LAN_BRIDGE"
  echo "export LAN_DHCP_IP=$DHCP_IP"
  echo "export LAN_DHCP_RANGE=$DHCP_FIRST-$DHCP_LAST"
  echo "export LAN_DHCP_LEASES=$LEASES"
  echo "export LAN_HOSTS='${HOSTS[*]}'"
  echo "export LAN_SSH_USER=root"
  echo "export LAN_SSH_PORT=$SSH_PORT"
  echo "export LAN_SSH_KEY=$KEYS/id_ed25519"
  echo "export LAN_SSH_KNOWN_HOSTS=$KEYS/known_hosts"
  echo "export LAN_LIBVIRT_SOCKET=/run/libvirt/libvirt-sock"
  echo "export LAN_LIBVIRT_URI=qemu:///system"
  for h in "${HOSTS[@]}"; do
    v=LAN_$(echo "$h" | tr '[:lower:]-' '[:upper:]_')
    echo "export ${v}_NAME=$h"
    echo "export ${v}_NETNS=$h"
    echo "export ${v}_MNTNS=$(mnt_ns "$h")"
    echo "export ${v}_UTSNS=$(uts_ns "$h")"
    echo "export ${v}_IP=$(host_ip "$h")"
    echo "export ${v}_BRIDGE=$HOST_BRIDGE"
    echo "export ${v}_POOL=$(pool_name "$h")"
    echo "export ${v}_POOL_DIR=$(host_dir "$h")/pool"
    echo "export ${v}_LOG_DIR=$(host_dir "$h")/log"
    echo "export ${v}_UUID=$(cat "$(host_dir "$h")/host-uuid")"
  done
} > "$LAN_DIR/env.sh"
chmod 0644 "$LAN_DIR/env.sh"
log "ready: node $NODE_IP, host-a $(host_ip host-a), host-b $(host_ip host-b) (ssh :$SSH_PORT), DHCP $DHCP_FIRST-$DHCP_LAST; env $LAN_DIR/env.sh"
