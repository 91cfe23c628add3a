#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# run.sh -- make e2e: the Proxy product end to end on a real control plane and a real libvirt
# host, with nothing but this repository's scripts (see docs/e2e.md).
#
#   1. bring-up (lib.sh): etcd, kube-apiserver, kube-controller-manager (garbage collector),
#      Crossplane core v2.4.0 out of cluster, both functions (mTLS, hand-made FunctionRevisions),
#      the provider and configuration packages from a loopback registry through the package
#      manager, the provider as a local process, the test bed as ClusterProviderConfig default;
#   2. baseline: the same guest image booted with plain virsh to a squid 204
#      (cluster/testbed/boot-check.sh), with the control plane idling alongside;
#   3. as the platform team: namespace team-a with BaseImage debian-12;
#      as application teams, one guest at a time: Proxy team-a/proxy-a, Proxy team-a/proxy-b
#      (both on debian-12), ProxyClaim team-b/proxy-c (its own image); each must become Ready,
#      its Secret <xr>-proxy must hold url/host/port, and `curl -x <url>` must get the 204;
#   4. delete proxy-a: its domain, overlay, NVRAM and seed are gone, proxy-b still answers,
#      the shared base volume stays; delete proxy-b, the claim and the BaseImage: nothing of
#      team-a or team-b (domains, volumes, NVRAM) is left on the host;
#   5. the timeline: seconds from creation to each composed resource Ready and the Proxy Ready,
#      next to the plain-virsh baseline.
# Everything after the preflight runs inside the test bed's network namespace. Every process
# started is stopped by its recorded PID at the end, also on failure; on failure the logs stay
# in $WORK/logs and their tails are printed.
#
# Env: VCPUS (2) and MEM_MIB (1024) of every guest, GUEST_TIMEOUT (900 s per guest),
#      DELETE_TIMEOUT (600 s), POLL (provider poll interval, 5s), E2E_WORK
#      (/var/lib/provider-kvm-e2e), SKIP_BASELINE=1, PROVIDER_DEBUG=1, KEEP_ON_FAILURE=1 (leave
#      processes and VMs running after a failure, for debugging; make demo-down removes them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

NAMESPACES=(team-a team-b)

if [[ ${1:-} != __inner ]]; then
	log "make e2e: preflight (binaries, packages, image, test bed)"
	preflight
	reexec_in_netns "$0" __inner
fi

inside_netns || die "run.sh __inner must run inside the test bed's network namespace"
exec 8>"$WORK.lock"
flock -n 8 || die "another make e2e or make demo holds $WORK.lock"
fresh_work
echo e2e >"$WORK/mode"
: >"$TIMELINE"
OK=0
T_START=$(now)

