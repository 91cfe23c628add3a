#!/usr/bin/env bash
# boot-check.sh -- end-to-end proof of the test bed with plain virsh (no provider), and the
# baseline the provider's overhead is compared with:
#   guest image (image.sh) -> uploaded volume -> qcow2 overlay + NoCloud seed ISO (user-data
#   configures squid, vendor-data starts qemu-guest-agent and enables squid) -> q35/UEFI domain
#   (type qemu = TCG by default) on the NAT network -> guest IP (lease, then agent) ->
#   `curl -x http://GUEST:3128 http://BRIDGE:8204/` answers 204 (run inside the netns).
# Prints a timeline in seconds from `virsh start`; the last line is
#   boot-check: start->204 = 53.2s
# Everything it creates is named bootcheck-<time>-<pid>-* and removed on exit, also on failure
# (domain + NVRAM, volumes, seed, the 204 server). Exit status 0 only when 204 was seen.
#
# Env: TB (/var/lib/provider-kvm-testbed; $TB/env.sh from up.sh), IMAGE (the qcow2; default
#      ${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/images/debian-12-testbed.qcow2, built
#      beforehand by make image), VIRT (qemu|kvm, default qemu), VCPUS (2), MEM_MB (1024),
#      DISK_GB (4), PORT (8204), TIMEOUT (300 s), KEEP=1 (on success leave the VM and volumes;
#      the 204 server is always stopped), KEEP_LOGS=1 (keep the console and qemu logs under
#      /var/log/libvirt/qemu; on failure the console tail is printed either way), USER_DATA (a
#      #cloud-config file used as the seed's user-data instead of the one below, e.g. what the
#      composition function renders for a Proxy; its squid must admit the NAT subnet and reach
#      the bridge's address on PORT), VENDOR_DATA=none (no vendor-data: the user-data alone
#      must enable squid and start the guest agent, as the Proxy's does), GUEST_EXEC (a shell
#      command run in the guest through qemu-guest-agent once squid answered; its output is
#      printed as `boot-check: guest| ...` lines and a failure fails the check).
# libvirt is driven over the local unix socket (qemu:///system) from the root namespace; all
# traffic to 192.168.122.x (curl, the 204 server) happens inside netns $TESTBED_NETNS.
set -euo pipefail

TB=${TB:-/var/lib/provider-kvm-testbed}
[ -r "$TB/env.sh" ] || { echo "boot-check: $TB/env.sh missing; run cluster/testbed/up.sh first" >&2; exit 1; }
# shellcheck disable=SC1091
. "$TB/env.sh"
HERE=$(dirname "$(readlink -f "$0")")
IMAGE=${IMAGE:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/images/debian-12-testbed.qcow2}
VIRT=${VIRT:-qemu}
VCPUS=${VCPUS:-2}
MEM_MB=${MEM_MB:-1024}
DISK_GB=${DISK_GB:-4}
PORT=${PORT:-8204}
TIMEOUT=${TIMEOUT:-300}
NS=$TESTBED_NETNS
POOL=$TESTBED_POOL
NET=${TESTBED_NETWORK:-default}
VM=bootcheck-$(date +%s)-$$
BASE_VOL=$VM-base.qcow2
ROOT_VOL=$VM-root.qcow2
SEED_VOL=$VM-seed.iso
CONSOLE_LOG=/var/log/libvirt/qemu/$VM-console.log

log() { echo "boot-check: $*"; }
v() { virsh -q -c "$TESTBED_LIBVIRT_URI" "$@"; }
inns() { ip netns exec "$NS" "$@"; }
now() { date +%s.%N; }
el() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
since() { [ -n "$1" ] && el "$T0" "$1" || echo "n/a"; }

