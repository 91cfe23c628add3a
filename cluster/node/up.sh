#!/usr/bin/env bash
# up.sh -- a single-node Kubernetes inside the LAN test bed's netns node (cluster/node/README.md):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (+ runc, CNI bridge
# and host-local from Debian), the kubelet and kube-proxy (iptables mode), all in netns node and
# a mount namespace of the node's own; nothing in the root network namespace. Idempotent: a
# running node is kept. Writes $NODE_DIR/admin.kubeconfig (server https://127.0.0.1:26443,
# reachable from netns node only: cluster/node/kubectl.sh). down.sh stops it.
#
# Needs: make lan-up (netns node), make packages, make controlplane + make node-build (binaries
# in $BIN, with crane from make tools). containerd pulls over plain HTTP from the registries of
# netns node: the node's own (crane, port 25000 on every address of netns node; up.sh pushes the
# sandbox image $PAUSE_IMAGE there) and make e2e's (15000). Knobs: NODE_DIR, BIN, LAN_DIR.
# Run it from the root namespaces (make's level), never inside ip netns exec.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"

[[ $(id -u) == 0 ]] || ndie "must run as root"
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
"$HERE/../packages/install.sh" --check || ndie "Debian packages missing: make packages"
for b in crane etcd kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy; do
	[[ -x $BIN/$b ]] || ndie "missing $BIN/$b (make controlplane node-build)"
done
[[ -e /run/netns/$NETNS && -r $LAN_DIR/env.sh ]] || ndie "no netns $NETNS: make lan-up first"
# From the root mount namespace: inside `ip netns exec` (make e2e's inner half) /sys is that
# netns's own sysfs and /sys/fs/cgroup is empty, and the kubelet needs the hierarchies.
compgen -G '/sys/fs/cgroup/*/cgroup.procs' >/dev/null ||
	ndie "no cgroup hierarchies under /sys/fs/cgroup: run up.sh from the root namespaces, not inside ip netns exec"

mkdir -p "$NODE_DIR" "$PIDS" "$LOGS" "$PKI" "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/lib" "$NODE_DIR/cni/ipam" \
	"$NODE_DIR/containerd/certs.d" "$NODE_DIR/kubelet" "$NODE_DIR/etcd" "$NODE_DIR/created"
chmod 0700 "$NODE_DIR"
T0=$SECONDS
# put FILE: stdin into FILE, only when it differs (kube-proxy exits when its config file is
# written to, even with the same content; the others read theirs at start).
put() {
	cat >"$1.tmp"
	if cmp -s "$1.tmp" "$1"; then rm -f "$1.tmp"; else mv -f "$1.tmp" "$1"; fi
}

# ------------------------------------------------------------------ PKI (once: cluster/lib/pki.sh)
# shellcheck source=cluster/lib/pki.sh
. "$HERE/../lib/pki.sh"
pki_ca "$PKI" provider-kvm-node-ca
pki_cert "$PKI" apiserver "/CN=kube-apiserver" \
	"IP:$NODE_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
pki_cert "$PKI" admin "/O=system:masters/CN=admin"
pki_cert "$PKI" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
pki_cert "$PKI" kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
pki_cert "$PKI" kube-proxy "/CN=system:kube-proxy"
pki_cert "$PKI" kube-controller-manager "/CN=system:kube-controller-manager"
pki_cert "$PKI" kube-scheduler "/CN=system:kube-scheduler"
pki_sa "$PKI"
for n in admin kubelet kube-proxy kube-controller-manager kube-scheduler; do
	f=$NODE_DIR/$n.kubeconfig
	[[ -s $f ]] && continue
	"$BIN/kubectl" config --kubeconfig="$f" set-cluster node --server="https://127.0.0.1:$APISERVER_PORT" \
		--certificate-authority="$PKI/ca.crt" --embed-certs >/dev/null
	"$BIN/kubectl" config --kubeconfig="$f" set-credentials "$n" --client-certificate="$PKI/$n.crt" \
		--client-key="$PKI/$n.key" --embed-certs >/dev/null
	"$BIN/kubectl" config --kubeconfig="$f" set-context node --cluster=node --user="$n" >/dev/null
	"$BIN/kubectl" config --kubeconfig="$f" use-context node >/dev/null
done

