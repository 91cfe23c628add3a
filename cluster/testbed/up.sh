#!/usr/bin/env bash
# up.sh -- idempotent test bed for internal/host: installs Debian packages (through
# cluster/packages/install.sh, in the root namespace), creates the
# network namespace $NS, starts virtlogd + libvirtd + sshd INSIDE it (no systemd needed),
# writes client keys (ed25519, RSA, ECDSA, passphrase-protected ed25519, one unauthorized
# key), known_hosts, a dir pool and the default NAT network, and writes $TB/env.sh with
# TESTBED_* variables. Every daemon it starts is recorded in $TB/run/*.pid; down.sh and
# ctl.sh act only on those PIDs.
set -euo pipefail

TB=${TB:-/var/lib/provider-kvm-testbed}
NS=${NS:-kvmhost}
SSH_PORT=${SSH_PORT:-2222}
POOL=${POOL:-testbed}
PASSPHRASE=${TESTBED_PASSPHRASE:-testbed-passphrase}
RUN=$TB/run
KEYS=$TB/ssh
HERE=$(dirname "$(readlink -f "$0")")

log() { echo "up.sh: $*"; }

mkdir -p "$TB" "$RUN" "$KEYS" "$TB/pool"
# libvirt's DAC driver runs qemu as libvirt-qemu: it must traverse to pool volumes.
chmod 0755 "$TB" "$TB/pool" "$(dirname "$TB")"

# ------------------------------------------------------------------ 1. packages
# The one install step (root namespace, before anything enters $NS): cluster/packages/.
"$HERE/../packages/install.sh"

# ------------------------------------------------------------------ 2. /dev/kvm
if [ -c /dev/kvm ]; then
  # No udev here: /dev/kvm is 0600 root:root but qemu runs as libvirt-qemu (group kvm).
  [ -e "$RUN/kvm.mode" ] || stat -c '%a %U %G' /dev/kvm > "$RUN/kvm.mode"
  chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
fi

# ------------------------------------------------------------------ 3. netns
if [ ! -e "/run/netns/$NS" ]; then
  ip netns add "$NS"
  touch "$RUN/netns.created"
fi
ip netns exec "$NS" ip link set lo up

PIDS=$RUN # alive, pid_of: cluster/lib/proc.sh (ctl.sh starts the daemons)
# shellcheck source=cluster/lib/proc.sh
. "$HERE/../lib/proc.sh"
in_ns() { [ "$(readlink /proc/"$1"/ns/net)" = "$(ip netns exec "$NS" readlink /proc/self/ns/net)" ]; }

# Refuse to fight daemons we did not start.
for d in libvirtd virtqemud virtlogd; do
  for p in $(pidof "$d" 2>/dev/null || true); do
    if [ "$(pid_of "$d" 2>/dev/null || true)" != "$p" ] || ! alive "$d"; then
      echo "up.sh: a $d (pid $p) not started by up.sh is running; stop it first" >&2; exit 1
    fi
  done
done

# ------------------------------------------------------------------ 4. virtlogd + libvirtd
mkdir -p /run/libvirt
"$HERE/ctl.sh" start-virtlogd
"$HERE/ctl.sh" start-libvirtd
in_ns "$(pid_of libvirtd)" || { echo "up.sh: libvirtd is not in netns $NS" >&2; exit 1; }

