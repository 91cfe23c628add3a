# shellcheck shell=bash
# lib.sh -- the shell half of make e2e and make demo, sourced by cluster/e2e/run.sh and
# cluster/e2e/demo.sh, never run: the PKI and the processes. Everything else (installing the
# packages through the API, the Proxies, the checks, the timeline, the diagnostics, the image
# server and the 204 origin) is the Go package test/e2e (see docs/e2e.md).
#
# TOPOLOGY says where it all runs: "lan", the default here and in the Go half (make e2e;
# cluster/lan: netns node, two libvirt hosts host-a and host-b reached over SSH across the LAN,
# guests on each host's bridge), or "nat" (make demo, make bench-latency, which set it;
# cluster/testbed: netns kvmhost, one host on its loopback, guests on libvirt's NAT network).
#
# The processes, all inside that network namespace (node or kvmhost):
#   etcd + kube-apiserver + kube-controller-manager (its default controllers), built from Go
#   modules by cluster/controlplane/build.sh;
#   the Crossplane core v2.4.0 out of cluster (`core start --package-runtime=External`);
#   function-kvm-proxy and function-auto-ready as local processes with mTLS;
#   the image server and the 204 origin (the e2e test binary with -e2e.serve);
#   the provider; a loopback OCI registry (crane registry serve) with the provider, function
#   and configuration packages of `make xpkg` pushed to it.
# Every process is started in its own session and recorded in $WORK/pids; stop_all stops them
# by those PIDs (after checking each PID still is the process that was started): the process
# library cluster/lib/proc.sh, as every test bed script; the PKI is cluster/lib/pki.sh.

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
E2E_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$E2E_LIB/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm}
BIN=${BIN:-$CACHE_DIR/bin}
TB=${TB:-/var/lib/provider-kvm-testbed}
LAN_DIR=${LAN_DIR:-/var/lib/provider-kvm-lan}
TOPOLOGY=${TOPOLOGY:-lan}
case $TOPOLOGY in
lan) E2E_NETNS=node ;;
nat) E2E_NETNS=${TESTBED_NETNS:-kvmhost} ;;
*) echo "TOPOLOGY=$TOPOLOGY: want lan or nat" >&2; exit 2 ;;
esac
WORK=${E2E_WORK:-/var/lib/provider-kvm-e2e}
LOGS=$WORK/logs
PIDS=$WORK/pids
# shellcheck source=cluster/lib/proc.sh
. "$REPO/cluster/lib/proc.sh"
# shellcheck source=cluster/lib/pki.sh
. "$REPO/cluster/lib/pki.sh"
# The runtime: "node" on the LAN (make e2e): the single-node Kubernetes of cluster/node, the
# Crossplane core as Deployments and the packages as pods under the package runtime; "local"
# on the NAT test bed (make demo, make bench-latency): the control plane here, the core out of
# cluster, the provider and the functions as local processes.
if [[ $TOPOLOGY == lan ]]; then E2E_RUNTIME=${E2E_RUNTIME:-node}; else E2E_RUNTIME=${E2E_RUNTIME:-local}; fi
NODE_DIR=${NODE_DIR:-/var/lib/provider-kvm-node}
NODE=$REPO/cluster/node
IMAGE=${TESTBED_IMAGE:-$CACHE_DIR/images/debian-12-testbed.qcow2}
XPKG_DIR=${XPKG_DIR:-$REPO/_output/xpkg}
OUT=${E2E_OUT:-$REPO/_output/e2e}
# The Go half, built by preflight (go test -c): the tests, and the servers with -e2e.serve.
E2E_TEST=$OUT/e2e.test
KUBECTL=$BIN/kubectl
KUBECONFIG=$WORK/kubeconfig
[[ $E2E_RUNTIME != node ]] || KUBECONFIG=$NODE_DIR/admin.kubeconfig
export KUBECONFIG E2E_KUBECONFIG=$KUBECONFIG
CORE_VERSION=${CORE_VERSION:-v2.4.0}
PKG_TAG=${PKG_TAG:-v0.0.0-e2e}
# Provider poll interval: how often a booting KVMDomain is looked at again. Part of the
# measured overhead (see docs/e2e.md).
POLL=${POLL:-} # empty: the provider's default (--poll=1m), as a platform team installs it
# Ports, all on 127.0.0.1 inside the namespace (the 204 origin on the bridge address).
ETCD_PORT=${ETCD_PORT:-12379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-20257}
CORE_METRICS_PORT=${CORE_METRICS_PORT:-18080}
CORE_HEALTH_PORT=${CORE_HEALTH_PORT:-18081}
PROVIDER_METRICS_PORT=${PROVIDER_METRICS_PORT:-18082}
FN_PROXY_PORT=${FN_PROXY_PORT:-19443}
FN_AUTOREADY_PORT=${FN_AUTOREADY_PORT:-19444}
REGISTRY_PORT=${REGISTRY_PORT:-15000}
IMAGE_PORT=${IMAGE_PORT:-18090}
ORIGIN_PORT=${ORIGIN_PORT:-18204}
REGISTRY=127.0.0.1:$REGISTRY_PORT
LOG_TAG=${LOG_TAG:-e2e}
# What the Go half reads (test/e2e/main_test.go, loadConfig); VCPUS, MEM_MIB,
# GUEST_TIMEOUT, DELETE_TIMEOUT, SKIP_BASELINE and KEEP_ON_FAILURE pass through as they are.
export E2E_WORK=$WORK E2E_IMAGE=$IMAGE E2E_REPO=$REPO E2E_OUT=$OUT CACHE_DIR PKG_TAG POLL LOG_TAG TOPOLOGY E2E_RUNTIME NODE_DIR \
	PROVIDER_METRICS_PORT FN_PROXY_PORT FN_AUTOREADY_PORT REGISTRY_PORT IMAGE_PORT ORIGIN_PORT

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*"; }
proc_log() { log "$@"; }
warn() { printf '[%s %s] WARNING: %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '[%s %s] FAIL: %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*" >&2; exit 1; }
now() { date +%s.%N; }
# elapsed FROM: seconds since FROM, with one decimal
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

k() { "$KUBECTL" "$@"; }

# e2etest ARGS...: the Go half, in its package directory (as go test runs it).
e2etest() { (cd "$REPO/test/e2e" && "$E2E_TEST" "$@"); }

# inside_netns: this process is inside the topology's network namespace (node or kvmhost).
inside_netns() {
	[[ -e /run/netns/$E2E_NETNS ]] &&
		[[ $(stat -Lc '%d:%i' /proc/self/ns/net) == "$(stat -Lc '%d:%i' "/run/netns/$E2E_NETNS")" ]]
}

# ------------------------------------------------------------------ processes
# start, alive, pid_of, stop_one, stop_all, waitport: cluster/lib/proc.sh, on $PIDS and $LOGS.
# any_running: a process recorded in $WORK/pids still runs (a demo, or a run that crashed).
any_running() {
	local f
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		alive "$(basename "$f" .pid)" && return 0
	done
	return 1
}

# ------------------------------------------------------------------ preflight (root namespace)
# need_file FILE HINT
need_file() { [[ -s $1 ]] || die "missing $1 ($2)"; }

# build_e2etest: the Go half's test binary (go test -c), from this checkout.
build_e2etest() {
	mkdir -p "$OUT"
	(cd "$REPO" && go test -c -tags e2e -o "$E2E_TEST" ./test/e2e) ||
		die "go test -c -tags e2e ./test/e2e failed"
	# Its offline tests first (manifests render, every example still holds what the e2e
	# replaces): a broken example fails here, not after the bring-up.
	(cd "$REPO/test/e2e" && "$E2E_TEST" -test.count=1 -test.run '^(TestManifests|TestProxyExamples|TestTimelineTable)$') ||
		die "the e2e's offline tests failed (above)"
	# On the LAN the plain-virsh baseline is test/lan's guest on host-a's bridge.
	if [[ $TOPOLOGY == lan ]]; then
		(cd "$REPO" && go test -c -tags lan -o "$OUT/lan.test" ./test/lan) ||
			die "go test -c -tags lan ./test/lan failed"
	fi
}

preflight() {
	local b
	for b in kube-apiserver etcd kube-controller-manager kubectl; do
		need_file "$BIN/$b" "make controlplane builds it"
	done
	for b in crossplane crossplane-core function-auto-ready crane; do
		need_file "$BIN/$b" "make tools builds it"
	done
	if [[ $E2E_RUNTIME == node ]]; then
		for b in kubelet kube-proxy kube-scheduler; do
			need_file "$BIN/$b" "make node-build builds it"
		done
	fi
	for b in provider-kvm function-kvm-proxy configuration-kvm-proxy; do
		need_file "$XPKG_DIR/$b.xpkg" "make xpkg builds it"
	done
	need_file "$IMAGE" "make image builds it"
	need_file "$IMAGE.sha256" "make image builds it"
	if [[ $TOPOLOGY == lan ]]; then
		need_file "$LAN_DIR/env.sh" "make lan-up starts the LAN test bed"
	else
		need_file "$TB/env.sh" "make testbed-up starts the test bed"
	fi
	# openssl (the PKI), python3 and curl (the baseline's boot-check.sh): from the one install
	# step (make packages), never installed here (this may run inside the namespace).
	"$REPO/cluster/packages/install.sh" --check || die "Debian packages are missing: run make packages"
	# The Crossplane CRDs that `core init` installs come from the core's Go module.
	XP_CRDS=${XP_CRDS:-$(go env GOMODCACHE)/github.com/crossplane/crossplane/v2@$CORE_VERSION/cluster/crds}
	if [[ ! -d $XP_CRDS ]]; then
		(cd "$CACHE_DIR" && GOFLAGS=-mod=mod go mod download "github.com/crossplane/crossplane/v2@$CORE_VERSION") ||
			die "cannot download github.com/crossplane/crossplane/v2@$CORE_VERSION for its CRDs"
	fi
	[[ -d $XP_CRDS ]] || die "no Crossplane CRDs at $XP_CRDS"
	export XP_CRDS
	# The provider, the function and the Go half run as local processes, built from this checkout.
	mkdir -p "$OUT"
	log "building the provider, function-kvm-proxy and the e2e tests from this checkout into $OUT"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$OUT/provider" ./cmd/provider &&
		CGO_ENABLED=0 go build -trimpath -o "$OUT/function-kvm-proxy" ./cmd/function) ||
		die "go build of cmd/provider or cmd/function failed"
	build_e2etest
}