# ------------------------------------------------------------------ cgroups, /var/lib/cni
# The kubelet's cgroup root must exist in every hierarchy; cpuset needs its cpus and mems set.
for h in /sys/fs/cgroup/*/; do
	[[ -e $h/cgroup.procs ]] || continue
	d=$h$CGROUP_PARENT
	[[ -d $d ]] || { mkdir "$d"; touch "$NODE_DIR/created/cgroup-$(basename "$h")"; }
	if [[ -e $d/cpuset.cpus && -z $(cat "$d/cpuset.cpus") ]]; then
		cat "$h/cpuset.cpus" >"$d/cpuset.cpus"
		cat "$h/cpuset.mems" >"$d/cpuset.mems"
	fi
done
# libcni keeps a cache in /var/lib/cni: the node's mount namespace binds $NODE_DIR/cni/lib there;
# the empty mount point is all the root mount namespace gets (down.sh removes it).
[[ -d /var/lib/cni ]] || { mkdir /var/lib/cni; touch "$NODE_DIR/created/var-lib-cni"; }

# ------------------------------------------------------------------ the node's mount namespace
# What the kubelet sets machine-wide at start (pkg/kubelet/cm setupKernelTunables); masked in
# the node's mount namespace with these values, so the machine's stay as they are.
SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)
if ! holder_ok; then
	rm -f "$NODE_DIR/ns.ready"
	: >"$LOGS/holder.log"
	start holder nsenter --net="/run/netns/$NETNS" unshare --mount --propagation slave \
		"$HERE/ns-init.sh" "$NODE_DIR" "${SYSCTLS[@]}"
	for _ in $(seq 50); do [[ -e $NODE_DIR/ns.ready ]] && break; sleep 0.1; done
	[[ -e $NODE_DIR/ns.ready ]] || ndie "the node's mount namespace did not come up: $(cat "$LOGS/holder.log")"
	nlog "mount namespace held by pid $(pid_of holder) (netns $NETNS)"
fi

# ------------------------------------------------------------------ registry + pause image
# The node's loopback registry (crane, blobs on disk, manifests in memory: pushed again at each
# start) with the sandbox image: cluster/node/pause in a one-layer image made by mkimage.
if [[ ! -s $NODE_DIR/images/pause.tar || $HERE/pause/main.go -nt $NODE_DIR/images/pause.tar ]]; then
	mkdir -p "$NODE_DIR/images"
	(cd "$HERE/../xpkg/mkimage" && GOTOOLCHAIN=local go build -o "$NODE_DIR/images/mkimage" . &&
		cd "$HERE" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags="-s -w" -o "$NODE_DIR/images/pause" ./pause) ||
		ndie "go build of cluster/xpkg/mkimage or cluster/node/pause failed"
	"$NODE_DIR/images/mkimage" -binary "$NODE_DIR/images/pause" -path /pause -tag "$PAUSE_IMAGE" \
		-o "$NODE_DIR/images/pause.tar.tmp"
	mv -f "$NODE_DIR/images/pause.tar.tmp" "$NODE_DIR/images/pause.tar"
fi
if ! alive registry; then
	mkdir -p "$NODE_DIR/registry"
	nstart registry "$BIN/crane" registry serve --address "0.0.0.0:$REGISTRY_PORT" --disk "$NODE_DIR/registry"
	nwaitport "$REGISTRY_PORT" || ndie "the registry does not listen on $REGISTRY (see $LOGS/registry.log)"
fi
in_node "$BIN/crane" push --insecure "$NODE_DIR/images/pause.tar" "$PAUSE_IMAGE" >>"$LOGS/push.log" 2>&1 ||
	ndie "crane push $PAUSE_IMAGE failed (see $LOGS/push.log)"
# The application pod's image of make e2e and make demo (test/e2e): cluster/node/httpget, a GET
# through the proxy HTTP_PROXY names, in a one-layer image made the same way.
if [[ ! -s $NODE_DIR/images/httpget.tar || $HERE/httpget/main.go -nt $NODE_DIR/images/httpget.tar ]]; then
	mkdir -p "$NODE_DIR/images"
	if [[ ! -x $NODE_DIR/images/mkimage ]]; then
		(cd "$HERE/../xpkg/mkimage" && GOTOOLCHAIN=local go build -o "$NODE_DIR/images/mkimage" .) ||
			ndie "go build of cluster/xpkg/mkimage failed"
	fi
	(cd "$HERE" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags="-s -w" -o "$NODE_DIR/images/httpget" ./httpget) ||
		ndie "go build of cluster/node/httpget failed"
	"$NODE_DIR/images/mkimage" -binary "$NODE_DIR/images/httpget" -path /httpget -tag "$HTTPGET_IMAGE" \
		-o "$NODE_DIR/images/httpget.tar.tmp"
	mv -f "$NODE_DIR/images/httpget.tar.tmp" "$NODE_DIR/images/httpget.tar"
fi
in_node "$BIN/crane" push --insecure "$NODE_DIR/images/httpget.tar" "$HTTPGET_IMAGE" >>"$LOGS/push.log" 2>&1 ||
	ndie "crane push $HTTPGET_IMAGE failed (see $LOGS/push.log)"
nlog "registry $REGISTRY has $PAUSE_IMAGE and $HTTPGET_IMAGE"

# ------------------------------------------------------------------ containerd
put "$NODE_DIR/cni/net.d/10-node.conflist" <<-JSON
	{
	  "cniVersion": "1.0.0",
	  "name": "node",
	  "plugins": [
	    {
	      "type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
	      "ipam": {
	        "type": "host-local", "dataDir": "$NODE_DIR/cni/ipam",
	        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GW"}]],
	        "routes": [{"dst": "0.0.0.0/0"}]
	      }
	    }
	  ]
	}
JSON
# Plain HTTP for the registries of netns node (make e2e's, 15000, and the node's), on loopback
# (what containerd pulls the sandbox from) and on the node's address (what pods, such as the
# Crossplane core fetching packages, reach; package runtime images then have that name too).
for host in 127.0.0.1 "$NODE_IP"; do
	for port in 15000 "$REGISTRY_PORT"; do
		mkdir -p "$NODE_DIR/containerd/certs.d/$host:$port"
		put "$NODE_DIR/containerd/certs.d/$host:$port/hosts.toml" <<-TOML
			server = "http://$host:$port"
			[host."http://$host:$port"]
			  capabilities = ["pull", "resolve"]
			  skip_verify = true
		TOML
	done
done
# restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so the kubelet's oom_score_adj of
# -998 for sandboxes would fail every runc create ("can't get final child's PID from pipe").
put "$NODE_DIR/containerd/config.toml" <<-TOML
	version = 2
	root = "$NODE_DIR/containerd/root"
	state = "/run/containerd"
	[grpc]
	  address = "/run/containerd/containerd.sock"
	[plugins."io.containerd.grpc.v1.cri"]
	  sandbox_image = "$PAUSE_IMAGE"
	  restrict_oom_score_adj = true
	  enable_selinux = false
	  stream_server_address = "127.0.0.1"
	  [plugins."io.containerd.grpc.v1.cri".cni]
	    bin_dir = "/usr/lib/cni"
	    conf_dir = "$NODE_DIR/cni/net.d"
	  [plugins."io.containerd.grpc.v1.cri".containerd]
	    snapshotter = "overlayfs"
	    default_runtime_name = "runc"
	    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
	      runtime_type = "io.containerd.runc.v2"
	      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
	        SystemdCgroup = false
	  [plugins."io.containerd.grpc.v1.cri".registry]
	    config_path = "$NODE_DIR/containerd/certs.d"
TOML
if ! alive containerd; then
	nstart containerd /usr/bin/containerd --config "$NODE_DIR/containerd/config.toml"
	for _ in $(seq 100); do in_node test -S /run/containerd/containerd.sock && break; sleep 0.1; done
	in_node test -S /run/containerd/containerd.sock || ndie "containerd has no socket (see $LOGS/containerd.log)"
fi

# ------------------------------------------------------------------ control plane
if ! alive etcd; then
	nstart etcd "$BIN/etcd" --name node --data-dir "$NODE_DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "node=http://127.0.0.1:$ETCD_PEER_PORT"
	nwaitport "$ETCD_PORT" || ndie "etcd does not listen (see $LOGS/etcd.log)"
fi
# --enable-aggregator-routing: the API server calls webhooks (Crossplane's) and aggregated
# APIs at their endpoints (pod IPs, routed to cni0 in netns node), not at Service IPs, which
# only kube-proxy's DNAT knows and netns node has no route for.
if ! alive kube-apiserver; then
	nstart kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range="$SERVICE_CIDR" \
		--enable-aggregator-routing=true
fi
for ((i = 0; i < 180; i++)); do
	kc get --raw /readyz >/dev/null 2>&1 && break
	alive kube-apiserver || ndie "kube-apiserver exited (see $LOGS/kube-apiserver.log)"
	sleep 1
done
((i < 180)) || ndie "kube-apiserver not ready after 180 s (see $LOGS/kube-apiserver.log)"
nlog "kube-apiserver ready ($((SECONDS - T0))s)"
if ! alive kube-controller-manager; then
	nstart kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$NODE_DIR/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig="$NODE_DIR/kube-controller-manager.kubeconfig" \
		--authorization-kubeconfig="$NODE_DIR/kube-controller-manager.kubeconfig" \
		--leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT"
fi
if ! alive kube-scheduler; then
	nstart kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$NODE_DIR/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig="$NODE_DIR/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig="$NODE_DIR/kube-scheduler.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT"
fi

# ------------------------------------------------------------------ kubelet
put "$NODE_DIR/kubelet.yaml" <<-YAML
	apiVersion: kubelet.config.k8s.io/v1beta1
	kind: KubeletConfiguration
	# cgroup v1 (hybrid) here: 1.35 refuses it unless told
	failCgroupV1: false
	cgroupDriver: cgroupfs
	cgroupRoot: /$CGROUP_PARENT
	cgroupsPerQOS: true
	enforceNodeAllocatable: []
	failSwapOn: false
	containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
	address: $NODE_IP
	port: $KUBELET_PORT
	readOnlyPort: 0
	healthzBindAddress: 127.0.0.1
	healthzPort: $KUBELET_HEALTHZ_PORT
	authentication:
	  anonymous: {enabled: false}
	  webhook: {enabled: true}
	  x509: {clientCAFile: $PKI/ca.crt}
	authorization: {mode: Webhook}
	# no DNS in the test bed: no host resolv.conf for pods; the cluster DNS (cluster/node/dns)
	# answers for Service names at the pods' gateway
	resolvConf: ""
	clusterDNS: [$POD_GW]
	clusterDomain: cluster.local
	# the disk and memory are shared with other work: never evict, never collect images
	evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
	imageGCHighThresholdPercent: 100
	imageGCLowThresholdPercent: 99
	localStorageCapacityIsolation: false
	# raising its own OOM priority needs CAP_SYS_RESOURCE, which root lacks here
	oomScoreAdj: 0
	serializeImagePulls: false
	maxPods: 30
YAML
if ! alive kubelet; then
	nstart kubelet "$BIN/kubelet" --config="$NODE_DIR/kubelet.yaml" --kubeconfig="$NODE_DIR/kubelet.kubeconfig" \
		--root-dir="$NODE_DIR/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
fi

# ------------------------------------------------------------------ kube-proxy
put "$NODE_DIR/kube-proxy.yaml" <<-YAML
	apiVersion: kubeproxy.config.k8s.io/v1alpha1
	kind: KubeProxyConfiguration
	clientConnection: {kubeconfig: $NODE_DIR/kube-proxy.kubeconfig}
	mode: iptables
	hostnameOverride: $NODE_NAME
	clusterCIDR: $POD_CIDR
	healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
	metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
	oomScoreAdj: 0
	# leave the machine's conntrack settings alone
	conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
	iptables: {localhostNodePorts: false}
	nodePortAddresses: [primary]
YAML
if ! alive kube-proxy; then
	nstart kube-proxy "$BIN/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml"
fi

# ------------------------------------------------------------------ cluster DNS
# Service names for the pods (the Crossplane core dials its functions by their headless
# Services' names): cluster/node/dns on UDP port 53 of netns node, reached at cni0's address.
if [[ ! -x $NODE_DIR/images/dns || $HERE/dns/main.go -nt $NODE_DIR/images/dns ]]; then
	(cd "$HERE" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags="-s -w" -o "$NODE_DIR/images/dns" ./dns) ||
		ndie "go build of cluster/node/dns failed"
fi
if ! alive dns; then
	nstart dns "$NODE_DIR/images/dns" --listen=0.0.0.0:53 --kubeconfig="$KUBECONFIG_ADMIN"
fi

for ((i = 0; i < 120; i++)); do
	[[ $(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]] && break
	for p in containerd kubelet kube-proxy dns; do alive "$p" || ndie "$p exited (see $LOGS/$p.log)"; done
	sleep 1
done
((i < 120)) || ndie "node $NODE_NAME not Ready after 120 s (see $LOGS/kubelet.log)"
nlog "node $NODE_NAME Ready ($((SECONDS - T0))s); kubectl: cluster/node/kubectl.sh get pods -A"