# ------------------------------------------------------------------ cleanup (always)
W=$(mktemp -d /tmp/bootcheck.XXXXXX)
made_base=0 made_root=0 made_seed=0 made_dom=0 HTTP_PID="" OK=0 T0="" T_204=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$HTTP_PID" ]; then kill -TERM -- "-$HTTP_PID" 2>/dev/null || kill "$HTTP_PID" 2>/dev/null; wait "$HTTP_PID" 2>/dev/null; fi
  if [ "$OK" = 1 ] && [ "${KEEP:-0}" = 1 ]; then
    log "KEEP=1: left domain $VM and volumes $BASE_VOL $ROOT_VOL $SEED_VOL in pool $POOL"
    log "  (virsh -c $TESTBED_LIBVIRT_URI console $VM; root/testbed; remove with destroy + undefine --nvram + vol-delete)"
    rm -rf "$W"; log "start->204 = $(since "$T_204")s"; return
  fi
  if [ "$OK" != 1 ] && [ -s "$CONSOLE_LOG" ]; then
    log "console tail ($CONSOLE_LOG):"; tail -n 30 "$CONSOLE_LOG" | sed 's/^/  | /'
  fi
  if [ "$made_dom" = 1 ]; then
    v destroy "$VM" >/dev/null 2>&1
    v undefine "$VM" --nvram >/dev/null 2>&1 || v undefine "$VM" >/dev/null 2>&1
  fi
  [ "$made_root" = 1 ] && v vol-delete --pool "$POOL" "$ROOT_VOL" >/dev/null 2>&1
  [ "$made_seed" = 1 ] && v vol-delete --pool "$POOL" "$SEED_VOL" >/dev/null 2>&1
  [ "$made_base" = 1 ] && v vol-delete --pool "$POOL" "$BASE_VOL" >/dev/null 2>&1
  if [ "${KEEP_LOGS:-0}" = 1 ]; then log "logs kept: $CONSOLE_LOG /var/log/libvirt/qemu/$VM.log"
  else rm -f "$CONSOLE_LOG" "/var/log/libvirt/qemu/$VM.log"; fi
  rm -rf "$W"
  log "cleaned up $VM"
  if [ "$OK" = 1 ]; then log "start->204 = $(since "$T_204")s"; else log "FAIL"; fi
  return $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ prerequisites
# The image is built beforehand (make image): building it needs the Debian mirror, which a
# network namespace cannot reach. Packages come from the one install step (make packages).
[ -s "$IMAGE" ] || { log "no image at $IMAGE: build it first with make image"; exit 1; }
"$HERE/../packages/install.sh" --check
v pool-info "$POOL" >/dev/null || { log "pool $POOL missing (up.sh)"; exit 1; }
netxml=$(v net-dumpxml "$NET")
BRIDGE_IP=$(printf '%s\n' "$netxml" | sed -n "s/.*<ip address='\([0-9.]*\)'.*/\1/p" | head -1)
BRIDGE_IP=${BRIDGE_IP:-192.168.122.1}
log "domain $VM virt=$VIRT vcpus=$VCPUS mem=${MEM_MB}MiB image=$IMAGE"
TS=$(now)

# ------------------------------------------------------------------ volumes
t=$(now)
v vol-create-as "$POOL" "$BASE_VOL" "$(stat -c%s "$IMAGE")" --format raw >/dev/null; made_base=1
v vol-upload --pool "$POOL" "$BASE_VOL" "$IMAGE"
BASE_PATH=$(v vol-path --pool "$POOL" "$BASE_VOL")
v vol-create-as "$POOL" "$ROOT_VOL" "${DISK_GB}G" --format qcow2 \
  --backing-vol "$BASE_PATH" --backing-vol-format qcow2 >/dev/null; made_root=1
T_UPLOAD=$(el "$t" "$(now)")

t=$(now)
cat > "$W/meta-data" <<EOF
instance-id: $VM
local-hostname: $VM
EOF
cat > "$W/user-data" <<'EOF'
#cloud-config
manage_etc_hosts: true
chpasswd:
  expire: false
  users:
    - {name: root, password: testbed, type: text}
write_files:
  - path: /etc/squid/conf.d/testbed.conf
    content: |
      # Debian's squid only allows localhost; the NAT subnet is in squid's localnet ACL
      http_access allow localnet
      # the guest has no resolver: without it squid waits on reverse DNS of its hostname
      visible_hostname testbed-squid