on_exit() {
	local rc=$? left
	set +e
	trap - EXIT INT TERM
	if [[ $OK != 1 ]]; then
		diagnose
		if [[ ${KEEP_ON_FAILURE:-0} == 1 ]]; then
			warn "KEEP_ON_FAILURE=1: processes and VMs left running; make demo-down stops them"
			log "FAIL after $(elapsed "$T_START")s; logs in $LOGS"
			exit "$rc"
		fi
		delete_through_kubernetes 240
	fi
	stop_all
	rm -f "$WORK/mode"
	left=$(libvirt_objects "${NAMESPACES[@]}")
	if [[ -n $left ]]; then
		warn "left on the test bed after the run:"$'\n'"$left"
		force_clean "${NAMESPACES[@]}"
	fi
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

# delete_through_kubernetes SECONDS: after a failure, delete what the run created through the
# API (the provider cleans the host), and wait a bounded time for the host to be clean.
delete_through_kubernetes() {
	k get --raw /readyz >/dev/null 2>&1 || return 0
	alive provider || return 0
	log "deleting the Proxies, claims and BaseImages through Kubernetes"
	k -n team-b delete proxyclaims.platform.kvm.crossplane.io --all --wait=false >/dev/null 2>&1
	k -n team-a delete proxies.platform.kvm.crossplane.io --all --wait=false >/dev/null 2>&1
	k delete baseimages.kvm.crossplane.io -n team-a --all --wait=false >/dev/null 2>&1
	wait_for "the test bed to be clean" "$1" host_clean "${NAMESPACES[@]}" || true
}

# print_timeline: the events of the three proxies as a table, the other records as a list, and
# each proxy's created -> Ready against the plain-virsh baseline.
print_timeline() {
	awk -F'\t' -v base="$BASELINE" -v bsubj="$BASE_SUBJ" '
		BEGIN {
			n = split(bsubj "|team-a/proxy-a|team-a/proxy-b|team-b/proxy-c (claim)", subj, "|")
			for (i = 1; i <= n; i++) isubj[subj[i]] = 1
			m = split("BaseImage Ready|SeedVolume Ready|KVMDomain defined + started|KVMDomain address known|Secret composed|KVMDomain Ready (probe 204 through squid)|Proxy Ready", ev, "|")
		}
		($1 in isubj) { key[$1 SUBSEP $2] = $3; next }
		{ other[++o] = sprintf("  %-32s %-62s %8s", $1, $2, $3) }
		END {
			printf "  %-44s", "event"; for (i = 1; i <= n; i++) printf " %23s", subj[i]; printf "\n"
			for (j = 1; j <= m; j++) {
				printf "  %-44s", ev[j]
				for (i = 1; i <= n; i++) {
					v = key[subj[i] SUBSEP ev[j]]
					if (v == "" && ev[j] == "BaseImage Ready" && subj[i] ~ /^team-a/) v = "shared"
					printf " %23s", (v == "" ? "-" : v)
				}
				printf "\n"
			}
			if (base != "" && base != "n/a") {
				printf "  %-44s", "Proxy Ready minus plain virsh (" base " s)"
				for (i = 1; i <= n; i++) { v = key[subj[i] SUBSEP "Proxy Ready"]; printf " %23s", (v == "" || i == 1 ? "-" : sprintf("%+.1f", v - base)) }
				printf "\n"
			}
			for (k = 1; k <= o; k++) print other[k]
		}' "$TIMELINE"
}

# ------------------------------------------------------------------ 0. leftovers of a crashed run
left=$(libvirt_objects "${NAMESPACES[@]}")
if [[ -n $left ]]; then
	warn "the test bed holds objects of an earlier run (removing them):"$'\n'"$left"
	force_clean "${NAMESPACES[@]}"
fi

# ------------------------------------------------------------------ 1. bring-up
log "1/5 bring-up inside netns $TESTBED_NETNS (work dir $WORK)"
bring_up
record bring-up "control plane + Crossplane + packages installed" "$BRINGUP_S"

# ------------------------------------------------------------------ 2. baseline
BASELINE=n/a
BASE_SUBJ="plain virsh (from start)"
if [[ ${SKIP_BASELINE:-0} != 1 ]]; then
	log "2/5 baseline: the guest image booted with plain virsh to a squid 204 (boot-check.sh, $VCPUS vCPU, $MEM_MIB MiB)"
	if ! VCPUS=$VCPUS MEM_MB=$MEM_MIB TIMEOUT=$GUEST_TIMEOUT IMAGE=$IMAGE \
		"$REPO/cluster/testbed/boot-check.sh" >"$LOGS/boot-check.log" 2>&1; then
		tail -n 30 "$LOGS/boot-check.log" >&2
		die "the plain-virsh boot check failed: the test bed or the image is broken, not the provider"
	fi
	sed 's/^/  /' "$LOGS/boot-check.log" | grep -E 'running|IP|204|timeline|setup' || true
	# boot-check's timeline line: running=1.0 lease-ip=41.5 agent-ip=52.0 squid-204=79.5
	BASELINE=$(sed -n 's/.*start->204 = \([0-9.]*\)s.*/\1/p' "$LOGS/boot-check.log" | tail -n1)
	lease=$(sed -n 's/.*timeline.* lease-ip=\([0-9.]*\).*/\1/p' "$LOGS/boot-check.log" | tail -n1)
	record "$BASE_SUBJ" "KVMDomain defined + started" 0.0
	record "$BASE_SUBJ" "KVMDomain address known" "${lease:-n/a}"
	record "$BASE_SUBJ" "KVMDomain Ready (probe 204 through squid)" "$BASELINE"
	record "$BASE_SUBJ" "Proxy Ready" "$BASELINE"
	BASELINE_SETUP=$(sed -n 's/.*setup before start: \([0-9.]*\)s.*/\1/p' "$LOGS/boot-check.log" | tail -n1)
	record baseline "plain virsh: upload, overlay, seed, define before start" "${BASELINE_SETUP:-n/a}"
else
	log "2/5 baseline skipped (SKIP_BASELINE=1)"
fi

# ------------------------------------------------------------------ 3. proxies
log "3/5 platform team: namespace team-a, BaseImage team-a/debian-12 ($IMAGE_URL_A)"
t=$(now)
apply "$MANIFESTS/team-a.yaml"
wait_for "BaseImage team-a/debian-12 Ready" 600 k -n team-a wait --for=condition=Ready baseimages.kvm.crossplane.io/debian-12 --timeout=1s ||
	die "BaseImage team-a/debian-12 is not Ready"
record "team-a/debian-12" "BaseImage Ready (138 MiB uploaded and verified)" "$(elapsed "$t")"
BASE_VOL=$(k -n team-a get baseimages.kvm.crossplane.io debian-12 -o jsonpath='{.status.atProvider.volumeName}')
[[ -n $BASE_VOL ]] || die "BaseImage team-a/debian-12 reports no volume"
log "  BaseImage team-a/debian-12 Ready after $(elapsed "$t")s: volume $BASE_VOL"

for p in a b; do
	log "3/5 application team A: Proxy team-a/proxy-$p on the shared BaseImage"
	t=$(now)
	apply "$MANIFESTS/proxy-$p.yaml"
	watch team-a proxies.platform.kvm.crossplane.io "proxy-$p" "crossplane.io/composite=proxy-$p" "$t" "team-a/proxy-$p"
	check_endpoint "team-a/proxy-$p" team-a "proxy-$p-proxy" -n team-a get proxies.platform.kvm.crossplane.io "proxy-$p"
	[[ $(k -n team-a get kvmdomains.kvm.crossplane.io "proxy-$p" -o jsonpath='{.spec.forProvider.baseImageRef.name}') == debian-12 ]] ||
		die "KVMDomain team-a/proxy-$p does not boot BaseImage debian-12"
	[[ -z $(k -n team-a get baseimages.kvm.crossplane.io -l "crossplane.io/composite=proxy-$p" -o name) ]] ||
		die "Proxy team-a/proxy-$p composed a BaseImage of its own; it should share debian-12"
	domain_objects team-a "proxy-$p" >"$WORK/objects-proxy-$p"
done

log "3/5 application team B: ProxyClaim team-b/proxy-c caching its own image ($IMAGE_URL_B)"
t=$(now)
apply "$MANIFESTS/team-b.yaml"
wait_for "ProxyClaim team-b/proxy-c to get its XProxy" 120 \
	bash -c "[[ -n \$('$KUBECTL' -n team-b get proxyclaims.platform.kvm.crossplane.io proxy-c -o jsonpath='{.spec.resourceRef.name}') ]]" ||
	die "ProxyClaim team-b/proxy-c has no composite resource"
XR_C=$(k -n team-b get proxyclaims.platform.kvm.crossplane.io proxy-c -o jsonpath='{.spec.resourceRef.name}')
log "  ProxyClaim team-b/proxy-c -> XProxy $XR_C"
watch team-b proxyclaims.platform.kvm.crossplane.io proxy-c "crossplane.io/composite=$XR_C" "$t" "team-b/proxy-c (claim)"
# A claim's composed resources are named after the claim (proxy-c-*), not after its XProxy.
check_endpoint "team-b/proxy-c (claim)" team-b proxy-c-proxy -n team-b get proxyclaims.platform.kvm.crossplane.io proxy-c
wait_for "the claim's connection Secret team-b/proxy-c-connection" 120 k -n team-b get secret proxy-c-connection ||
	die "ProxyClaim team-b/proxy-c: no connection Secret proxy-c-connection"
[[ $(k -n team-b get secret proxy-c-connection -o jsonpath='{.data.url}' | base64 -d) == \
	$(k -n team-b get secret proxy-c-proxy -o jsonpath='{.data.url}' | base64 -d) ]] ||
	die "ProxyClaim team-b/proxy-c: the connection Secret's url differs from proxy-c-proxy's"
log "  team-b/proxy-c (claim): connection Secret team-b/proxy-c-connection has the same url"
[[ -n $(k -n team-b get baseimages.kvm.crossplane.io proxy-c-image -o name) ]] ||
	die "XProxy $XR_C did not compose BaseImage team-b/proxy-c-image"
domain_objects team-b proxy-c >"$WORK/objects-proxy-c"

# ------------------------------------------------------------------ 4. deletion
log "4/5 delete Proxy team-a/proxy-a"
t=$(now)
k -n team-a delete proxies.platform.kvm.crossplane.io proxy-a --wait=true --timeout=300s >/dev/null
wait_for "proxy-a's managed resources to be deleted" "$DELETE_TIMEOUT" composed_gone team-a crossplane.io/composite=proxy-a ||
	die "proxy-a's composed resources are still in the API: $(k -n team-a get managed -l crossplane.io/composite=proxy-a -o name 2>&1 | tr '\n' ' ')"
wait_for "proxy-a's domain, overlay, seed and NVRAM to go" "$DELETE_TIMEOUT" objects_gone "$WORK/objects-proxy-a" ||
	die "left on the host after deleting proxy-a: $(tr '\n' ' ' <"$WORK/objects-proxy-a")"
record "delete proxy-a" "Proxy deleted -> domain, overlay, NVRAM, seed gone" "$(elapsed "$t")"
log "  proxy-a gone from the API and the host in $(elapsed "$t")s: $(awk '{print $2}' "$WORK/objects-proxy-a" | tr '\n' ' ')"
v vol-info --pool "$TESTBED_POOL" "$BASE_VOL" >/dev/null || die "the shared base volume $BASE_VOL went with proxy-a"
k -n team-a wait --for=condition=Ready baseimages.kvm.crossplane.io/debian-12 --timeout=10s >/dev/null ||
	die "BaseImage team-a/debian-12 is not Ready after proxy-a was deleted"
check_endpoint "team-a/proxy-b" team-a proxy-b-proxy -n team-a get proxies.platform.kvm.crossplane.io proxy-b
log "  base volume $BASE_VOL still present, proxy-b still answers"

log "4/5 delete Proxy team-a/proxy-b, ProxyClaim team-b/proxy-c and BaseImage team-a/debian-12"
t=$(now)
k -n team-a delete proxies.platform.kvm.crossplane.io proxy-b --wait=false >/dev/null
k -n team-b delete proxyclaims.platform.kvm.crossplane.io proxy-c --wait=false >/dev/null
wait_for "proxy-b's and the claim's resources to be deleted" "$DELETE_TIMEOUT" \
	bash -c "[[ -z \$('$KUBECTL' get kvmdomains.kvm.crossplane.io,seedvolumes.kvm.crossplane.io -A -o name) ]]" ||
	die "managed resources left: $(k get managed -A -o name 2>&1 | tr '\n' ' ')"
# The platform team removes the shared image once no Proxy uses it.
k -n team-a delete baseimages.kvm.crossplane.io debian-12 --wait=false >/dev/null
wait_for "every BaseImage to be deleted" "$DELETE_TIMEOUT" \
	bash -c "[[ -z \$('$KUBECTL' get baseimages.kvm.crossplane.io -A -o name) ]]" ||
	die "BaseImages left: $(k get baseimages.kvm.crossplane.io -A -o name | tr '\n' ' ')"
wait_for "the test bed to hold nothing of team-a and team-b" "$DELETE_TIMEOUT" host_clean "${NAMESPACES[@]}" ||
	die "left on the test bed: $(libvirt_objects "${NAMESPACES[@]}" | tr '\n' ' ')"
for p in b c; do objects_gone "$WORK/objects-proxy-$p" || die "objects of proxy-$p left on the host"; done
record "delete proxy-b, claim, BaseImage" "deleted -> nothing of team-a/team-b left on the host" "$(elapsed "$t")"
log "  nothing of team-a or team-b left on the host (domains, overlays, seeds, NVRAM, base volumes)"
[[ -z $(k get proxies.platform.kvm.crossplane.io,xproxies.platform.kvm.crossplane.io -A -o name) ]] ||
	die "XRs left: $(k get proxies.platform.kvm.crossplane.io,xproxies.platform.kvm.crossplane.io -A -o name | tr '\n' ' ')"

# ------------------------------------------------------------------ 5. timeline
log "5/5 timeline (seconds after each Proxy was created; TCG guests, $VCPUS vCPU, $MEM_MIB MiB, one at a time; provider --poll=$POLL)"
print_timeline
cp "$TIMELINE" "$LOGS/timeline.tsv"
OK=1