# ------------------------------------------------------------------ the node (E2E_RUNTIME=node)
# These run in the root namespaces (the node's scripts need the machine's cgroups and /sys).

# node_bring_up: a fresh single-node Kubernetes (what an earlier run left is purged), the
# Crossplane core and RBAC manager as Deployments, then the packages of make xpkg through the
# package manager, the provider with the flags a DeploymentRuntimeConfig gives it (POLL,
# PROVIDER_DEBUG). packages.sh checks that all are HEALTHY and that the provider's process runs
# as user 2000 with no capabilities and no way to gain privileges.
node_bring_up() {
	local t0
	t0=$(now)
	PURGE=1 "$NODE/down.sh" || die "cannot stop the node of an earlier run (cluster/node/down.sh)"
	"$NODE/up.sh" || die "the node did not come up (cluster/node/up.sh; logs in $NODE_DIR/logs)"
	log "node up in $(elapsed "$t0")s"
	"$NODE/crossplane.sh" || die "the Crossplane core did not come up on the node (cluster/node/crossplane.sh)"
	log "Crossplane core and RBAC manager Available after $(elapsed "$t0")s"
	PROVIDER_ARGS="${POLL:+--poll=$POLL}${PROVIDER_DEBUG:+ --debug}" "$NODE/packages.sh" ||
		die "the packages did not become healthy on the node (cluster/node/packages.sh)"
	log "node, Crossplane and packages up in $(elapsed "$t0")s"
}