EOF
if [ -n "${USER_DATA:-}" ]; then cp "$USER_DATA" "$W/user-data"; fi
cat > "$W/vendor-data" <<'EOF'
#!/bin/sh
# NoCloud vendor-data: runs once per instance in cloud-final, after user-data's write_files
systemctl start qemu-guest-agent.service
systemctl enable --now squid.service
echo "TESTBED-VENDOR-DATA-DONE $(date -u +%FT%TZ)" | tee /var/lib/testbed-vendor-data.done
EOF
seedfiles=("$W/user-data" "$W/meta-data" "$W/vendor-data")
if [ "${VENDOR_DATA:-}" = none ]; then seedfiles=("$W/user-data" "$W/meta-data"); fi
genisoimage -quiet -output "$W/seed.iso" -volid cidata -joliet -rock "${seedfiles[@]}"
v vol-create-as "$POOL" "$SEED_VOL" "$(stat -c%s "$W/seed.iso")" --format raw >/dev/null; made_seed=1
v vol-upload --pool "$POOL" "$SEED_VOL" "$W/seed.iso"

# ------------------------------------------------------------------ domain
cat > "$W/domain.xml" <<EOF
<domain type='$VIRT'>
  <name>$VM</name>
  <memory unit='MiB'>$MEM_MB</memory>
  <vcpu>$VCPUS</vcpu>
  <os firmware='efi'>
    <type arch='x86_64' machine='q35'>hvm</type>
    <firmware><feature enabled='no' name='secure-boot'/><feature enabled='no' name='enrolled-keys'/></firmware>
    <boot dev='hd'/>
  </os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2' discard='unmap' detect_zeroes='unmap'/>
      <source pool='$POOL' volume='$ROOT_VOL'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <!-- Debian's cloud kernel has no AHCI: the seed cdrom sits on virtio-scsi, not sata -->
    <controller type='scsi' model='virtio-scsi'/>
    <disk type='volume' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source pool='$POOL' volume='$SEED_VOL'/>
      <target dev='sda' bus='scsi'/>
      <readonly/>
    </disk>
    <interface type='network'>
      <source network='$NET'/>
      <model type='virtio'/>
    </interface>
    <channel type='unix'>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <serial type='pty'>
      <log file='$CONSOLE_LOG' append='off'/>
      <target port='0'/>
    </serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
  </devices>
</domain>
EOF
v define "$W/domain.xml" >/dev/null; made_dom=1
T_SEEDDEF=$(el "$t" "$(now)")

# ------------------------------------------------------------------ 204 server (in the netns)
# setsid: own process group, so cleanup stops the whole group (a python3 found on PATH may be
# a wrapper, e.g. a pyenv shim, whose child would otherwise survive)
PY=$(command -v /usr/bin/python3 || command -v python3)
setsid ip netns exec "$NS" "$PY" -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()' "$BRIDGE_IP" "$PORT" \
  </dev/null >"$W/http204.log" 2>&1 &
