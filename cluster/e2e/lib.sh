# shellcheck shell=bash
# lib.sh -- functions shared by cluster/e2e/run.sh (make e2e) and cluster/e2e/demo.sh (make demo,
# make demo-down). Sourced, never run.
#
# The bring-up, all inside the test bed's network namespace (cluster/testbed, netns kvmhost):
#   etcd + kube-apiserver + kube-controller-manager (garbage collector only), built from Go
#   modules by cluster/controlplane/build.sh;
#   the Crossplane core v2.4.0 out of cluster (`core start --package-runtime=External`);
#   function-kvm-proxy and function-auto-ready as local processes with mTLS, registered through
#   hand-made FunctionRevisions whose status.endpoint points at them;
#   a loopback OCI registry (crane registry serve) holding the provider and configuration
#   packages of `make xpkg`, installed through Crossplane's package manager;
#   the provider as a local process; a ClusterProviderConfig for the test bed's sshd/libvirtd;
#   an HTTP server for the guest image on loopback and a 204 server on the NAT bridge.
# Every process is started in its own session and recorded in $WORK/pids; stop_all stops them
# by those PIDs (after checking each PID still is the process that was started).

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
E2E_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$E2E_LIB/../.." && pwd)
MANIFESTS=$E2E_LIB/manifests
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm}
BIN=${BIN:-$CACHE_DIR/bin}
TB=${TB:-/var/lib/provider-kvm-testbed}
WORK=${E2E_WORK:-/var/lib/provider-kvm-e2e}
LOGS=$WORK/logs
PIDS=$WORK/pids
IMAGE=${TESTBED_IMAGE:-$CACHE_DIR/images/debian-12-testbed.qcow2}
XPKG_DIR=${XPKG_DIR:-$REPO/_output/xpkg}
OUT=${E2E_OUT:-$REPO/_output/e2e}
KUBECTL=$BIN/kubectl
KUBECONFIG=$WORK/kubeconfig
export KUBECONFIG
CORE_VERSION=${CORE_VERSION:-v2.4.0}
PKG_TAG=${PKG_TAG:-v0.0.0-e2e}
# Provider poll interval: how often a booting KVMDomain is looked at again. Part of the
# measured overhead (see docs/e2e.md).
POLL=${POLL:-5s}
# Every guest: vCPUs and memory (the baseline boots the same), and how long one may take.
VCPUS=${VCPUS:-2}
MEM_MIB=${MEM_MIB:-1024}
GUEST_TIMEOUT=${GUEST_TIMEOUT:-900}
DELETE_TIMEOUT=${DELETE_TIMEOUT:-600}
TIMELINE=$WORK/timeline.tsv
# Ports, all on 127.0.0.1 inside the namespace (the 204 server on the bridge address).
ETCD_PORT=${ETCD_PORT:-12379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-20257}
CORE_METRICS_PORT=${CORE_METRICS_PORT:-18080}
CORE_HEALTH_PORT=${CORE_HEALTH_PORT:-18081}
PROVIDER_METRICS_PORT=${PROVIDER_METRICS_PORT:-18082}
FN_PROXY_PORT=${FN_PROXY_PORT:-19443}
FN_AUTOREADY_PORT=${FN_AUTOREADY_PORT:-19444}
REGISTRY_PORT=${REGISTRY_PORT:-15000}
IMAGE_PORT=${IMAGE_PORT:-18090}
ORIGIN_PORT=${ORIGIN_PORT:-18204}
REGISTRY=127.0.0.1:$REGISTRY_PORT
# Function names as the Compositions refer to them (package/configuration/crossplane.yaml).
FN_PROXY=provider-kvm-function-kvm-proxy
FN_AUTOREADY=crossplane-contrib-function-auto-ready