# node_logs: the pods' logs into $LOGS (provider.log, ...), as the local runtime's processes
# write theirs.
node_logs() {
	local name sel
	mkdir -p "$LOGS"
	while read -r name sel; do
		"$NODE/kubectl.sh" -n crossplane-system logs --tail=-1 -l "$sel" >"$LOGS/$name.log" 2>&1 || true
	done <<-EOF
		provider pkg.crossplane.io/provider=provider-kvm
		function-kvm-proxy pkg.crossplane.io/function=provider-kvm-function-kvm-proxy
		function-auto-ready pkg.crossplane.io/function=crossplane-contrib-function-auto-ready
		crossplane app=crossplane
		rbac-manager app=crossplane-rbac-manager
	EOF
}

# run_on_node ARGS...: bring the node up, run this script again inside netns node with ARGS
# (the inner half), then keep the pods' logs and stop the node, on every exit; it exits with
# the inner half's status. KEEP_ON_FAILURE=1 leaves the node running after a failure.
run_on_node() {
	local rc=0
	E2E_T0=$(now)
	export E2E_T0
	node_bring_up
	"$REPO/cluster/lan/exec.sh" node "$@" || rc=$?
	node_logs
	if ((rc != 0)) && [[ ${KEEP_ON_FAILURE:-0} == 1 ]]; then
		warn "KEEP_ON_FAILURE=1: the node is left running (make node-down stops it)"
	else
		"$NODE/down.sh" >>"$NODE_DIR/logs/down.log" 2>&1 || warn "cluster/node/down.sh failed (see $NODE_DIR/logs/down.log)"
	fi
	exit "$rc"
}

