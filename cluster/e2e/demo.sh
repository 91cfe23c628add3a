#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# demo.sh up|down|status -- make demo / make demo-down (see docs/e2e.md).
#
#   up      the bring-up of make e2e (lib.sh), then one Proxy demo/squid that caches its own
#           image; waits until it is Ready, prints how to use it and leaves everything running.
#           Run again while the demo is up, it only prints the usage.
#   down    deletes the demo's Proxy through Kubernetes (the provider removes the VM and its
#           volumes), stops every process the demo started by its recorded PID, then checks
#           with virsh that nothing of namespace demo is left (and removes it if it is). After
#           `KEEP_ON_FAILURE=1 make e2e` it does the same for team-a and team-b.
#   status  the recorded processes and the Proxy.
# Env: as run.sh (VCPUS, MEM_MIB, GUEST_TIMEOUT, POLL, E2E_WORK).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=demo
# shellcheck source=lib.sh
. "$HERE/lib.sh"
cmd=${1:-up}

if [[ $cmd != __inner ]]; then
	case $cmd in
	up)
		log "make demo: preflight (binaries, packages, image, test bed)"
		preflight ;;
	down | status) ;;
	*)
		sed -n '3,14p' "$0" >&2
		exit 2 ;;
	esac
	[[ -r $TB/env.sh ]] || die "the test bed is not up ($TB/env.sh missing): nothing to do"
	reexec_in_netns "$0" __inner "$cmd"
fi
cmd=$2
inside_netns || die "demo.sh __inner must run inside the test bed's network namespace"

usage() {
	local url
	url=$(k -n demo get secret squid-proxy -o jsonpath='{.data.url}' 2>/dev/null | base64 -d || true)
	cat <<EOF

The demo is running: Proxy demo/squid is Ready (a squid VM on the test bed, booted under TCG).
Everything lives in network namespace ${TESTBED_NETNS}; the guest network is reachable only there.

  # kubectl against the demo's API server (runs kubectl $("$KUBECTL" version --client | head -n1 | awk '{print $3}') inside the namespace):
  cluster/e2e/kubectl.sh -n demo get proxy squid
  cluster/e2e/kubectl.sh -n demo get seedvolumes,kvmdomains,baseimages,secrets
  cluster/e2e/kubectl.sh -n demo get secret squid-proxy -o jsonpath='{.data.url}' | base64 -d

  # use the proxy (the Secret's url: ${url:-unknown}):
  ip netns exec ${TESTBED_NETNS} curl -sS -o /dev/null -w '%{http_code}\\n' -x ${url:-http://IP:3128} ${PROBE_URL:-http://192.168.122.1:$ORIGIN_PORT/}

  # the VM on the host:
  virsh -c qemu:///system list --all        (domain demo_squid)

Logs: $LOGS    Stop and clean up: make demo-down
EOF
}

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
	nss=(demo)
	[[ $mode != e2e ]] || nss=(team-a team-b)
	if [[ -n $mode ]] && k get --raw /readyz >/dev/null 2>&1 && alive provider; then
		log "deleting the Proxies and claims of ${nss[*]} through Kubernetes"
		for ns in "${nss[@]}"; do
			k -n "$ns" delete proxyclaims.platform.kvm.crossplane.io,proxies.platform.kvm.crossplane.io --all --wait=false >/dev/null 2>&1 || true
		done
		wait_for "their managed resources to be deleted" "$DELETE_TIMEOUT" \
			bash -c "[[ -z \$('$KUBECTL' get kvmdomains.kvm.crossplane.io,seedvolumes.kvm.crossplane.io -A -o name) ]]" ||
			warn "managed resources are still there"
		for ns in "${nss[@]}"; do
			k -n "$ns" delete baseimages.kvm.crossplane.io --all --wait=false >/dev/null 2>&1 || true
		done
		wait_for "the test bed to hold nothing of ${nss[*]}" 300 host_clean "${nss[@]}" || true
	else
		log "no running control plane: skipping the deletion through Kubernetes"
	fi
	stop_all
	left=$(libvirt_objects "${nss[@]}")
	if [[ -n $left ]]; then
		warn "left on the test bed (removing with virsh):"$'\n'"$left"
		force_clean "${nss[@]}"
	fi
	left=$(libvirt_objects "${nss[@]}")
	[[ -z $left ]] || die "still on the test bed: $left"
	rm -f "$WORK/mode"
	log "stopped; nothing of ${nss[*]} is left on the test bed (logs kept in $LOGS)"
	exit 0 ;;
esac

# ------------------------------------------------------------------ up
exec 8>"$WORK.lock"
flock -n 8 || die "make e2e or make demo is running (holds $WORK.lock)"
if any_running; then
	if [[ $(cat "$WORK/mode" 2>/dev/null || true) == demo ]]; then
		PROBE_URL=$(cat "$WORK/probe-url" 2>/dev/null || true)
		log "the demo is already up"
		usage
		exit 0
	fi
	die "processes of a make e2e run are still recorded in $PIDS; make demo-down stops them"
fi
fresh_work
echo demo >"$WORK/mode"
: >"$TIMELINE"
OK=0
T_START=$(now)
on_exit() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	[[ $OK == 1 ]] && exit 0
	diagnose
	if k get --raw /readyz >/dev/null 2>&1 && alive provider; then
		k -n demo delete proxies.platform.kvm.crossplane.io --all --wait=false >/dev/null 2>&1
		wait_for "the test bed to be clean" 240 host_clean demo
	fi
	stop_all
	[[ -z $(libvirt_objects demo) ]] || force_clean demo
	rm -f "$WORK/mode"
	log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
	exit $((rc == 0 ? 1 : rc))
}
trap on_exit EXIT
trap 'exit 130' INT TERM

left=$(libvirt_objects demo)
if [[ -n $left ]]; then
	warn "the test bed holds objects of an earlier demo (removing them):"$'\n'"$left"
	force_clean demo
fi
log "bringing up the control plane inside netns $TESTBED_NETNS (work dir $WORK)"
bring_up
echo "$PROBE_URL" >"$WORK/probe-url"
log "creating Proxy demo/squid (caches the guest image from $IMAGE_URL_DEMO, then boots it; several minutes under TCG)"
t=$(now)
apply "$MANIFESTS/demo.yaml"
watch demo proxies.platform.kvm.crossplane.io squid crossplane.io/composite=squid "$t" demo/squid
check_endpoint demo/squid demo squid-proxy -n demo get proxies.platform.kvm.crossplane.io squid
OK=1
log "demo up in $(elapsed "$T_START")s (Proxy created -> Ready: $(elapsed "$t")s)"
usage