LOG_TAG=${LOG_TAG:-e2e}
log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*"; }
warn() { printf '[%s %s] WARNING: %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '[%s %s] FAIL: %s\n' "$LOG_TAG" "$(date -u +%H:%M:%S)" "$*" >&2; exit 1; }
now() { date +%s.%N; }
# elapsed FROM [TO]: seconds with one decimal
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN{printf "%.1f", b-a}'; }

k() { "$KUBECTL" "$@"; }
v() { virsh -q -c "${TESTBED_LIBVIRT_URI:-qemu:///system}" "$@"; }

# inside_netns: this process is inside the test bed's network namespace.
inside_netns() {
	[[ -e /run/netns/${TESTBED_NETNS:-kvmhost} ]] &&
		[[ $(stat -Lc '%d:%i' /proc/self/ns/net) == "$(stat -Lc '%d:%i' "/run/netns/${TESTBED_NETNS:-kvmhost}")" ]]
}

# render FILE: the manifest with every @KEY@ replaced by the value of shell variable KEY.
render() {
	local f=$1 key out
	out=$(cat "$f")
	for key in $(grep -o '@[A-Z0-9_]*@' "$f" | sort -u | tr -d @); do
		[[ -n ${!key:-} ]] || die "render $f: variable $key is empty"
		out=${out//@$key@/${!key}}
	done
	printf '%s\n' "$out"
}
apply() { render "$1" | k apply -f - >/dev/null; }

# ------------------------------------------------------------------ processes
# start NAME CMD...: CMD in the background in a session of its own (so its children can be
# stopped with it), output in $LOGS/NAME.log, PID and start time recorded in $PIDS/NAME.pid.
start() {
	local name=$1 pid
	shift
	setsid "$@" </dev/null >"$LOGS/$name.log" 2>&1 8>&- &
	pid=$!
	echo "$pid $(starttime "$pid")" >"$PIDS/$name.pid"
	echo "$name" >>"$PIDS/order"
	log "started $name (pid $pid, log $LOGS/$name.log)"
}
starttime() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || echo gone; }
# ours NAME: the recorded process is still the one that was started (PIDs get reused).
ours() {
	local pid st
	[[ -s $PIDS/$1.pid ]] || return 1
	read -r pid st <"$PIDS/$1.pid"
	[[ -e /proc/$pid && $(starttime "$pid") == "$st" ]]
}
pid_of() { awk '{print $1}' "$PIDS/$1.pid"; }
alive() {
	local s
	ours "$1" && s=$(awk '{print $3}' "/proc/$(pid_of "$1")/stat" 2>/dev/null) && [[ -n $s && $s != Z ]]
}
# stop_one NAME: SIGTERM to the process group the process leads, SIGKILL after 15 s.
stop_one() {
	local name=$1 pid i
	ours "$name" || { rm -f "$PIDS/$name.pid"; return 0; }
	pid=$(pid_of "$name")
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 150; i++)); do
		alive "$name" || break
		sleep 0.1
	done
	if alive "$name"; then
		warn "$name (pid $pid) ignored SIGTERM for 15 s: SIGKILL"
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$PIDS/$name.pid"
}
# stop_all: every recorded process, newest first.
stop_all() {
	local name
	[[ -s $PIDS/order ]] || return 0
	while read -r name; do
		[[ -e $PIDS/$name.pid ]] || continue
		log "stopping $name (pid $(pid_of "$name"))"
		stop_one "$name"
	done < <(tac "$PIDS/order")
	: >"$PIDS/order"
}
# any_running: a process recorded in $WORK/pids still runs (a demo, or a run that crashed).
any_running() {
	local f name
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		name=$(basename "$f" .pid)
		alive "$name" && return 0
	done
	return 1
}

waitport() { # waitport PORT [HOST]: up to 60 s
	local i
	for ((i = 0; i < 300; i++)); do
		(exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}

# wait_for DESC TIMEOUT_S CMD...: run CMD every 2 s until it succeeds; progress every 60 s.
wait_for() {
	local desc=$1 timeout=$2 t0=$SECONDS next=60
	shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS - t0 < timeout)) || { warn "timed out after ${timeout}s waiting for $desc"; return 1; }
		if ((SECONDS - t0 >= next)); then
			log "  still waiting for $desc ($((SECONDS - t0))s)"
			next=$((next + 60))
		fi
		sleep 2
	done
}

# ------------------------------------------------------------------ preflight (root namespace)
# need_file FILE HINT
need_file() { [[ -s $1 ]] || die "missing $1 ($2)"; }

