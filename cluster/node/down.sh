#!/usr/bin/env bash
# down.sh -- stop what cluster/node/up.sh started and undo what it made: the kubelet, kube-proxy,
# the control plane, every pod's processes (found by the kubelet's cgroups under
# $CGROUP_PARENT), containerd and its shims (found by the node's mount namespace), the holder
# of that namespace (its mounts and the pods' netns files go with it), kube-proxy's and the
# CNI plugins' iptables rules and the cni0 bridge in netns node, the cgroups and the empty
# /var/lib/cni it made. PURGE=1 also deletes $NODE_DIR (etcd data, PKI, images, logs).
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
[[ $(id -u) == 0 ]] || ndie "must run as root"
[[ -d $NODE_DIR ]] || { nlog "nothing to stop ($NODE_DIR absent)"; exit 0; }

# the pods' processes: every PID in the cgroups under $CGROUP_PARENT
cgroup_pids() { find /sys/fs/cgroup/*/"$CGROUP_PARENT" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u; }
# the processes in the node's mount namespace (containerd, shims, the holder, what ran in it)
MNT_NS= # its inode, read while the holder runs
ns_pids() {
	local p
	[[ -n $MNT_NS ]] || return 0
	for p in /proc/[0-9]*; do
		[[ $(stat -Lc %i "$p/ns/mnt" 2>/dev/null) == "$MNT_NS" ]] && echo "${p#/proc/}"
	done
}
kill_all() { # kill_all LIST-FUNCTION WHAT: TERM, then KILL after 10 s
	local pids i
	mapfile -t pids < <("$1")
	((${#pids[@]})) || return 0
	nlog "stopping ${#pids[@]} $2 processes"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		mapfile -t pids < <("$1")
		((${#pids[@]})) || return 0
		sleep 0.1
	done
	kill -KILL "${pids[@]}" 2>/dev/null || true
	sleep 0.5
}

for p in dns kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd registry; do stop_one "$p"; done
kill_all cgroup_pids pod
if holder_ok; then
	MNT_NS=$(stat -Lc %i "/proc/$(pid_of holder)/ns/mnt")
	stop_one containerd
	kill_all ns_pids node-namespace
fi
rm -f "$PIDS/holder.pid" "$NODE_DIR/ns.ready"
# The iptables rules and chains of kube-proxy (KUBE-*), the kubelet (KUBE-FIREWALL, canaries)
# and the CNI bridge plugin (CNI-*, ipMasq) in netns node, where nothing else has any.
# (iptables -S quotes rules' comments: eval reads them back as iptables wrote them.)
for ipt in iptables ip6tables; do
	for t in filter nat mangle; do
		nipt() { nsenter --net="/run/netns/$NETNS" "$ipt" -w -t "$t" "$@"; }
		nipt -S 2>/dev/null | awk '/^-A .* -j (KUBE-|CNI-)/ {sub(/^-A /, ""); print}' |
			while read -r rule; do eval "nipt -D $rule" || true; done
		nipt -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}' | while read -r c; do nipt -F "$c" || true; done
		nipt -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}' | while read -r c; do nipt -X "$c" || true; done
	done
done
ip -n "$NETNS" link del "$CNI_BRIDGE" 2>/dev/null || true
rm -rf "$NODE_DIR/cni/ipam"

# cgroups, deepest first (only those up.sh made, and the kubelet's below them)
for m in "$NODE_DIR"/created/cgroup-*; do
	[[ -e $m ]] || continue
	d=/sys/fs/cgroup/${m##*/cgroup-}/$CGROUP_PARENT
	if [[ -d $d ]]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
	if [[ -d $d ]]; then nlog "WARNING: cgroup $d still exists"; else rm -f "$m"; fi
done
if [[ -e $NODE_DIR/created/var-lib-cni ]]; then
	if rmdir /var/lib/cni 2>/dev/null; then rm -f "$NODE_DIR/created/var-lib-cni"; else nlog "WARNING: /var/lib/cni not empty"; fi
fi
if [[ ${PURGE:-} == 1 ]]; then
	rm -rf "$NODE_DIR"
	nlog "purged $NODE_DIR"
fi
nlog "down"
