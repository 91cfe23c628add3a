#!/usr/bin/env bash
# hostcheck.sh -- the provider pod at work (make node-hostcheck, after make node-packages): the
# LAN hosts as ClusterProviderConfigs host-a and host-b (SSH key and pinned known_hosts of
# cluster/lan in Secret crossplane-system/testbed-ssh), then a SeedVolume on host-a in
# namespace node-hostcheck. The provider, in its pod as user 2000 with the RBAC manager's
# ClusterRole, reads the Secret, reaches host-a over SSH across the LAN (masqueraded as
# 10.77.0.10) and writes the seed ISO into pool-host-a; the check sees the volume with virsh on
# host-a, deletes the SeedVolume and sees the volume gone. Holds /tmp/testbed.lock (it writes to
# a libvirt host of the LAN bed). Prints TIMING.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
[[ $(id -u) == 0 ]] || ndie "must run as root"
{ holder_ok && alive kubelet; } || ndie "the node is not up: make node-up"
[[ -r $LAN_DIR/env.sh ]] || ndie "no $LAN_DIR/env.sh: make lan-up"
# shellcheck disable=SC1091
. "$LAN_DIR/env.sh"
kc get providers.pkg.crossplane.io provider-kvm >/dev/null 2>&1 || ndie "provider-kvm is not installed on the node: make node-packages"
NS="node-hostcheck"

exec 8>/tmp/testbed.lock
nlog "waiting for /tmp/testbed.lock"
flock -w 1800 8 || ndie "the test bed lock stayed busy for 30 min"

kc -n crossplane-system create secret generic testbed-ssh --from-file=ssh-privatekey="$LAN_SSH_KEY" \
	--from-file=known_hosts="$LAN_SSH_KNOWN_HOSTS" --dry-run=client -o yaml | kc apply -f - >/dev/null
for h in $LAN_HOSTS; do
	v=LAN_$(echo "$h" | tr '[:lower:]-' '[:upper:]_')
	ip=${v}_IP pool=${v}_POOL br=${v}_BRIDGE
	kc apply -f - >/dev/null <<-YAML
		apiVersion: kvm.crossplane.io/v1alpha1
		kind: ClusterProviderConfig
		metadata: {name: $h}
		spec:
		  transport: SSH
		  host: ${!ip}
		  port: $LAN_SSH_PORT
		  user: $LAN_SSH_USER
		  credentials: {secretRef: {namespace: crossplane-system, name: testbed-ssh, key: ssh-privatekey}}
		  knownHosts: {secretRef: {namespace: crossplane-system, name: testbed-ssh, key: known_hosts}}
		  libvirtSocket: $LAN_LIBVIRT_SOCKET
		  uri: $LAN_LIBVIRT_URI
		  defaults: {domainType: qemu, pool: ${!pool}, bridge: ${!br}, bridgeCIDRs: ["$LAN_SUBNET"]}
	YAML
done

kc delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
t0=$(date +%s.%N)
secs() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
kc apply -f - >/dev/null <<-YAML
	apiVersion: v1
	kind: Namespace
	metadata: {name: $NS}
	---
	apiVersion: kvm.crossplane.io/v1alpha1
	kind: SeedVolume
	metadata: {name: hostcheck-seed, namespace: $NS}
	spec:
	  forProvider:
	    hostname: hostcheck
	    userData: |
	      #cloud-config
	      hostname: hostcheck
	  providerConfigRef: {kind: ClusterProviderConfig, name: host-a}
YAML
kc -n "$NS" wait --for=condition=Ready --timeout=180s seedvolume/hostcheck-seed >/dev/null || {
	kc -n "$NS" describe seedvolume hostcheck-seed >&2
	kc -n crossplane-system logs -l pkg.crossplane.io/provider=provider-kvm --tail=30 >&2 || true
	ndie "SeedVolume hostcheck-seed not Ready"
}
t_ready=$(secs)
vol=$(kc -n "$NS" get seedvolume hostcheck-seed -o jsonpath='{.status.atProvider.volumeName}')
[[ -n $vol ]] || ndie "SeedVolume hostcheck-seed Ready without status.atProvider.volumeName"
"$HERE/../lan/exec.sh" host-a virsh -q -c "$LAN_LIBVIRT_URI" vol-list "$LAN_HOST_A_POOL" | grep -qw "$vol" ||
	ndie "volume $vol is not in $LAN_HOST_A_POOL on host-a"
nlog "SeedVolume Ready after ${t_ready}s: volume $vol in $LAN_HOST_A_POOL on host-a, written by the provider pod over SSH"
kc -n "$NS" delete seedvolume hostcheck-seed --timeout=120s >/dev/null || ndie "SeedVolume hostcheck-seed not deleted"
t_del=$(secs)
if "$HERE/../lan/exec.sh" host-a virsh -q -c "$LAN_LIBVIRT_URI" vol-list "$LAN_HOST_A_POOL" | grep -qw "$vol"; then
	ndie "volume $vol still in $LAN_HOST_A_POOL after the SeedVolume's deletion"
fi
kc delete namespace "$NS" --wait=false >/dev/null
echo "TIMING node seedvolume ready ${t_ready}s deleted ${t_del}s"
nlog "host check passed"