preflight() {
	local b
	for b in kube-apiserver etcd kube-controller-manager kubectl; do
		need_file "$BIN/$b" "make controlplane builds it"
	done
	for b in crossplane crossplane-core function-auto-ready crane; do
		need_file "$BIN/$b" "make tools builds it"
	done
	for b in provider-kvm function-kvm-proxy configuration-kvm-proxy; do
		need_file "$XPKG_DIR/$b.xpkg" "make xpkg builds it"
	done
	need_file "$IMAGE" "make image builds it"
	need_file "$IMAGE.sha256" "make image builds it"
	need_file "$TB/env.sh" "make testbed-up starts the test bed"
	# openssl (the PKI), python3 (image and 204 servers), curl (through the proxies): from the
	# one install step (make packages), never installed here (this may run inside the namespace).
	"$REPO/cluster/packages/install.sh" --check || die "Debian packages are missing: run make packages"
	# The Crossplane CRDs that `core init` installs come from the core's Go module.
	XP_CRDS=${XP_CRDS:-$(go env GOMODCACHE)/github.com/crossplane/crossplane/v2@$CORE_VERSION/cluster/crds}
	if [[ ! -d $XP_CRDS ]]; then
		(cd "$CACHE_DIR" && GOFLAGS=-mod=mod go mod download "github.com/crossplane/crossplane/v2@$CORE_VERSION") ||
			die "cannot download github.com/crossplane/crossplane/v2@$CORE_VERSION for its CRDs"
	fi
	[[ -d $XP_CRDS ]] || die "no Crossplane CRDs at $XP_CRDS"
	export XP_CRDS
	# The provider and the function run as local processes, built from this checkout.
	mkdir -p "$OUT"
	log "building the provider and function-kvm-proxy from this checkout into $OUT"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$OUT/provider" ./cmd/provider &&
		CGO_ENABLED=0 go build -trimpath -o "$OUT/function-kvm-proxy" ./cmd/function) ||
		die "go build of cmd/provider or cmd/function failed"
}

# reexec_in_netns ARGS...: run this script again inside the test bed's namespace.
reexec_in_netns() {
	exec "$REPO/cluster/testbed/run-in-netns.sh" "$@"
}

