#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# demo.sh up|down|status -- make demo / make demo-down (see docs/e2e.md).
#
#   up      the processes of make e2e (lib.sh), then TestDemo (test/e2e): the
#           installation and one Proxy demo/squid that caches its own image; it waits until the
#           Proxy is Ready, prints how to use it and leaves everything running. Run again while
#           the demo is up, it only checks the Proxy and prints the usage.
#   down    deletes the demo's Proxy through Kubernetes (the provider removes the VM and its
#           volumes), stops every process the demo started by its recorded PID, then removes
#           whatever of namespace demo is still on the test bed (saying so). After
#           `KEEP_ON_FAILURE=1 make e2e` it does the same for team-a and team-b.
#   status  the recorded processes and the Proxy.
# Env: as run.sh (VCPUS, MEM_MIB, GUEST_TIMEOUT, DELETE_TIMEOUT, POLL, E2E_WORK).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=demo
# The demo runs on the single-host test bed; down and status go where the last run was (after
# `KEEP_ON_FAILURE=1 make e2e`, the LAN test bed).
if [[ ${1:-up} == up ]]; then
	export TOPOLOGY=nat
elif [[ ${1:-} != __inner ]]; then
	TOPOLOGY=$(cat "${E2E_WORK:-/var/lib/provider-kvm-e2e}/topology" 2>/dev/null || echo nat)
	export TOPOLOGY
fi
# shellcheck source=lib.sh
. "$HERE/lib.sh"
cmd=${1:-up}

if [[ $cmd != __inner ]]; then
	case $cmd in
	up)
		log "make demo: preflight (binaries, packages, image, test bed)"
		preflight ;;
	down | status)
		[[ -x $E2E_TEST ]] || build_e2etest ;;
	*)
		sed -n '3,14p' "$0" >&2
		exit 2 ;;
	esac
	if [[ $TOPOLOGY == lan ]]; then
		[[ -r $LAN_DIR/env.sh ]] || die "the LAN test bed is not up ($LAN_DIR/env.sh missing): nothing to do"
	else
		[[ -r $TB/env.sh ]] || die "the test bed is not up ($TB/env.sh missing): nothing to do"
	fi
	reexec_in_netns "$0" __inner "$cmd"
fi
cmd=$2
inside_netns || die "demo.sh __inner must run inside network namespace $E2E_NETNS"
export E2E_DEMO=1

case $cmd in
status)
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		n=$(basename "$f" .pid)
		if alive "$n"; then echo "  $n: pid $(pid_of "$n") running"; else echo "  $n: not running"; fi
	done
	k -n demo get proxies.platform.kvm.crossplane.io 2>/dev/null || echo "  (API server not reachable)"
	exit 0 ;;

down)
	exec 8>"$WORK.lock"
	flock -n 8 || die "make e2e or make demo is running (holds $WORK.lock)"
	# Also cleans up after `KEEP_ON_FAILURE=1 make e2e` (mode e2e: namespaces team-a, team-b).
	mode=$(cat "$WORK/mode" 2>/dev/null || true)
	nss=demo
	[[ $mode != e2e ]] || nss=team-a,team-b
	if [[ -n $mode ]] && alive provider; then
		e2etest -e2e.teardown="$nss" || warn "deleting through Kubernetes did not finish"
	else
		log "no running provider: skipping the deletion through Kubernetes"
	fi
	stop_all
	e2etest -e2e.clean="$nss" || die "still on the test bed (see above)"
	rm -f "$WORK/mode"
	log "stopped; nothing of ${nss/,/ and } is left on the test bed (logs kept in $LOGS)"
	exit 0 ;;
esac

# ------------------------------------------------------------------ up
exec 8>"$WORK.lock"
flock -n 8 || die "make e2e or make demo is running (holds $WORK.lock)"
if any_running; then
	[[ $(cat "$WORK/mode" 2>/dev/null || true) == demo ]] ||
		die "processes of a make e2e run are still recorded in $PIDS; make demo-down stops them"
	e2etest -test.count=1 -test.run='^TestDemo$' >"$LOGS/demo-again.log" 2>&1 ||
		{ cat "$LOGS/demo-again.log" >&2; die "the demo is up, but its Proxy is not well (see above)"; }
	grep -v -E '^(PASS|ok )' "$LOGS/demo-again.log"
	exit 0
fi
fresh_work
echo demo >"$WORK/mode"
OK=0 TESTED=0
T_START=$(now)
on_exit() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	[[ $OK == 1 ]] && exit 0
	# TestDemo prints its own diagnostics and deletes its Proxy through Kubernetes.
	[[ $TESTED == 1 ]] || e2etest -e2e.diagnose
	stop_all
	e2etest -e2e.clean=demo
	rm -f "$WORK/mode"
	log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
	exit $((rc == 0 ? 1 : rc))
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# Leftovers of an earlier demo.
e2etest -e2e.clean=demo || die "cannot clean the test bed of an earlier demo's objects"
log "bringing up the control plane inside netns $TESTBED_NETNS (work dir $WORK)"
bring_up
TESTED=1
e2etest -test.v -test.count=1 -test.timeout=30m -test.run='^TestDemo$'
OK=1
