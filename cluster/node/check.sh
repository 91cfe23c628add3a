#!/usr/bin/env bash
# check.sh -- the node's proof (make node-check, after make node-up): a Deployment in namespace
# node-check runs the pause image's probe (cluster/node/pause) as user 2000 with the security
# context Crossplane gives providers. The scheduler places its pod, the kubelet runs it through
# containerd on the CNI bridge, and the probe lists ServiceAccounts through the kubernetes
# Service ClusterIP (kube-proxy's iptables DNAT in netns node) with its mounted ServiceAccount
# token. Checks the probe's answer and the container process (uid, NoNewPrivs, capabilities),
# prints TIMING lines, deletes the namespace (KEEP=1 keeps it).
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
[[ $(id -u) == 0 ]] || ndie "must run as root"
{ holder_ok && alive kubelet; } || ndie "the node is not up: make node-up"
NS="node-check"
# The LAN's libvirt hosts' SSH servers (cluster/lan), which a provider pod must reach.
# shellcheck disable=SC1091
. "$LAN_DIR/env.sh"
DIAL=
for h in $LAN_HOSTS; do
	v=LAN_$(echo "$h" | tr '[:lower:]-' '[:upper:]_')_IP
	DIAL+=${DIAL:+,}${!v}:$LAN_SSH_PORT
done

kc delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
t0=$(date +%s.%N)
kc apply -f - >/dev/null <<-YAML
	apiVersion: v1
	kind: Namespace
	metadata: {name: $NS}
	---
	apiVersion: v1
	kind: ServiceAccount
	metadata: {name: probe, namespace: $NS}
	---
	apiVersion: rbac.authorization.k8s.io/v1
	kind: Role
	metadata: {name: probe, namespace: $NS}
	rules: [{apiGroups: [""], resources: [serviceaccounts], verbs: [list]}]
	---
	apiVersion: rbac.authorization.k8s.io/v1
	kind: RoleBinding
	metadata: {name: probe, namespace: $NS}
	roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: probe}
	subjects: [{kind: ServiceAccount, name: probe, namespace: $NS}]
	---
	apiVersion: apps/v1
	kind: Deployment
	metadata: {name: probe, namespace: $NS}
	spec:
	  replicas: 1
	  selector: {matchLabels: {app: probe}}
	  template:
	    metadata: {labels: {app: probe}}
	    spec:
	      serviceAccountName: probe
	      securityContext: {runAsNonRoot: true, runAsUser: 2000, runAsGroup: 2000}
	      containers:
	      - name: probe
	        image: $PAUSE_IMAGE
	        imagePullPolicy: Always
	        command: [/pause, probe]
	        env: [{name: DIAL, value: "$DIAL"}]
	        securityContext:
	          allowPrivilegeEscalation: false
	          privileged: false
	          runAsNonRoot: true
	          runAsUser: 2000
	          runAsGroup: 2000
	          readOnlyRootFilesystem: true
	          capabilities: {drop: [ALL]}
YAML
pod=
for ((i = 0; i < 120; i++)); do
	pod=$(kc -n "$NS" get pods -l app=probe -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
	[[ -n $pod && $(kc -n "$NS" get pod "$pod" -o jsonpath='{.status.phase}') == Running ]] && break
	sleep 0.5
done
[[ $(kc -n "$NS" get pod "$pod" -o jsonpath='{.status.phase}' 2>/dev/null) == Running ]] || {
	kc -n "$NS" describe pods >&2 || true
	ndie "the probe pod is not Running after 60 s (see $LOGS/kubelet.log, $LOGS/containerd.log)"
}
t_run=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
for ((i = 0; i < 60; i++)); do
	logs=$(kc -n "$NS" logs "$pod" 2>/dev/null || true)
	[[ $logs == *"PROBE OK"* ]] && break
	sleep 0.5
done
t_ok=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
printf '%s\n' "$logs" | sed 's/^/  probe: /' | cut -c1-200
[[ $logs == *"PROBE OK"* ]] || ndie "the probe did not reach the API server through the kubernetes Service"
[[ $logs == *"uid=2000 gid=2000"* ]] || ndie "the probe does not run as 2000:2000"
[[ $(grep -c '^DIAL .*SSH-2.0-' <<<"$logs") == "$(tr , '\n' <<<"$DIAL" | grep -c .)" ]] ||
	ndie "the probe did not get an SSH banner from each LAN host ($DIAL)"
ip=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.status.podIP}')
node=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.spec.nodeName}')
nlog "pod $pod on node $node, IP $ip, reached https://$SERVICE_IP:443 (the kubernetes Service) with its token"

# The container's process, as the kernel sees it (found in the kubelet's cgroups).
cid=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
procs=$(find /sys/fs/cgroup/pids/"$CGROUP_PARENT" -path "*$cid*" -name cgroup.procs -exec cat {} + | head -n1)
[[ -n $procs ]] || ndie "no process of container $cid in the cgroups under $CGROUP_PARENT"
status=$(grep -E '^(Uid|Gid|NoNewPrivs|CapEff|CapPrm|CapBnd):' "/proc/$procs/status")
printf '%s\n' "$status" | sed 's/^/  process: /'
grep -Eq '^Uid:\s+2000\s+2000\s+2000\s+2000$' <<<"$status" || ndie "the container process is not uid 2000"
grep -Eq '^NoNewPrivs:\s+1$' <<<"$status" || ndie "the container process may gain privileges"
grep -Eq '^CapEff:\s+0+$' <<<"$status" || ndie "the container process has capabilities"
echo "TIMING node pod-running ${t_run}s probe-ok ${t_ok}s"
[[ ${KEEP:-} == 1 ]] || kc delete namespace "$NS" --wait=true >/dev/null
nlog "check passed"