# ------------------------------------------------------------------ work dir
# fresh_work: a new, empty $WORK (the previous run's logs go).
fresh_work() {
	local keep
	if [[ -d $WORK ]]; then
		any_running && die "processes of an earlier run in $WORK still run (a demo? make demo-down stops it)"
		for keep in etcd logs pki pids www xpkg-cache; do rm -rf "${WORK:?}/$keep"; done
		rm -f "$WORK"/*.yaml "$WORK"/*.tsv "$WORK"/kubeconfig "$WORK"/mode
	fi
	mkdir -p "$WORK" "$LOGS" "$PIDS" "$WORK/etcd" "$WORK/xpkg-cache" "$WORK/www"
	chmod 0700 "$WORK"
	: >"$PIDS/order"
}

# ------------------------------------------------------------------ PKI (openssl)
mkcert() { # mkcert DIR NAME SUBJ [SAN]
	local d=$1 n=$2 subj=$3 san=${4:-}
	openssl req -newkey rsa:2048 -nodes -keyout "$d/$n.key" -subj "$subj" -out "$d/$n.csr" 2>/dev/null
	: >"$d/$n.ext"
	[[ -z $san ]] || echo "subjectAltName=$san" >"$d/$n.ext"
	openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
		-days 30 -out "$d/$n.crt" -extfile "$d/$n.ext" 2>/dev/null
}
make_pki() {
	local P=$WORK/pki d
	mkdir -p "$P/kube" "$P/fn" "$P/fn-server" "$P/fn-client"
	for d in kube fn; do
		openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/$d/ca.key" -out "$P/$d/ca.crt" \
			-days 30 -subj "/CN=provider-kvm-e2e-$d-ca" 2>/dev/null
	done
	mkcert "$P/kube" apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost"
	mkcert "$P/kube" admin "/O=system:masters/CN=admin"
	openssl genrsa -out "$P/kube/sa.key" 2048 2>/dev/null
	openssl rsa -in "$P/kube/sa.key" -pubout -out "$P/kube/sa.pub" 2>/dev/null
	# Functions: one CA; a server certificate for the functions, a client one for the core.
	mkcert "$P/fn" server "/CN=functions" "IP:127.0.0.1,DNS:localhost"
	mkcert "$P/fn" client "/CN=crossplane"
	cp "$P/fn/ca.crt" "$P/fn-server/ca.crt"
	cp "$P/fn/server.crt" "$P/fn-server/tls.crt"
	cp "$P/fn/server.key" "$P/fn-server/tls.key"
	cp "$P/fn/ca.crt" "$P/fn-client/ca.crt"
	cp "$P/fn/client.crt" "$P/fn-client/tls.crt"
	cp "$P/fn/client.key" "$P/fn-client/tls.key"
}

# ------------------------------------------------------------------ control plane
start_controlplane() {
	local P=$WORK/pki/kube t0=$SECONDS
	start etcd "$BIN/etcd" --name e2e --data-dir "$WORK/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT"
	waitport "$ETCD_PORT" || die "etcd does not listen on 127.0.0.1:$ETCD_PORT"
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
		--client-ca-file="$P/ca.crt" --authorization-mode=RBAC \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/24 \
		--disable-admission-plugins=ServiceAccount
	k config set-cluster e2e --server="https://127.0.0.1:$APISERVER_PORT" --certificate-authority="$P/ca.crt" --embed-certs >/dev/null
	k config set-credentials admin --client-certificate="$P/admin.crt" --client-key="$P/admin.key" --embed-certs >/dev/null
	k config set-context e2e --cluster=e2e --user=admin >/dev/null
	k config use-context e2e >/dev/null
	wait_for "kube-apiserver /readyz" 180 k get --raw /readyz || die "kube-apiserver is not ready"
	log "kube-apiserver ready after $((SECONDS - t0))s ($("$BIN/kube-apiserver" --version))"
	# Only the garbage collector: Crossplane leaves deleting composed resources to it.
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
		--authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" \
		--controllers=garbagecollector --leader-elect=false --use-service-account-credentials=false \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT"
	k create namespace crossplane-system >/dev/null
}

# ------------------------------------------------------------------ Crossplane
crossplane_init() {
	local try
	log "crossplane core init ($CORE_VERSION, CRDs from $XP_CRDS)"
	# The first run usually fails with 'no matches for kind "Lock"': the CRDs it just created
	# are not in its REST mapper yet. In a cluster the init container restarts; retry here.
	for try in 1 2 3 4 5; do
		if CRDS_PATH="$XP_CRDS" TLS_CA_SECRET_NAME=crossplane-root-ca TLS_CLIENT_SECRET_NAME=crossplane-tls-client \
			"$BIN/crossplane-core" core init --enable-webhooks=false --namespace=crossplane-system \
			>>"$LOGS/core-init.log" 2>&1; then
			return 0
		fi
		((try < 5)) || break
		log "  core init attempt $try failed ($(tail -n1 "$LOGS/core-init.log" | cut -c1-160)); retrying"
		sleep 2
	done
	tail -n 20 "$LOGS/core-init.log" >&2
	die "crossplane core init failed"
}

crossplane_start() {
	start crossplane "$BIN/crossplane-core" core start --namespace=crossplane-system \
		--enable-webhooks=false --package-runtime=External \
		--tls-client-certs-dir="$WORK/pki/fn-client" --xpkg-cache-dir="$WORK/xpkg-cache" \
		--metrics-port="$CORE_METRICS_PORT" --health-probe-port="$CORE_HEALTH_PORT"
}

# start_functions: both functions as local processes serving mTLS, and a FunctionRevision
# for each whose status.endpoint points at it. The revisions are paused so that the package
# manager never tries to pull their image or run them.
start_functions() {
	start function-kvm-proxy env TLS_SERVER_CERTS_DIR="$WORK/pki/fn-server" \
		"$OUT/function-kvm-proxy" --address="127.0.0.1:$FN_PROXY_PORT"
	start function-auto-ready env TLS_SERVER_CERTS_DIR="$WORK/pki/fn-server" \
		"$BIN/function-auto-ready" --address="127.0.0.1:$FN_AUTOREADY_PORT"
	waitport "$FN_PROXY_PORT" || die "function-kvm-proxy does not listen"
	waitport "$FN_AUTOREADY_PORT" || die "function-auto-ready does not listen"
	register_function "$FN_PROXY" "$REGISTRY/provider-kvm/function-kvm-proxy:$PKG_TAG" "$FN_PROXY_PORT"
	register_function "$FN_AUTOREADY" "xpkg.crossplane.io/crossplane-contrib/function-auto-ready:v0.7.0" "$FN_AUTOREADY_PORT"
}
register_function() { # NAME IMAGE PORT
	FN_NAME=$1 FN_IMAGE=$2 apply "$MANIFESTS/functionrevision.yaml"
	k patch functionrevision "$1-local" --subresource=status --type=merge \
		-p "{\"status\":{\"endpoint\":\"127.0.0.1:$3\",\"capabilities\":[\"composition\"]}}" >/dev/null
	log "FunctionRevision $1-local -> 127.0.0.1:$3 (mTLS)"
}

# install_packages: the provider and configuration packages of `make xpkg`, pushed to a
# loopback registry and installed through Crossplane's package manager.
install_packages() {
	local p rev t0=$SECONDS
	start registry "$BIN/crane" registry serve --address "$REGISTRY"
	waitport "$REGISTRY_PORT" || die "the registry does not listen on $REGISTRY"
	for p in provider-kvm function-kvm-proxy configuration-kvm-proxy; do
		"$BIN/crossplane" xpkg push -f "$XPKG_DIR/$p.xpkg" "$REGISTRY/provider-kvm/$p:$PKG_TAG" >>"$LOGS/xpkg-push.log" 2>&1 ||
			{ tail -n 20 "$LOGS/xpkg-push.log" >&2; die "crossplane xpkg push of $p failed"; }
	done
	log "pushed provider-kvm, function-kvm-proxy, configuration-kvm-proxy:$PKG_TAG to $REGISTRY"
	# The provider's managed resource CRDs arrive as ManagedResourceDefinitions (safe-start):
	# this policy activates them.
	apply "$MANIFESTS/activation-policy.yaml"
	apply "$MANIFESTS/packages.yaml"
	# With --package-runtime=External nobody plays the runtime's part: the establisher waits
	# for status.tlsServerSecretName (the webhook TLS Secret) before it installs the CRDs.
	wait_for "a ProviderRevision of provider-kvm" 300 \
		bash -c "[[ -n \$('$KUBECTL' get providerrevisions -l pkg.crossplane.io/package=provider-kvm -o name) ]]" ||
		die "the package manager created no ProviderRevision (see $LOGS/crossplane.log)"
	rev=$(k get providerrevisions -l pkg.crossplane.io/package=provider-kvm -o jsonpath='{.items[0].metadata.name}')
	k -n crossplane-system create secret generic provider-kvm-tls-server \
		--from-file=tls.crt="$WORK/pki/fn-server/tls.crt" --from-file=tls.key="$WORK/pki/fn-server/tls.key" \
		--from-file=ca.crt="$WORK/pki/fn-server/ca.crt" >/dev/null
	k patch providerrevision "$rev" --subresource=status --type=merge \
		-p '{"status":{"tlsServerSecretName":"provider-kvm-tls-server"}}' >/dev/null
	log "ProviderRevision $rev: status.tlsServerSecretName set by hand"
	if ! k wait --for=condition=RevisionHealthy "providerrevision/$rev" --timeout=300s >/dev/null; then
		k get providerrevision "$rev" -o yaml | sed -n '/^status:/,$p' >&2
		die "ProviderRevision $rev is not healthy"
	fi
	for p in baseimages seedvolumes kvmdomains providerconfigs clusterproviderconfigs providerconfigusages; do
		wait_for "CRD $p.kvm.crossplane.io" 300 k get crd "$p.kvm.crossplane.io" ||
			die "CRD $p.kvm.crossplane.io was never created (MRD not activated? see kubectl get mrd)"
		k wait --for=condition=Established "crd/$p.kvm.crossplane.io" --timeout=120s >/dev/null ||
			die "CRD $p.kvm.crossplane.io is not Established"
	done
	log "provider package installed: ProviderRevision $rev healthy, managed resource CRDs established"

	wait_for "a healthy ConfigurationRevision" 300 \
		k wait --for=condition=RevisionHealthy configurationrevisions -l pkg.crossplane.io/package=configuration-kvm-proxy --timeout=1s ||
		{ k get configurationrevisions -o yaml | sed -n '/^  status:/,$p' >&2; die "the configuration package did not install"; }
	for p in proxies xproxies; do
		wait_for "XRD $p.platform.kvm.crossplane.io Established" 300 \
			k wait --for=condition=Established "xrd/$p.platform.kvm.crossplane.io" --timeout=1s ||
			die "XRD $p.platform.kvm.crossplane.io is not Established"
		k get composition "$p.platform.kvm.crossplane.io" >/dev/null || die "Composition $p.platform.kvm.crossplane.io is missing"
	done
	k wait --for=condition=Offered xrd/xproxies.platform.kvm.crossplane.io --timeout=120s >/dev/null ||
		die "XRD xproxies.platform.kvm.crossplane.io does not offer its claim"
	log "configuration package installed: XRDs Established (ProxyClaim offered), Compositions present ($((SECONDS - t0))s)"
}

start_provider() {
	start provider "$OUT/provider" --poll="$POLL" --metrics-bind-address="127.0.0.1:$PROVIDER_METRICS_PORT" \
		${PROVIDER_DEBUG:+--debug}
}

# host_config: the test bed's sshd/libvirtd as ClusterProviderConfig "default": the SSH key
# and the pinned known_hosts in a Secret; TCG guests (domainType qemu), the test bed's pool.
host_config() {
	k -n crossplane-system create secret generic testbed-ssh \
		--from-file=ssh-privatekey="$TESTBED_SSH_KEY" --from-file=known_hosts="$TESTBED_SSH_KNOWN_HOSTS" >/dev/null
	SSH_HOST=$TESTBED_SSH_HOST SSH_PORT=$TESTBED_SSH_PORT SSH_USER=${TESTBED_SSH_USER:-root} \
		LIBVIRT_SOCKET=$TESTBED_LIBVIRT_SOCKET LIBVIRT_URI=$TESTBED_LIBVIRT_URI POOL=$TESTBED_POOL \
		NETWORK=${TESTBED_NETWORK:-default} apply "$MANIFESTS/clusterproviderconfig.yaml"
	log "ClusterProviderConfig default: ssh ${TESTBED_SSH_USER:-root}@$TESTBED_SSH_HOST:$TESTBED_SSH_PORT (pinned host key), domainType qemu, pool $TESTBED_POOL"
}

# ------------------------------------------------------------------ servers in the namespace
# serve_image: the guest image over HTTP on loopback, under two paths: /a/ for team-a's shared
# BaseImage, /b/ for the claim's own (a BaseImage volume is keyed by URL and digest, so two
# BaseImages on one host need two URLs).
serve_image() {
	local d
	for d in a b demo; do
		mkdir -p "$WORK/www/$d"
		ln -sf "$IMAGE" "$WORK/www/$d/$(basename "$IMAGE")"
	done
	start image-server python3 -m http.server --bind 127.0.0.1 --directory "$WORK/www" "$IMAGE_PORT"
	waitport "$IMAGE_PORT" || die "the image server does not listen"
	# (these and PROBE_URL are read by render, through ${!key})
	# shellcheck disable=SC2034
	IMAGE_SHA256=$(awk '{print $1; exit}' "$IMAGE.sha256")
	# shellcheck disable=SC2034
	IMAGE_URL_A=http://127.0.0.1:$IMAGE_PORT/a/$(basename "$IMAGE")
	# shellcheck disable=SC2034
	IMAGE_URL_B=http://127.0.0.1:$IMAGE_PORT/b/$(basename "$IMAGE")
	# shellcheck disable=SC2034
	IMAGE_URL_DEMO=http://127.0.0.1:$IMAGE_PORT/demo/$(basename "$IMAGE")
}

# serve_origin: the URL the proxies fetch: 204 on the NAT bridge address (guests reach it).
serve_origin() {
	BRIDGE_IP=$(v net-dumpxml "${TESTBED_NETWORK:-default}" | sed -n "s/.*<ip address='\([0-9.]*\)'.*/\1/p" | head -n1)
	BRIDGE_IP=${BRIDGE_IP:-192.168.122.1}
	start origin-204 python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()' "$BRIDGE_IP" "$ORIGIN_PORT"
	waitport "$ORIGIN_PORT" "$BRIDGE_IP" || die "the 204 server does not listen on $BRIDGE_IP:$ORIGIN_PORT"
	PROBE_URL=http://$BRIDGE_IP:$ORIGIN_PORT/
	[[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$PROBE_URL") == 204 ]] || die "$PROBE_URL does not answer 204"
}

# bring_up: everything up to a control plane with the packages installed and the test bed
# configured. The caller has done preflight and fresh_work, and runs inside the namespace.
bring_up() {
	local t0
	t0=$(now)
	make_pki
	start_controlplane
	crossplane_init
	start_functions
	crossplane_start
	serve_image
	serve_origin
	start_provider
	install_packages
	host_config
	BRINGUP_S=$(elapsed "$t0")
	log "control plane, Crossplane, functions, provider and packages up in ${BRINGUP_S}s"
}

# ------------------------------------------------------------------ libvirt objects
# Our objects on the test bed: domains and volumes of namespaces NSES (<ns>_<name>...) and base
# image volumes (pkvm-base-*).
libvirt_objects() { # libvirt_objects NS...: one "kind name" line per object
	local ns re
	re="^($(IFS='|'; echo "$*"))_"
	v list --all --name 2>/dev/null | grep -E "$re" | sed 's/^/domain /' || true
	v vol-list --pool "$TESTBED_POOL" 2>/dev/null | awk '{print $1}' | grep -E "$re|^pkvm-" | sed 's/^/volume /' || true
	for ns in "$@"; do
		find /var/lib/libvirt/qemu/nvram -maxdepth 1 -name "${ns}_*" -printf 'nvram %p\n' 2>/dev/null || true
	done
}

# force_clean NS...: remove what libvirt_objects lists, with virsh (only after deleting
# through Kubernetes failed or was impossible).
force_clean() {
	local kind name
	while read -r kind name; do
		case $kind in
		domain)
			warn "removing domain $name with virsh"
			v destroy "$name" >/dev/null 2>&1 || true
			v undefine "$name" --nvram >/dev/null 2>&1 || v undefine "$name" >/dev/null 2>&1 || true ;;
		esac
	done < <(libvirt_objects "$@")
	while read -r kind name; do
		case $kind in
		volume)
			warn "removing volume $name with virsh"
			v vol-delete --pool "$TESTBED_POOL" "$name" >/dev/null 2>&1 || true ;;
		nvram)
			warn "removing $name"
			rm -f "$name" ;;
		esac
	done < <(libvirt_objects "$@")
}

