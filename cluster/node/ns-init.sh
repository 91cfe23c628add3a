#!/usr/bin/env bash
# ns-init.sh NODE_DIR SYSCTL... -- the first process of the node's mount namespace (up.sh runs
# it as `nsenter --net=/run/netns/node unshare --mount --propagation slave`): it makes the
# namespace's own /run, /var/log and /var/lib/cni, hides the machine's values of the sysctls the
# kubelet would otherwise rewrite machine-wide, then holds the namespace (sleep) until down.sh.
#   /run          tmpfs: containerd's state and socket, runc's, the shims' sockets, the pods'
#                 netns files (/run/netns), iptables' lock: none of it visible outside
#   /var/log      tmpfs: the kubelet's /var/log/pods and /var/log/containers
#   /var/lib/cni  NODE_DIR/cni/lib: libcni's cache (the directory itself is made by up.sh)
#   SYSCTL        e.g. vm/overcommit_memory=1: a file holding 1 bind-mounted over
#                 /proc/sys/vm/overcommit_memory, so the kubelet reads the value it wants and
#                 never writes the real (machine-wide) one
# Slave propagation: mounts made here never reach the root mount namespace; when the LAN test
# bed deletes its namespaces, the unmount of /run/netns/* still reaches this copy.
set -euo pipefail
D=$1
shift
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p /run/netns
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs /var/log
mount --bind "$D/cni/lib" /var/lib/cni
mkdir -p "$D/sysctl"
for kv in "$@"; do
	k=${kv%%=*}
	f=$D/sysctl/${k//\//.}
	echo "${kv#*=}" >"$f"
	mount --bind "$f" "/proc/sys/$k"
done
touch "$D/ns.ready"
exec sleep infinity