HTTP_PID=$!
direct=""
for _ in $(seq 50); do
  direct=$(inns curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$BRIDGE_IP:$PORT/" 2>/dev/null || true)
  [ "$direct" = 204 ] && break
  kill -0 "$HTTP_PID" 2>/dev/null || { log "204 server failed: $(cat "$W/http204.log")"; exit 1; }
  sleep 0.2
done
[ "$direct" = 204 ] || { log "204 server on $BRIDGE_IP:$PORT does not answer (got '$direct')"; exit 1; }

# ------------------------------------------------------------------ boot + measure
log "setup: upload+overlay ${T_UPLOAD}s, seed+define ${T_SEEDDEF}s; starting $VM"
T0=$(now)
v start "$VM" >/dev/null
T_RUN="" T_LEASE="" T_AGENT="" T_204="" IP="" SRC=""
ipv4() { awk '/ipv4/ {split($4,a,"/"); if (a[1] !~ /^127\./) {print a[1]; exit}}'; }
while :; do
  t=$(now)
  st=$(v domstate "$VM" 2>/dev/null || true)
  if [ -z "$T_RUN" ] && [ "$st" = running ]; then T_RUN=$t; log "  $(since "$T_RUN")s running"; fi
  if [ -n "$T_RUN" ] && [ "$st" != running ]; then log "domain left state running: '$st'"; exit 1; fi
  if [ -z "$T_LEASE" ]; then
    out=$(v domifaddr "$VM" --source lease 2>/dev/null || true); a=$(printf '%s\n' "$out" | ipv4)
    if [ -n "$a" ]; then T_LEASE=$t; [ -n "$IP" ] || { IP=$a; SRC=lease; }; log "  $(since "$t")s lease IP $a"; fi
  fi
  if [ -z "$T_AGENT" ] && [ -n "$T_RUN" ]; then
    out=$(v domifaddr "$VM" --source agent 2>/dev/null || true); a=$(printf '%s\n' "$out" | ipv4)
    if [ -n "$a" ]; then T_AGENT=$t; [ -n "$IP" ] || { IP=$a; SRC=agent; }; log "  $(since "$t")s agent IP $a"; fi
  fi
  if [ -n "$IP" ]; then
    code=$(inns curl -s -o /dev/null -w '%{http_code}' --max-time 3 -x "http://$IP:3128" "http://$BRIDGE_IP:$PORT/" 2>/dev/null || true)
    if [ "$code" = 204 ]; then T_204=$(now); log "  $(since "$T_204")s squid on $IP:3128 answered 204"; break; fi
  fi
  if awk -v a="$(el "$T0" "$(now)")" -v b="$TIMEOUT" 'BEGIN{exit !(a>b)}'; then
    log "TIMEOUT after ${TIMEOUT}s (running=$(since "$T_RUN") lease=$(since "$T_LEASE") agent=$(since "$T_AGENT") ip=${IP:-none})"
    exit 1
  fi
  sleep 0.5
done
# ------------------------------------------------------------------ GUEST_EXEC (agent)
# guest-exec through the guest agent, retried while the agent is not up yet (60 s).
agent() { v qemu-agent-command "$VM" "$1" 2>/dev/null; }
jget() { "$PY" -c 'import json,sys; r=json.load(sys.stdin)["return"]; print(eval(sys.argv[1], {}, {"r": r}))' "$1"; }
if [ -n "${GUEST_EXEC:-}" ]; then
  req=$("$PY" -c 'import json,sys; print(json.dumps({"execute": "guest-exec", "arguments": {"path": "/bin/sh", "arg": ["-c", sys.argv[1]], "capture-output": True}}))' "$GUEST_EXEC")
  gpid=""
  for _ in $(seq 120); do
    if out=$(agent "$req"); then gpid=$(printf '%s' "$out" | jget 'r["pid"]'); break; fi
    sleep 0.5
  done
  [ -n "$gpid" ] || { log "GUEST_EXEC: the guest agent did not answer within 60 s"; exit 1; }
  st=""
  for _ in $(seq 240); do
    st=$(agent "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":$gpid}}") || st=""
    [ "$(printf '%s' "$st" | jget 'r["exited"]' 2>/dev/null)" = True ] && break
    st=""; sleep 0.5
  done
  [ -n "$st" ] || { log "GUEST_EXEC: pid $gpid did not exit within 120 s"; exit 1; }
  printf '%s' "$st" | jget '__import__("base64").b64decode(r.get("out-data", "")).decode(errors="replace")' | sed 's/^/boot-check: guest| /'
  printf '%s' "$st" | jget '__import__("base64").b64decode(r.get("err-data", "")).decode(errors="replace")' | sed 's/^/boot-check: guest! /'
  code=$(printf '%s' "$st" | jget 'r.get("exitcode", -1)')
  [ "$code" = 0 ] || { log "GUEST_EXEC exited $code"; exit 1; }
fi

OK=1
log "guest $IP (via $SRC), virt=$VIRT firmware=efi vcpus=$VCPUS mem=${MEM_MB}MiB"
log "timeline (s from virsh start): running=$(since "$T_RUN") lease-ip=$(since "$T_LEASE") agent-ip=$(since "$T_AGENT") squid-204=$(since "$T_204")"
log "setup before start: $(el "$TS" "$T0")s (upload+overlay ${T_UPLOAD}s)"
log "PASS"
