#!/usr/bin/env bash
# suite.sh -- the provider module's Go suite on the NAT test bed (make test-bed runs it inside
# the bed's network namespace, holding /tmp/testbed.lock), in two phases:
#
#   1. every package that keeps to its own objects on the bed, BED_PARALLEL at a time (3 by
#      default), the longest first. These tests spend most of their time waiting on reconciles
#      and guests (the machine is 20-30% busy while one runs alone), and each names what it
#      creates on the host after its own namespace, UID or digest.
#   2. one at a time, the packages that cannot share the bed: they restart its libvirtd or sshd
#      (domainevents, host, hoststatus), count every domain and volume on it (hoststatus,
#      fairness), commit the host's room to themselves (scale: 50 defined domains, which other
#      packages' room checks would count), or hold time bounds measured on an otherwise quiet
#      host (fairness). The fault
#      suite joins them with FAULTS_FULL (its Disrupt cases restart the daemons, its PoolFull
#      cases count the pool's volumes); its fast subset (the kill points and the blackhole, on
#      objects of namespaces "flt-...") keeps to its own objects and runs in phase 1.
#
# Each package runs its own API server, so side by side they are clusters sharing one host: each
# control plane has a cluster ID of its own (test/support/controlplane), which the ownership
# records of what it makes name, and a package's sweeps leave the records of the others
# (decision 72). Before that, one package's BaseImage deletion swept the others' image owner
# records, and phase 1 ran one package at a time (decision 66).
#
# Both phases run even when the first fails; the exit status is the first phase's failure, or
# the second's. GO_TEST_FLAGS as in the Makefile; its -p is overridden per phase.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit

MOD=$(go list -m)
# Phase 2: alone, one at a time.
EXCLUSIVE=(internal/domainevents internal/host internal/controller/hoststatus test/fairness test/scale)
# Phase 1 starts these first: the longest packages, so that the short ones fill the other lanes.
LONGEST=(test/tenancy test/stockimage internal/controller/kvmdomain internal/imagecache test/faults
	internal/controller/baseimage internal/controller/seedvolume)
if [[ -n ${FAULTS_FULL:-} ]]; then
	EXCLUSIVE+=(test/faults)
	LONGEST=("${LONGEST[@]/test\/faults/}")
fi

read -r -a FLAGS <<<"${GO_TEST_FLAGS:--count=1 -timeout 30m -ldflags=-w}"

declare -A skip=()
first=()
for p in "${EXCLUSIVE[@]}"; do skip[$MOD/$p]=1; done
for p in "${LONGEST[@]}"; do
	[[ -n $p ]] || continue
	first+=("$MOD/$p")
	skip[$MOD/$p]=1
done
rest=()
while read -r p; do
	[[ -n ${skip[$p]:-} ]] || rest+=("$p")
done < <(go list ./...)
exclusive=()
for p in "${EXCLUSIVE[@]}"; do exclusive+=("$MOD/$p"); done

rc=0
echo "suite.sh: $(date -u +%T) phase 1: ${#first[@]} long and ${#rest[@]} other packages, ${BED_PARALLEL:-3} at a time"
go test "${FLAGS[@]}" -p "${BED_PARALLEL:-3}" "${first[@]}" "${rest[@]}" || rc=$?
echo "suite.sh: $(date -u +%T) phase 2: ${#exclusive[@]} packages that need the bed alone, one at a time"
go test "${FLAGS[@]}" -p 1 "${exclusive[@]}" || { [[ $rc -ne 0 ]] || rc=$?; }
echo "suite.sh: $(date -u +%T) done (exit $rc)"
exit "$rc"