# ------------------------------------------------------------------ watching Proxies
# host_clean NS...: nothing of these namespaces (and no base image volume) is on the host.
host_clean() { [[ -z $(libvirt_objects "$@") ]]; }

record() { # record SUBJECT EVENT SECONDS
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$TIMELINE"
}

# watch NS RESOURCE NAME SELECTOR T0 LABEL: poll every 2 s until RESOURCE NAME (a Proxy or a
# ProxyClaim) is Ready; note when each composed resource (SELECTOR) becomes Ready, when the
# KVMDomain is defined and started and gets its address, when the Secret appears, and the phases.
watch() {
	local ns=$1 res=$2 name=$3 sel=$4 t0=$5 label=$6 t out obj ready created ip xr kind phase ready_xr synced why lastphase=""
	local -A seen=()
	note() { # note KEY EVENT TIME [DETAIL]
		[[ -z ${seen[$1]:-} ]] || return 0
		seen[$1]=1
		record "$label" "$2" "$(elapsed "$t0" "$3")"
		log "  $label +$(elapsed "$t0" "$3")s: $2${4:+ ($4)}"
	}
	scan() { # note what the composed resources show at time t
		out=$(k -n "$ns" get seedvolumes.kvm.crossplane.io,kvmdomains.kvm.crossplane.io,baseimages.kvm.crossplane.io,secrets \
			-l "$sel" -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}|{.status.conditions[?(@.type=="Ready")].status}|{.metadata.annotations.crossplane\.io/external-create-succeeded}|{.status.atProvider.ipv4}{"\n"}{end}' 2>/dev/null || true)
		while IFS='|' read -r obj ready created ip; do
			[[ -n $obj ]] || continue
			case $obj in
			Secret/*) note "$obj" "Secret composed" "$t" "${obj#*/}" ;;
			KVMDomain/*)
				# defined and started on the host: the time crossplane-runtime recorded (1 s resolution)
				[[ -z $created ]] || note "$obj/created" "KVMDomain defined + started" "$(date -d "$created" +%s)"
				[[ -z $ip ]] || note "$obj/ip" "KVMDomain address known" "$t" "$ip"
				[[ $ready != True ]] || note "$obj" "KVMDomain Ready (probe 204 through squid)" "$t" ;;
			*) [[ $ready != True ]] || note "$obj" "${obj%%/*} Ready" "$t" ;;
			esac
		done <<<"$out"
	}
	while :; do
		t=$(now)
		scan
		xr=$(k -n "$ns" get "$res" "$name" -o jsonpath='{.kind}|{.status.phase}|{.status.conditions[?(@.type=="Ready")].status}|{.status.conditions[?(@.type=="Synced")].status}' 2>/dev/null || true)
		IFS='|' read -r kind phase ready_xr synced <<<"$xr"
		if [[ -n $phase && $phase != "$lastphase" ]]; then
			why=""
			[[ $phase != Error ]] || why=": KVMDomain $(k -n "$ns" get kvmdomains.kvm.crossplane.io -l "$sel" -o jsonpath='{.items[0].status.conditions[?(@.type=="Synced")].message}' 2>/dev/null | cut -c1-160)"
			log "  $label +$(elapsed "$t0" "$t")s: phase $phase (Synced=${synced:-?})$why"
			lastphase=$phase
		fi
		if [[ $ready_xr == True ]]; then
			# The XR was read after the composed resources: a KVMDomain that became Ready in
			# between would otherwise be missing from the timeline.
			scan
			note xr "Proxy Ready" "$t" "$kind $ns/$name"
			return 0
		fi
		if awk -v a="$(elapsed "$t0")" -v b="$GUEST_TIMEOUT" 'BEGIN{exit !(a>b)}'; then
			die "$label is not Ready after ${GUEST_TIMEOUT}s (phase ${phase:-none}, Synced=${synced:-?})"
		fi
		sleep 2
	done
}

# check_endpoint LABEL NS SECRET STATUS_OBJ...: the Secret holds url, host and port that agree
# with each other and with the status, and the proxy at url forwards to the 204 server.
check_endpoint() {
	local label=$1 ns=$2 sec=$3 url host port code surl
	shift 3
	url=$(k -n "$ns" get secret "$sec" -o jsonpath='{.data.url}' | base64 -d)
	host=$(k -n "$ns" get secret "$sec" -o jsonpath='{.data.host}' | base64 -d)
	port=$(k -n "$ns" get secret "$sec" -o jsonpath='{.data.port}' | base64 -d)
	[[ -n $url && -n $host && -n $port ]] || die "$label: Secret $ns/$sec lacks url, host or port"
	[[ $url == "http://$host:$port" ]] || die "$label: Secret $ns/$sec: url $url does not match host $host and port $port"
	[[ $port == 3128 ]] || die "$label: Secret $ns/$sec: port $port, want 3128"
	surl=$(k "$@" -o jsonpath='{.status.url}')
	[[ $surl == "$url" ]] || die "$label: status.url $surl differs from the Secret's $url"
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 -x "$url" "$PROBE_URL" || true)
	[[ $code == 204 ]] || die "$label: curl -x $url $PROBE_URL answered '$code', want 204"
	log "  $label: Secret $ns/$sec url=$url host=$host port=$port; curl -x $url $PROBE_URL -> 204"
}

# domain_objects NS DOMAIN: the domain's volumes (overlay, seed) and NVRAM file, one per line,
# read from its libvirt definition while it exists.
domain_objects() {
	local xml
	xml=$(v dumpxml "$1_$2") || die "domain $1_$2 is not defined on the test bed"
	printf '%s\n' "$xml" | sed -n "s/.*<source pool='[^']*' volume='\([^']*\)'.*/volume \1/p"
	printf '%s\n' "$xml" | sed -n 's/.*<nvram[^>]*>\([^<]*\)<\/nvram>.*/nvram \1/p'
	echo "domain $1_$2"
}
# objects_gone FILE: none of the objects listed in FILE (domain_objects lines) exists.
objects_gone() {
	local kind name
	while read -r kind name; do
		case $kind in
		domain) v dominfo "$name" >/dev/null 2>&1 && return 1 ;;
		volume) v vol-info --pool "$TESTBED_POOL" "$name" >/dev/null 2>&1 && return 1 ;;
		nvram) [[ -e $name ]] && return 1 ;;
		esac
	done <"$1"
	return 0
}
# composed_gone NS SELECTOR: no managed resource or Secret of the XR is left in the API.
composed_gone() {
	[[ -z $(k -n "$1" get seedvolumes.kvm.crossplane.io,kvmdomains.kvm.crossplane.io,baseimages.kvm.crossplane.io,secrets -l "$2" -o name 2>/dev/null) ]]
}