# reexec_in_netns ARGS...: run this script again inside the topology's namespace, with its
# variables (TESTBED_* or LAN_*) exported.
reexec_in_netns() {
	if [[ $TOPOLOGY == lan ]]; then
		exec "$REPO/cluster/lan/exec.sh" node "$@"
	fi
	exec "$REPO/cluster/testbed/run-in-netns.sh" "$@"
}

# ------------------------------------------------------------------ work dir
# fresh_work: a new, empty $WORK (the previous run's logs go).
fresh_work() {
	local keep
	if [[ -d $WORK ]]; then
		any_running && die "processes of an earlier run in $WORK still run (a demo? make demo-down stops it)"
		for keep in etcd logs pki pids www xpkg-cache; do rm -rf "${WORK:?}/$keep"; done
		rm -f "$WORK"/*.yaml "$WORK"/*.tsv "$WORK"/objects-* "$WORK"/probe-url "$WORK"/kubeconfig "$WORK"/mode "$WORK"/topology
	fi
	mkdir -p "$WORK" "$LOGS" "$PIDS" "$WORK/etcd" "$WORK/xpkg-cache"
	chmod 0700 "$WORK"
	: >"$PIDS/order"
}

# ------------------------------------------------------------------ PKI (cluster/lib/pki.sh)
make_pki() {
	local P=$WORK/pki d
	mkdir -p "$P/fn-server" "$P/fn-client"
	pki_ca "$P/kube" provider-kvm-e2e-kube-ca
	pki_cert "$P/kube" apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost"
	pki_cert "$P/kube" admin "/O=system:masters/CN=admin"
	pki_sa "$P/kube"
	# Functions: one CA; a server certificate for the functions, a client one for the core.
	# The provider revision's webhook TLS Secret is made from the server one (e2etest install).
	pki_ca "$P/fn" provider-kvm-e2e-fn-ca
	pki_cert "$P/fn" server "/CN=functions" "IP:127.0.0.1,DNS:localhost"
	pki_cert "$P/fn" client "/CN=crossplane"
	for d in server client; do
		cp "$P/fn/ca.crt" "$P/fn-$d/ca.crt"
		cp "$P/fn/$d.crt" "$P/fn-$d/tls.crt"
		cp "$P/fn/$d.key" "$P/fn-$d/tls.key"
	done
}

# ------------------------------------------------------------------ control plane
start_controlplane() {
	local P=$WORK/pki/kube t0=$SECONDS i
	start etcd "$BIN/etcd" --name e2e --data-dir "$WORK/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT"
	waitport "$ETCD_PORT" || die "etcd does not listen on 127.0.0.1:$ETCD_PORT"
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
		--client-ca-file="$P/ca.crt" --authorization-mode=RBAC \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/24 \
		--disable-admission-plugins=ServiceAccount
	k config set-cluster e2e --server="https://127.0.0.1:$APISERVER_PORT" --certificate-authority="$P/ca.crt" --embed-certs >/dev/null
	k config set-credentials admin --client-certificate="$P/admin.crt" --client-key="$P/admin.key" --embed-certs >/dev/null
	k config set-context e2e --cluster=e2e --user=admin >/dev/null
	k config use-context e2e >/dev/null
	# The next processes need the API: up to 180 s.
	for ((i = 0; i < 180; i++)); do
		k get --raw /readyz >/dev/null 2>&1 && break
		alive kube-apiserver || die "kube-apiserver exited (see $LOGS/kube-apiserver.log)"
		sleep 1
	done
	((i < 180)) || die "kube-apiserver is not ready after 180 s (see $LOGS/kube-apiserver.log)"
	log "kube-apiserver ready after $((SECONDS - t0))s ($("$BIN/kube-apiserver" --version))"
	# Its default controllers, as in a cluster: the garbage collector (Crossplane leaves
	# deleting composed resources to it), the namespace controller (deleting a team's
	# namespace deletes its Proxies and VMs), the EndpointSlice controllers (which must leave
	# the Proxies' own EndpointSlices alone), service accounts and their tokens.
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
		--authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" \
		--leader-elect=false --use-service-account-credentials=false \
		--service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT"
	k create namespace crossplane-system >/dev/null
}

# ------------------------------------------------------------------ Crossplane
crossplane_init() {
	local try
	log "crossplane core init ($CORE_VERSION, CRDs from $XP_CRDS)"
	# The first run usually fails with 'no matches for kind "Lock"': the CRDs it just created
	# are not in its REST mapper yet. In a cluster the init container restarts; retry here.
	for try in 1 2 3 4 5; do
		if CRDS_PATH="$XP_CRDS" TLS_CA_SECRET_NAME=crossplane-root-ca TLS_CLIENT_SECRET_NAME=crossplane-tls-client \
			"$BIN/crossplane-core" core init --enable-webhooks=false --namespace=crossplane-system \
			>>"$LOGS/core-init.log" 2>&1; then
			return 0
		fi
		((try < 5)) || break
		log "  core init attempt $try failed ($(tail -n1 "$LOGS/core-init.log" | cut -c1-160)); retrying"
		sleep 2
	done
	tail -n 20 "$LOGS/core-init.log" >&2
	die "crossplane core init failed"
}

crossplane_start() {
	start crossplane "$BIN/crossplane-core" core start --namespace=crossplane-system \
		--enable-webhooks=false --package-runtime=External \
		--tls-client-certs-dir="$WORK/pki/fn-client" --xpkg-cache-dir="$WORK/xpkg-cache" \
		--metrics-port="$CORE_METRICS_PORT" --health-probe-port="$CORE_HEALTH_PORT"
}

# start_functions: both functions as local processes serving mTLS (the Go half registers them
# with FunctionRevisions whose status.endpoint points at them).
start_functions() {
	start function-kvm-proxy env TLS_SERVER_CERTS_DIR="$WORK/pki/fn-server" \
		"$OUT/function-kvm-proxy" --address="127.0.0.1:$FN_PROXY_PORT"
	start function-auto-ready env TLS_SERVER_CERTS_DIR="$WORK/pki/fn-server" \
		"$BIN/function-auto-ready" --address="127.0.0.1:$FN_AUTOREADY_PORT"
	waitport "$FN_PROXY_PORT" || die "function-kvm-proxy does not listen"
	waitport "$FN_AUTOREADY_PORT" || die "function-auto-ready does not listen"
}

# start_registry: the loopback registry with the three packages of `make xpkg` pushed to it.
start_registry() {
	local p
	start registry "$BIN/crane" registry serve --address "$REGISTRY"
	waitport "$REGISTRY_PORT" || die "the registry does not listen on $REGISTRY"
	for p in provider-kvm function-kvm-proxy configuration-kvm-proxy; do
		"$BIN/crossplane" xpkg push -f "$XPKG_DIR/$p.xpkg" "$REGISTRY/provider-kvm/$p:$PKG_TAG" >>"$LOGS/xpkg-push.log" 2>&1 ||
			{ tail -n 20 "$LOGS/xpkg-push.log" >&2; die "crossplane xpkg push of $p failed"; }
	done
	log "pushed provider-kvm, function-kvm-proxy, configuration-kvm-proxy:$PKG_TAG to $REGISTRY"
}

start_provider() {
	start provider "$OUT/provider" ${POLL:+--poll="$POLL"} --metrics-bind-address="127.0.0.1:$PROVIDER_METRICS_PORT" \
		${PROVIDER_DEBUG:+--debug}
}

# start_servers: the guest image on 127.0.0.1:$IMAGE_PORT and the 204 origin on the libvirt
# bridge's address, port $ORIGIN_PORT (the Go half waits until both answer).
start_servers() {
	start http-servers "$E2E_TEST" -e2e.serve
}

# bring_up: the PKI and every process. The caller has done preflight and fresh_work, and runs
# inside the namespace. The Go half then installs the packages through the API.
bring_up() {
	if [[ $E2E_RUNTIME == node ]]; then
		# The outer half brought the node, the core and the packages up (run_on_node).
		start_servers
		log "image server and 204 origin started; node up since $(elapsed "$E2E_T0")s"
		return
	fi
	E2E_T0=$(now)
	export E2E_T0
	make_pki
	start_controlplane
	crossplane_init
	start_functions
	crossplane_start
	start_servers
	start_provider
	start_registry
	log "processes up in $(elapsed "$E2E_T0")s"
}
