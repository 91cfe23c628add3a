#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# demo.sh up|down|status -- make demo / make demo-down (see docs/e2e.md).
#
#   up      what make e2e brings up (lib.sh: the node in netns node, the Crossplane core and the
#           packages as pods, the image server and the 204 origin), then TestDemo (test/e2e): one
#           Proxy demo/squid on host-a that caches its own image; it waits until the Proxy is
#           Ready, prints how to use it and leaves everything running. Run again while the demo
#           is up, it only checks the Proxy and prints the usage.
#   down    deletes the demo's Proxy through Kubernetes (the provider removes the VM and its
#           volumes), stops the servers and the node, then removes whatever of namespace demo
#           is still on the hosts (saying so). After `KEEP_ON_FAILURE=1 make e2e` it does the
#           same for that run's namespaces.
#   status  the node, the servers and the Proxy.
# Env: as run.sh (VCPUS, MEM_MIB, GUEST_TIMEOUT, DELETE_TIMEOUT, POLL, E2E_WORK).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=demo
# shellcheck source=lib.sh
. "$HERE/lib.sh"

# node_up: the node's API server answers.
node_up() { "$NODE/kubectl.sh" get --raw /readyz >/dev/null 2>&1; }
# run_mode: the mode of the run whose configuration is in $WORK (demo, e2e, bench), or "".
run_mode() { sed -n 's/^MODE=//p' "$CONFIG" 2>/dev/null || true; }
# run_namespaces: the namespaces that run left on the hosts.
run_namespaces() { if [[ $(run_mode) == demo ]]; then echo demo; else echo team-a team-b team-c; fi; }

if [[ ${1:-up} != __inner ]]; then
	cmd=${1:-up}
	case $cmd in
	up)
		log "make demo: preflight (binaries, packages, image, LAN test bed)"
		preflight
		if [[ $(run_mode) == demo ]] && node_up; then
			exec "$REPO/cluster/lan/exec.sh" node "$0" __inner again
		fi
		E2E_T0=$(now)
		export E2E_T0
		node_bring_up
		rc=0
		"$REPO/cluster/lan/exec.sh" node "$0" __inner up || rc=$?
		if ((rc != 0)); then
			node_logs
			"$NODE/down.sh" >>"$NODE_DIR/logs/down.log" 2>&1 || warn "cluster/node/down.sh failed (see $NODE_DIR/logs/down.log)"
		fi
		exit "$rc" ;;
	down)
		[[ -x $E2ECTL && -x $E2E_TEST ]] || build_e2etest
		[[ -s $CONFIG ]] || die "no run's configuration ($CONFIG): nothing to do"
		"$REPO/cluster/lan/exec.sh" node "$0" __inner down || exit 1
		node_logs
		"$NODE/down.sh" >>"$NODE_DIR/logs/down.log" 2>&1 || die "cluster/node/down.sh failed (see $NODE_DIR/logs/down.log)"
		log "stopped: the node, the servers; nothing of $(run_namespaces) is left on the hosts (logs kept in $LOGS)"
		exit 0 ;;
	status)
		if node_up; then echo "  the node: up"; else echo "  the node: not running"; fi
		exec "$REPO/cluster/lan/exec.sh" node "$0" __inner status ;;
	*)
		sed -n '3,15p' "$0" >&2
		exit 2 ;;
	esac
fi
cmd=$2
inside_netns || die "demo.sh __inner must run inside network namespace $E2E_NETNS"

case $cmd in
status)
	if alive http-servers; then echo "  http-servers: pid $(pid_of http-servers) running"; else echo "  http-servers: not running"; fi
	"$BIN/kubectl" --kubeconfig="$NODE_DIR/admin.kubeconfig" -n demo get proxies.platform.kvm.crossplane.io 2>/dev/null ||
		echo "  (API server not reachable)"
	exit 0 ;;

down)
	exec 8>"$WORK.lock"
	flock -n 8 || die "make e2e or make demo is running (holds $WORK.lock)"
	# shellcheck disable=SC2207 # the namespaces are single words
	nss=($(run_namespaces))
	e2ectl teardown "${nss[@]}" || warn "deleting through Kubernetes did not finish"
	stop_all
	e2ectl clean "${nss[@]}" || die "still on the hosts (see above)"
	exit 0 ;;

again)
	e2etest -test.count=1 -test.run='^TestDemo$' >"$LOGS/demo-again.log" 2>&1 ||
		{ cat "$LOGS/demo-again.log" >&2; die "the demo is up, but its Proxy is not well (see above)"; }
	grep -v -E '^(PASS|ok )' "$LOGS/demo-again.log"
	exit 0 ;;
esac

# ------------------------------------------------------------------ up
exec 8>"$WORK.lock"
flock -n 8 || die "make e2e or make demo is running (holds $WORK.lock)"
fresh_work
write_config demo
OK=0 TESTED=0
T_START=$(now)
on_exit() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	[[ $OK == 1 ]] && exit 0
	# TestDemo prints its own diagnostics and deletes its Proxy through Kubernetes.
	[[ $TESTED == 1 ]] || e2ectl diagnose demo
	stop_all
	e2ectl clean demo
	log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
	exit $((rc == 0 ? 1 : rc))
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# Leftovers of an earlier demo.
e2ectl clean demo || die "cannot clean the hosts of an earlier demo's objects"
log "starting the image server and the 204 origin inside netns $E2E_NETNS (work dir $WORK)"
start_servers
TESTED=1
e2etest -test.v -test.count=1 -test.timeout=30m -test.run='^TestDemo$'
OK=1
