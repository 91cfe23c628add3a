#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# run.sh -- make e2e: the Proxy product end to end on a real control plane and a real libvirt
# hosts, with nothing but this repository's code (see docs/e2e.md). TOPOLOGY=lan (lib.sh's default):
# the LAN test bed (cluster/lan), the control plane, provider and clients in netns node, two
# libvirt hosts over SSH; TOPOLOGY=nat: the single-host test bed (cluster/testbed).
#
# This script starts and stops the processes (lib.sh: the PKI, etcd, kube-apiserver,
# kube-controller-manager, the Crossplane core, both functions, the image server and the 204
# origin, the provider, the loopback registry with the packages); the test itself is Go,
# TestE2E in test/e2e (built by the preflight with go test -c):
#   1. the installation through the API (functions, packages, the test bed as host);
#   2. the baseline: the same guest booted with plain virsh (cluster/testbed/boot-check.sh);
#   3. BaseImage team-a/debian-12 on host A, Proxy team-a/proxy-a on it, Proxy team-a/proxy-b
#      on host B with its own image, ProxyClaim team-b/proxy-c on host A with its own image:
#      Ready, Secret, Service and EndpointSlice, a 204 through each proxy's address;
#   4. deletion: nothing of team-a or team-b is left on either host;
#   5. the timeline next to the baseline.
# Everything after the preflight runs inside the topology's network namespace. Every process
# started is stopped by its recorded PID at the end, also on failure; on failure the Go test
# prints the diagnostics and deletes what it created through Kubernetes, and what is still on
# the host afterwards is removed with libvirt calls (e2e.test -e2e.clean).
#
# Env: VCPUS (2) and MEM_MIB (1024) of every guest, GUEST_TIMEOUT (900 s per guest),
#      DELETE_TIMEOUT (600 s), POLL (provider poll interval; default: the provider's own, 1m), E2E_WORK
#      (/var/lib/provider-kvm-e2e), SKIP_BASELINE=1, PROVIDER_DEBUG=1, KEEP_ON_FAILURE=1 (leave
#      processes and VMs running after a failure, for debugging; make demo-down removes them),
#      E2E_RUN (the -test.run pattern, ^TestE2E$).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

NAMESPACES=team-a,team-b,team-c

if [[ ${1:-} != __inner ]]; then
	log "make e2e: preflight (binaries, packages, image, test bed; topology $TOPOLOGY)"
	preflight
	[[ $E2E_RUNTIME != node ]] || run_on_node "$0" __inner
	reexec_in_netns "$0" __inner
fi

inside_netns || die "run.sh __inner must run inside network namespace $E2E_NETNS"
exec 8>"$WORK.lock"
flock -n 8 || die "another make e2e or make demo holds $WORK.lock"
fresh_work
echo e2e >"$WORK/mode"
echo "$TOPOLOGY" >"$WORK/topology"
OK=0 TESTED=0
T_START=$(now)

on_exit() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	if [[ $OK != 1 ]]; then
		# The Go test prints its own diagnostics; a failed bring-up has none yet.
		[[ $TESTED == 1 ]] || e2etest -e2e.diagnose
		if [[ ${KEEP_ON_FAILURE:-0} == 1 ]]; then
			warn "KEEP_ON_FAILURE=1: processes and VMs left running; make demo-down stops them"
			log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
			exit "$rc"
		fi
	fi
	stop_all
	rm -f "$WORK/mode"
	e2etest -e2e.clean="$NAMESPACES" || rc=1
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
e2etest -e2e.clean="$NAMESPACES" || die "cannot clean the test bed of an earlier run's objects"

log "1/5 bring-up inside netns $E2E_NETNS (topology $TOPOLOGY, work dir $WORK)"
bring_up

TESTED=1
e2etest -test.v -test.count=1 -test.timeout=40m -test.run="${E2E_RUN:-^TestE2E\$}"
OK=1
