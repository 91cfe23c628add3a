#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# run.sh [e2e|bench] -- make e2e (default) or make bench-latency: the Proxy product end to end on
# the single-node Kubernetes of cluster/node, with Crossplane and the packages of make xpkg as
# pods, and two libvirt hosts across the LAN test bed (cluster/lan), with nothing but this
# repository's code (see docs/e2e.md).
#
# The outer half (root namespaces) runs the preflight, brings the node up with the Crossplane
# core and the packages (lib.sh: node_bring_up), runs the inner half inside netns node, then
# keeps the pods' logs and stops the node. The inner half writes the run's configuration
# ($WORK/e2e.env), starts the image server and the 204 origin (e2ectl serve) and runs the Go
# test: TestE2E (make e2e: the installation, the plain-virsh baseline, every example of
# examples/proxy booted at once on both hosts, deletion, the timeline) or TestBenchLatency (make
# bench-latency: what the provider adds to a Proxy's boot, BENCH_RUNS runs). On failure the Go
# test prints the diagnostics and deletes what it created through Kubernetes, and what is still
# on the hosts afterwards is removed with libvirt calls (e2ectl clean).
#
# Env: VCPUS (2) and MEM_MIB (1024) of every guest, GUEST_TIMEOUT (900 s per guest),
#      DELETE_TIMEOUT (600 s), POLL (provider poll interval; default: the provider's own, 1m),
#      E2E_WORK (/var/lib/provider-kvm-e2e), SKIP_BASELINE=1, PROVIDER_DEBUG=1, BENCH_RUNS (3),
#      KEEP_ON_FAILURE=1 (leave the node, the servers and the VMs running after a failure, for
#      debugging; make demo-down removes them), E2E_RUN (the -test.run pattern).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

NAMESPACES=(team-a team-b team-c)

if [[ ${1:-} != __inner ]]; then
	MODE=${1:-e2e}
	case $MODE in
	# The README's quickstart installs the packages (test/e2e, quickstart.go); packages.sh
	# puts only the platform's part in place.
	e2e) TEST='^(TestE2E|TestPlacement)$' PACKAGES_INSTALL=platform ;;
	bench) TEST='^TestBenchLatency$' ;;
	*) die "run.sh $MODE: want e2e or bench" ;;
	esac
	export PACKAGES_INSTALL
	log "make $MODE: preflight (binaries, packages, image, LAN test bed)"
	preflight
	run_on_node "$0" __inner "$MODE" "${E2E_RUN:-$TEST}"
fi
MODE=$2 TEST=$3

inside_netns || die "run.sh __inner must run inside network namespace $E2E_NETNS"
exec 8>"$WORK.lock"
flock -n 8 || die "another make e2e, bench-latency or demo holds $WORK.lock"
fresh_work
write_config "$MODE"
OK=0 TESTED=0
T_START=$(now)

on_exit() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	if [[ $OK != 1 ]]; then
		# The Go test prints its own diagnostics; a failed bring-up has none yet.
		[[ $TESTED == 1 ]] || e2ectl diagnose "${NAMESPACES[@]}"
		if [[ ${KEEP_ON_FAILURE:-0} == 1 ]]; then
			warn "KEEP_ON_FAILURE=1: the servers and VMs are left running; make demo-down stops them"
			log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
			exit "$rc"
		fi
	fi
	stop_all
	e2ectl clean "${NAMESPACES[@]}" || rc=1
	if [[ $OK == 1 ]]; then
		log "PASS in $(elapsed "$T_START")s (logs in $LOGS)"
	else
		log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
		((rc != 0)) || rc=1
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# Leftovers of a crashed run.
e2ectl clean "${NAMESPACES[@]}" || die "cannot clean the hosts of an earlier run's objects"

log "1/5 the image server and the 204 origin inside netns $E2E_NETNS (work dir $WORK)"
start_servers

TESTED=1
e2etest -test.v -test.count=1 -test.timeout=40m -test.run="$TEST"
OK=1