# ------------------------------------------------------------------ diagnostics
diagnose() {
	local f dom
	echo "----- diagnostics (logs in $LOGS)" >&2
	if k get --raw /readyz >/dev/null 2>&1; then
		k get proxies.platform.kvm.crossplane.io,proxyclaims.platform.kvm.crossplane.io -A -o wide 2>&1 | head -n 20 >&2 || true
		k get managed -A 2>&1 | head -n 30 >&2 || true
		for f in $(k get kvmdomains.kvm.crossplane.io,seedvolumes.kvm.crossplane.io,baseimages.kvm.crossplane.io,proxies.platform.kvm.crossplane.io,xproxies.platform.kvm.crossplane.io -A -o jsonpath='{range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}{" "}{end}' 2>/dev/null); do
			echo "  $f:" >&2
			IFS=/ read -r kind ns name <<<"$f"
			k get "$kind" ${ns:+-n "$ns"} "$name" -o jsonpath='{range .status.conditions[*]}    {.type}={.status} {.reason}: {.message}{"\n"}{end}' 2>/dev/null | cut -c1-400 >&2 || true
		done
		k get events -A --sort-by=.lastTimestamp 2>/dev/null | grep -v Normal | tail -n 15 | cut -c1-300 >&2 || true
	fi
	for f in provider crossplane function-kvm-proxy function-auto-ready; do
		[[ -s $LOGS/$f.log ]] || continue
		echo "----- errors in $LOGS/$f.log (last 15)" >&2
		grep -iE 'error|warn|fail' "$LOGS/$f.log" | grep -vE 'finalizer name|is deprecated' |
			tail -n 15 | cut -c1-400 >&2 || true
	done
	for dom in $(v list --all --name 2>/dev/null | grep -E '^(team-a|team-b|demo)_' || true); do
		f=/var/log/libvirt/qemu/$dom-console.log
		[[ -s $f ]] || continue
		echo "----- serial console of $dom ($f)" >&2
		tail -n 25 "$f" >&2
	done
}
