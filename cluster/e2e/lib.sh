# shellcheck shell=bash
# lib.sh -- the shell half of make e2e, make bench-latency and make demo, sourced by
# cluster/e2e/run.sh and cluster/e2e/demo.sh, never run: the node and the processes. Everything
# else (the checks of the installation through the API, the Proxies, the timeline, the
# diagnostics, the image server and the 204 origin) is the Go package test/e2e: its tests
# (e2e.test) and its helper command e2ectl (serve, clean, teardown, diagnose), both configured
# by one file, $WORK/e2e.env, that write_config writes at the start of a run (docs/e2e.md).
#
# Where it all runs: the LAN test bed (cluster/lan): the single-node Kubernetes of cluster/node
# in netns node, with the Crossplane core and RBAC manager as Deployments and the packages of
# make xpkg as pods under Crossplane's package runtime (cluster/node/crossplane.sh and
# packages.sh); two libvirt hosts, host-a and host-b, reached over SSH across the LAN, guests on
# each host's bridge. The tests and e2ectl serve (the image server and the 204 origin, the one
# process this library starts, recorded in $WORK/pids) run inside netns node. The process
# library is cluster/lib/proc.sh, as for every test bed script.

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
E2E_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$E2E_LIB/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm}
BIN=${BIN:-$CACHE_DIR/bin}
LAN_DIR=${LAN_DIR:-/var/lib/provider-kvm-lan}
E2E_NETNS=node
WORK=${E2E_WORK:-/var/lib/provider-kvm-e2e}
LOGS=$WORK/logs
PIDS=$WORK/pids
CONFIG=$WORK/e2e.env
# shellcheck source=cluster/lib/proc.sh
. "$REPO/cluster/lib/proc.sh"
NODE_DIR=${NODE_DIR:-/var/lib/provider-kvm-node}
NODE=$REPO/cluster/node
IMAGE=${TESTBED_IMAGE:-$CACHE_DIR/images/debian-12-testbed.qcow2}
XPKG_DIR=${XPKG_DIR:-$REPO/_output/xpkg}
OUT=${E2E_OUT:-$REPO/_output/e2e}
# The Go half, built by preflight: the tests (go test -c) and the helper command.
E2E_TEST=$OUT/e2e.test
E2ECTL=$OUT/e2ectl
PKG_TAG=${PKG_TAG:-v0.1.0} # a tag the Configuration's dependency constraints accept
# Provider poll interval: how often a booting KVMDomain is looked at again. Part of the
# measured overhead (see docs/e2e.md).
POLL=${POLL:-} # empty: the provider's default (--poll=1m), as a platform team installs it
LOG_TAG=${LOG_TAG:-e2e}
export PKG_TAG XPKG_DIR NODE_DIR

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*"; }
proc_log() { log "$@"; }
warn() { printf '[%s %s] WARNING: %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '[%s %s] FAIL: %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*" >&2; exit 1; }
now() { date +%s.%N; }
# elapsed FROM: seconds since FROM, with one decimal
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# e2etest ARGS... and e2ectl ARGS...: the Go half, in its package directory (as go test runs
# it), on this run's configuration.
e2etest() { (cd "$REPO/test/e2e" && "$E2E_TEST" -e2e.config="$CONFIG" "$@"); }
e2ectl() { (cd "$REPO/test/e2e" && "$E2ECTL" -config="$CONFIG" "$@"); }

# inside_netns: this process is inside network namespace node.
inside_netns() {
	[[ -e /run/netns/$E2E_NETNS ]] &&
		[[ $(stat -Lc '%d:%i' /proc/self/ns/net) == "$(stat -Lc '%d:%i' "/run/netns/$E2E_NETNS")" ]]
}

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

# build_e2etest: the Go half (the tests and e2ectl), and test/lan's tests for the plain-virsh
# baseline on host-a's bridge, from this checkout.
build_e2etest() {
	mkdir -p "$OUT"
	(cd "$REPO" && go test -c -tags e2e -o "$E2E_TEST" ./test/e2e && go build -tags e2e -o "$E2ECTL" ./test/e2e/e2ectl) ||
		die "building test/e2e or test/e2e/e2ectl (-tags e2e) failed"
	# Its offline tests first (manifests render, every example still holds what the e2e
	# replaces): a broken example fails here, not after the bring-up.
	(cd "$REPO/test/e2e" && "$E2E_TEST" -test.count=1 -test.run '^(TestManifests|TestProxyExamples|TestTimelineTable|TestConfig|TestAppPods|TestParseProber|TestHTTPGetCheck|TestQuickstart|TestPKI|TestContainerProcess)$') ||
		die "the e2e's offline tests failed (above)"
	(cd "$REPO" && go test -c -tags lan -o "$OUT/lan.test" ./test/lan) ||
		die "go test -c -tags lan ./test/lan failed"
}

preflight() {
	local b
	for b in kube-apiserver etcd kube-controller-manager kubectl; do
		need_file "$BIN/$b" "make controlplane builds it"
	done
	for b in crossplane crossplane-core function-auto-ready crane; do
		need_file "$BIN/$b" "make tools builds it"
	done
	for b in kubelet kube-proxy kube-scheduler; do
		need_file "$BIN/$b" "make node-build builds it"
	done
	for b in provider-kvm-amd64 function-kvm-proxy-amd64 configuration-kvm-proxy; do
		need_file "$XPKG_DIR/$b.xpkg" "make xpkg builds it" # the node is linux/amd64
	done
	need_file "$IMAGE" "make image builds it"
	need_file "$IMAGE.sha256" "make image builds it"
	need_file "$LAN_DIR/env.sh" "make lan-up starts the LAN test bed"
	# openssl, python3 and curl: from the one install step (make packages), never installed
	# here (this may run inside the namespace).
	"$REPO/cluster/packages/install.sh" --check || die "Debian packages are missing: run make packages"
	log "building the e2e tests and e2ectl from this checkout into $OUT"
	build_e2etest
}

# ------------------------------------------------------------------ the node
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
	# The HTTPS image servers' CAs and certificates (e2ectl pki; e2ectl serve uses them): the
	# trusted CA goes to the provider's pod through its DeploymentRuntimeConfig, as a platform
	# team's private CA does; the other is given to nobody.
	local node_ip
	# shellcheck source=/dev/null
	node_ip=$(. "$LAN_DIR/env.sh" && echo "$LAN_NODE_IP")
	"$E2ECTL" pki "$NODE_DIR/e2e-tls" "$node_ip" || die "e2ectl pki failed"
	# --cluster-id: the ID test/e2e checks in the ownership records on the hosts (clusterID).
	# PACKAGES_INSTALL=platform (make e2e): only the platform's part; the README's quickstart,
	# run by the test, installs the packages.
	PROVIDER_ARGS="--cluster-id=e2e${POLL:+ --poll=$POLL}${PROVIDER_DEBUG:+ --debug}" \
		PROVIDER_CA_FILE="$NODE_DIR/e2e-tls/trusted/ca.crt" "$NODE/packages.sh" ||
		die "the packages did not become healthy on the node (cluster/node/packages.sh)"
	log "node, Crossplane and packages up in $(elapsed "$t0")s"
}

