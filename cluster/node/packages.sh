#!/usr/bin/env bash
# packages.sh -- install the project's Provider and Function packages (make xpkg) on the node
# through Crossplane's package manager (make node-packages, after make node-crossplane): push the
# .xpkg files to the node's registry, create the Provider and the Function with packages on the
# node's address (as a pod reaches the registry), wait until both are HEALTHY and their pods run
# under the package runtime, then check the provider pod: user 2000, no privilege escalation,
# no capabilities, the ServiceAccount bound to the RBAC manager's ClusterRole. Prints TIMING.
#   XPKG_DIR (default _output/xpkg), PKG_TAG (default v0.0.0-node)
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
[[ $(id -u) == 0 ]] || ndie "must run as root"
{ holder_ok && alive kubelet; } || ndie "the node is not up: make node-up"
XPKG_DIR=$(readlink -f "${XPKG_DIR:-$HERE/../../_output/xpkg}")
PKG_TAG=${PKG_TAG:-v0.0.0-node}
NS=crossplane-system
[[ -x $BIN/crossplane ]] || ndie "missing $BIN/crossplane (make tools)"
kc -n "$NS" get deploy crossplane >/dev/null 2>&1 || ndie "no Crossplane core on the node: make node-crossplane"

t0=$(date +%s.%N)
secs() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
for p in provider-kvm function-kvm-proxy; do
	[[ -s $XPKG_DIR/$p.xpkg ]] || ndie "missing $XPKG_DIR/$p.xpkg (make xpkg)"
	in_node "$BIN/crossplane" xpkg push -f "$XPKG_DIR/$p.xpkg" "$REGISTRY/provider-kvm/$p:$PKG_TAG" >>"$LOGS/push.log" 2>&1 ||
		ndie "crossplane xpkg push of $p failed (see $LOGS/push.log)"
done
kc apply -f - >/dev/null <<-YAML
	apiVersion: pkg.crossplane.io/v1
	kind: Provider
	metadata: {name: provider-kvm}
	spec: {package: "$POD_REGISTRY/provider-kvm/provider-kvm:$PKG_TAG"}
	---
	apiVersion: pkg.crossplane.io/v1
	kind: Function
	metadata: {name: function-kvm-proxy}
	spec: {package: "$POD_REGISTRY/provider-kvm/function-kvm-proxy:$PKG_TAG"}
YAML
for kind in provider/provider-kvm function/function-kvm-proxy; do
	kc wait --for=condition=Healthy --timeout=240s "$kind" >/dev/null ||
		{ kc describe "$kind" >&2; ndie "$kind is not Healthy"; }
	nlog "$kind Healthy after $(secs)s"
done
rev=$(kc get provider provider-kvm -o jsonpath='{.status.currentRevision}')
for ((i = 0; i < 240; i++)); do
	pod=$(kc -n "$NS" get pods -l "pkg.crossplane.io/revision=$rev" -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}' 2>/dev/null || true)
	[[ -n $pod ]] && break
	sleep 0.5
done
[[ -n $pod ]] || { kc -n "$NS" get pods >&2; ndie "no running pod of provider revision $rev"; }
nlog "provider pod $pod Running after $(secs)s"
kc wait --for=condition=Ready --timeout=120s -n "$NS" "pod/$pod" >/dev/null || ndie "provider pod $pod not Ready"
t_ready=$(secs)

sa=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.spec.serviceAccountName}')
crb=$(kc get clusterrolebindings -o jsonpath="{range .items[?(@.subjects[0].name==\"$sa\")]}{.roleRef.name}{\"\\n\"}{end}")
[[ $crb == "crossplane:provider:$rev:system" ]] || ndie "ServiceAccount $sa is bound to '$crb', not the RBAC manager's crossplane:provider:$rev:system"
cid=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
pid=$(find /sys/fs/cgroup/pids/"$CGROUP_PARENT" -path "*$cid*" -name cgroup.procs -exec cat {} + | head -n1)
[[ -n $pid ]] || ndie "no process of the provider container $cid"
status=$(grep -E '^(Uid|Gid|NoNewPrivs|CapEff):' "/proc/$pid/status")
printf '%s\n' "$status" | sed 's/^/  provider process: /'
grep -Eq '^Uid:\s+2000\s+2000\s+2000\s+2000$' <<<"$status" || ndie "the provider does not run as uid 2000"
grep -Eq '^NoNewPrivs:\s+1$' <<<"$status" || ndie "the provider may gain privileges"
grep -Eq '^CapEff:\s+0+$' <<<"$status" || ndie "the provider has capabilities"
kc get providers,functions
echo "TIMING node packages healthy+provider-ready ${t_ready}s"
nlog "packages check passed (provider $rev as $sa, bound to crossplane:provider:$rev:system)"