# ------------------------------------------------------------------ 5. keys + sshd
key() { # key FILE TYPE [BITS] [PASSPHRASE]
  [ -s "$KEYS/$1" ] && return 0
  local args=(-q -t "$2" -C "testbed-$1" -f "$KEYS/$1" -N "${4:-}")
  [ -n "${3:-}" ] && args+=(-b "$3")
  ssh-keygen "${args[@]}"
}
key id_ed25519 ed25519
key id_rsa rsa 3072
key id_ecdsa ecdsa 256
key id_ed25519_pass ed25519 "" "$PASSPHRASE"
key id_unauthorized ed25519
key ssh_host_ed25519_key ed25519
cat "$KEYS/id_ed25519.pub" "$KEYS/id_rsa.pub" "$KEYS/id_ecdsa.pub" "$KEYS/id_ed25519_pass.pub" > "$KEYS/authorized_keys"
chmod 0700 "$KEYS"; chmod 0600 "$KEYS"/authorized_keys "$KEYS"/id_* "$KEYS"/ssh_host_ed25519_key
echo "[127.0.0.1]:$SSH_PORT $(cut -d' ' -f1,2 "$KEYS/ssh_host_ed25519_key.pub")" > "$KEYS/known_hosts"
cat > "$KEYS/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $KEYS/ssh_host_ed25519_key
PidFile $RUN/sshd.pid
AuthorizedKeysFile $KEYS/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowStreamLocalForwarding yes
AllowTcpForwarding yes
MaxSessions 100
MaxStartups 100:30:200
EOF
mkdir -p /run/sshd; chmod 0755 /run/sshd
/usr/sbin/sshd -t -f "$KEYS/sshd_config"
"$HERE/ctl.sh" start-sshd

# ------------------------------------------------------------------ 6. network + pool
V="virsh -q -c qemu:///system"
$V net-info default >/dev/null 2>&1 || $V net-define /usr/share/libvirt/networks/default.xml >/dev/null
# (no "cmd | grep -q" under pipefail: grep's early exit makes the pipeline fail)
[ "$($V net-info default | awk '$1=="Active:"{print $2}')" = yes ] || $V net-start default >/dev/null
if $V pool-info "$POOL" >/dev/null 2>&1 && [[ "$($V pool-dumpxml "$POOL")" != *"<path>$TB/pool</path>"* ]]; then
  log "pool $POOL points elsewhere: redefining"
  $V pool-destroy "$POOL" >/dev/null 2>&1 || true; $V pool-undefine "$POOL" >/dev/null
fi
$V pool-info "$POOL" >/dev/null 2>&1 || $V pool-define-as "$POOL" dir --target "$TB/pool" >/dev/null
[ "$($V pool-info "$POOL" | awk '$1=="State:"{print $2}')" = running ] || $V pool-start "$POOL" >/dev/null

# ------------------------------------------------------------------ 7. checks + env
virsh -q -c qemu:///system list >/dev/null
# OpenSSH client with pinned host key (never touches ~/.ssh): key login + stream-local forwarding
ip netns exec "$NS" ssh -q -i "$KEYS/id_ed25519" -p "$SSH_PORT" -o BatchMode=yes -o IdentitiesOnly=yes \
  -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$KEYS/known_hosts" -o GlobalKnownHostsFile=/dev/null \
  root@127.0.0.1 test -S /run/libvirt/libvirt-sock

cat > "$TB/env.sh" <<EOF
# generated by cluster/testbed/up.sh
export TESTBED_DIR=$TB
export TESTBED_NETNS=$NS
export TESTBED_CTL=$HERE/ctl.sh
export TESTBED_SSH_HOST=127.0.0.1
export TESTBED_SSH_PORT=$SSH_PORT
export TESTBED_SSH_USER=root
export TESTBED_SSH_KEY=$KEYS/id_ed25519
export TESTBED_SSH_KEY_RSA=$KEYS/id_rsa
export TESTBED_SSH_KEY_ECDSA=$KEYS/id_ecdsa
export TESTBED_SSH_KEY_PASSPHRASE=$KEYS/id_ed25519_pass
export TESTBED_SSH_PASSPHRASE='$PASSPHRASE'
export TESTBED_SSH_KEY_UNAUTHORIZED=$KEYS/id_unauthorized
export TESTBED_SSH_KNOWN_HOSTS=$KEYS/known_hosts
export TESTBED_LIBVIRT_SOCKET=/run/libvirt/libvirt-sock
export TESTBED_LIBVIRT_URI=qemu:///system
export TESTBED_POOL=$POOL
export TESTBED_POOL_DIR=$TB/pool
export TESTBED_NETWORK=default
EOF
chmod 0644 "$TB/env.sh"
log "ready: netns $NS, sshd 127.0.0.1:$SSH_PORT (inside $NS), env file $TB/env.sh"