# node_logs: the pods' logs into $LOGS (provider.log, ...).
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

# reexec_in_netns ARGS...: run this script again inside netns node, with the LAN's variables.
reexec_in_netns() { exec "$REPO/cluster/lan/exec.sh" node "$@"; }

# ------------------------------------------------------------------ work dir
# fresh_work: a new, empty $WORK (the previous run's logs go).
fresh_work() {
	local keep
	if [[ -d $WORK ]]; then
		any_running && die "processes of an earlier run in $WORK still run (a demo? make demo-down stops it)"
		for keep in logs pids www quickstart; do rm -rf "${WORK:?}/$keep"; done
		rm -f "$WORK"/*.yaml "$WORK"/*.tsv "$WORK"/objects-* "$WORK"/probe-url "$WORK"/e2e.env
	fi
	mkdir -p "$WORK" "$LOGS" "$PIDS"
	chmod 0700 "$WORK"
	: >"$PIDS/order"
}

# write_config MODE: the run's configuration, $WORK/e2e.env, the one file the Go half reads
# (test/e2e, LoadConfig): what this run was asked for (only what is set; the Go side holds
# the defaults) and the LAN test bed's facts, copied from cluster/lan's env.sh.
write_config() {
	local v
	{
		echo "# The configuration of this run of make $1, written by cluster/e2e/lib.sh (write_config);"
		echo "# test/e2e's tests and e2ectl read it. KEY=VALUE lines; the LAN's are cluster/lan's env.sh."
		echo "MODE=$1"
		echo "REPO=$REPO"
		echo "OUT=$OUT"
		echo "IMAGE=$IMAGE"
		echo "NODE_DIR=$NODE_DIR"
		echo "BIN=$BIN"
		for v in POLL VCPUS MEM_MIB GUEST_TIMEOUT DELETE_TIMEOUT SKIP_BASELINE KEEP_ON_FAILURE BENCH_RUNS IMAGE_PORT IMAGE_TLS_PORT IMAGE_UNTRUSTED_PORT ORIGIN_PORT CLIENT_IMAGE NODE_REGISTRY; do
			[[ -z ${!v:-} ]] || echo "$v=${!v}"
		done
		[[ -z ${E2E_T0:-} ]] || echo "T0=$E2E_T0"
		grep -E '^(export )?LAN_[A-Z0-9_]+=' "$LAN_DIR/env.sh"
	} >"$CONFIG.tmp"
	mv "$CONFIG.tmp" "$CONFIG"
}

# start_servers: the guest image and the 204 origin on node's LAN address (e2ectl serve; the
# Go half waits until both answer).
start_servers() {
	start http-servers "$E2ECTL" -config="$CONFIG" serve
}
