# shellcheck shell=bash disable=SC2034
# lib.sh -- sourced by cluster/node/{up,down,check}.sh: names, ports and paths of the node (a
# single-node Kubernetes inside the LAN test bed's netns node, cluster/node/README.md), and the
# helpers that start and stop its processes by recorded PID and start time only
# (cluster/lib/proc.sh).

NODE_DIR=${NODE_DIR:-/var/lib/provider-kvm-node}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm}
BIN=${BIN:-$CACHE_DIR/bin}
LAN_DIR=${LAN_DIR:-/var/lib/provider-kvm-lan}
NETNS=node            # the LAN test bed's node (cluster/lan): every process here runs in it
NODE_NAME=node
NODE_IP=10.77.0.10    # lan0 of netns node (cluster/lan/lib.sh)
POD_CIDR=10.244.0.0/24
POD_GW=10.244.0.1     # cni0, the pods' bridge, in netns node
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1  # the kubernetes Service
CNI_BRIDGE=cni0
# Ports in netns node, none of make e2e's (cluster/e2e/lib.sh), so both can run.
ETCD_PORT=22379
ETCD_PEER_PORT=22380
APISERVER_PORT=26443  # on every address of netns node: pods reach it through $SERVICE_IP:443
KCM_PORT=20357
SCHEDULER_PORT=20359
KUBELET_PORT=20350
KUBELET_HEALTHZ_PORT=20348
PROXY_HEALTHZ_PORT=20356
PROXY_METRICS_PORT=20349
REGISTRY_PORT=${NODE_REGISTRY_PORT:-25000} # check.sh's own loopback registry (make e2e has 15000)
REGISTRY=127.0.0.1:$REGISTRY_PORT  # containerd's name for it; it listens on every address of netns node
POD_REGISTRY=$NODE_IP:$REGISTRY_PORT # the name pods reach it by
PAUSE_IMAGE=$REGISTRY/node/pause:1
HTTPGET_IMAGE=$REGISTRY/node/httpget:1 # the application pod of make e2e and make demo (test/e2e)
# The kubelet's cgroups live under this parent in each cgroup v1 hierarchy (and cgroup2's).
CGROUP_PARENT=provider-kvm-node

PIDS=$NODE_DIR/pids
LOGS=$NODE_DIR/logs
PKI=$NODE_DIR/pki
KUBECONFIG_ADMIN=$NODE_DIR/admin.kubeconfig

# shellcheck source=cluster/lib/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/proc.sh"

nlog() { printf '[node %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
ndie() { printf '[node %s] FAIL: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; exit 1; }

# start, alive, pid_of, stop_one, waitport: cluster/lib/proc.sh, on $PIDS and $LOGS.
proc_log() { nlog "$@"; }

# holder_ok: the process holding the node's mount namespace runs.
holder_ok() { alive holder; }

# in_node CMD...: CMD in netns node and the node's mount namespace (private /run, /var/log,
# masked sysctls: see up.sh), where containerd, the kubelet and kube-proxy run.
in_node() { nsenter -t "$(pid_of holder)" --net --mount -- "$@"; }

# nstart NAME CMD...: start (proc.sh) CMD in the node's namespaces.
nstart() { start "$1" nsenter -t "$(pid_of holder)" --net --mount -- "${@:2}"; }

# nwaitport PORT [HOST]: waitport (proc.sh) seen from netns node.
nwaitport() { in_node bash -c "$(declare -f waitport); waitport \"\$@\"" waitport "$@"; }

# kc ARGS...: kubectl as admin, from netns node (the API server is reachable nowhere else).
kc() { in_node "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }
