#!/usr/bin/env bash
# packages.sh -- install the project's packages (make xpkg) on the node through Crossplane's
# package manager (make node-packages, after make node-crossplane): push the .xpkg files to the
# node's registry (the provider's and the function's per-platform files as one multi-platform
# package each), with function-auto-ready v0.7.0 made into a Function package here (its binary
# from make tools, its package metadata from its Go module); create the Provider, both Functions
# (under the names the Compositions use) and the Configuration with packages on the node's
# address (as a pod reaches the registry); wait until all are HEALTHY, the function and provider
# pods run under the package runtime and the Configuration's XRDs are Established; then check
# the provider pod: user 2000, no privilege escalation, no capabilities, the ServiceAccount bound
# to the RBAC manager's ClusterRole. Prints TIMING.
#   XPKG_DIR (default _output/xpkg), PKG_TAG (default v0.1.0: a tag the Configuration's
#   dependency constraints, >=v0.1.0, accept, for dependency resolution)
#   PROVIDER_ARGS  the provider's flags (e.g. "--poll=10s --debug"), given by a
#                  DeploymentRuntimeConfig as a platform team would (default: none)
#   PROVIDER_CA_FILE  PEM file of an extra CA the provider trusts for BaseImage downloads:
#                  put in ConfigMap crossplane-system/provider-kvm-ca and mounted by the
#                  DeploymentRuntimeConfig under SSL_CERT_DIR, as docs/platform-teams.md says
#                  (default: none)
#   PACKAGES_INSTALL  "all" (default) or "platform": only the platform's part, what must be
#                  there before the README's quickstart runs (make e2e, test/e2e quickstart.go):
#                  function-auto-ready in the registry (the upstream package's stand-in), the
#                  ImageConfig that points xpkg.crossplane.io at the node's registry (the
#                  internet's stand-in), the CA's ConfigMap and the DeploymentRuntimeConfig
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
[[ $(id -u) == 0 ]] || ndie "must run as root"
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
{ holder_ok && alive kubelet; } || ndie "the node is not up: make node-up"
XPKG_DIR=$(readlink -f "${XPKG_DIR:-$HERE/../../_output/xpkg}")
PKG_TAG=${PKG_TAG:-v0.1.0}
NS=crossplane-system
[[ -x $BIN/crossplane ]] || ndie "missing $BIN/crossplane (make tools)"
kc -n "$NS" get deploy crossplane >/dev/null 2>&1 || ndie "no Crossplane core on the node: make node-crossplane"

t0=$(date +%s.%N)
secs() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
# function-auto-ready as a Function package: its binary (make tools) in a one-layer image,
# its package/ folder (crossplane.yaml, the input CRD) from its module.
AUTOREADY_VERSION=${AUTOREADY_VERSION:-v0.7.0}
ar=$NODE_DIR/images/function-auto-ready-$AUTOREADY_VERSION.xpkg
if [[ ! -s $ar || $BIN/function-auto-ready -nt $ar ]]; then
	[[ -x $BIN/function-auto-ready ]] || ndie "missing $BIN/function-auto-ready (make tools)"
	root=$(cd "$HERE/../.." && go env GOMODCACHE)/github.com/crossplane-contrib/function-auto-ready@$AUTOREADY_VERSION/package
	[[ -s $root/crossplane.yaml ]] || ndie "no $root/crossplane.yaml (make tools downloads the module)"
	"$NODE_DIR/images/mkimage" -binary "$BIN/function-auto-ready" -path /usr/local/bin/function \
		-tag "xpkg.crossplane.io/crossplane-contrib/function-auto-ready:$AUTOREADY_VERSION" -o "$NODE_DIR/images/function-auto-ready.tar"
	"$BIN/crossplane" xpkg build --package-root="$root" --examples-root="$NODE_DIR/images/no-examples" \
		--embed-runtime-image-tarball="$NODE_DIR/images/function-auto-ready.tar" --package-file="$ar.tmp" >>"$LOGS/push.log" 2>&1 ||
		ndie "crossplane xpkg build of function-auto-ready failed (see $LOGS/push.log)"
	mv -f "$ar.tmp" "$ar"
fi
push() { # push FILES REPOSITORY (FILES comma-separated: several make a multi-platform index)
	in_node "$BIN/crossplane" xpkg push -f "$1" "$REGISTRY/$2:$PKG_TAG" >>"$LOGS/push.log" 2>&1 ||
		ndie "crossplane xpkg push of $2 failed (see $LOGS/push.log)"
}
INSTALL=${PACKAGES_INSTALL:-all}
[[ $INSTALL == all || $INSTALL == platform ]] || ndie "PACKAGES_INSTALL=$INSTALL: want all or platform"
if [[ $INSTALL == all ]]; then
	# The provider and the function are multi-platform packages (one .xpkg per platform, pushed
	# together as an OCI image index, as a release is pushed); the node is linux/amd64 and pulls that.
	for p in provider-kvm function-kvm-proxy; do
		files=("$XPKG_DIR/$p"-*.xpkg)
		[[ -s ${files[0]} && -s $XPKG_DIR/$p-amd64.xpkg ]] || ndie "missing $XPKG_DIR/$p-amd64.xpkg (make xpkg)"
		push "$(IFS=,; echo "${files[*]}")" "provider-kvm/$p"
		if [[ ${#files[@]} == 1 ]]; then # XPKG_ARCHES=amd64: a single-platform package
			nlog "pushed provider-kvm/$p:$PKG_TAG: ${files[0]##*/}"
			continue
		fi
		# What the package manager and containerd pull: an index of every platform built.
		platforms=$(in_node "$BIN/crane" manifest "$REGISTRY/provider-kvm/$p:$PKG_TAG" |
			python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join(sorted(d["platform"]["os"]+"/"+d["platform"]["architecture"] for d in m.get("manifests", []))))') ||
			ndie "cannot read the manifest of provider-kvm/$p:$PKG_TAG"
		want=$(printf '%s\n' "${files[@]}" | sed -E 's/.*-([a-z0-9]+)\.xpkg$/linux\/\1/' | sort | paste -sd' ')
		[[ $platforms == "$want" ]] || ndie "provider-kvm/$p:$PKG_TAG is an index of '$platforms', want '$want'"
		nlog "pushed provider-kvm/$p:$PKG_TAG: an index of $platforms"
	done
	[[ -s $XPKG_DIR/configuration-kvm-proxy.xpkg ]] || ndie "missing $XPKG_DIR/configuration-kvm-proxy.xpkg (make xpkg)"
	push "$XPKG_DIR/configuration-kvm-proxy.xpkg" provider-kvm/configuration-kvm-proxy
fi
# Under its own version, which the Configuration's constraint (>=v0.7.0) accepts.
PKG_TAG=$AUTOREADY_VERSION push "$ar" crossplane-contrib/function-auto-ready
args=
for a in ${PROVIDER_ARGS:-}; do args+=${args:+, }\"$a\"; done
# The extra CA, as docs/platform-teams.md gives it to the provider: a ConfigMap mounted into
# the provider's container, its directory named by SSL_CERT_DIR (Go reads every certificate
# there beside the image's bundle).
ca_env='' ca_mount='' ca_volume=''
if [[ -n ${PROVIDER_CA_FILE:-} ]]; then
	[[ -s $PROVIDER_CA_FILE ]] || ndie "PROVIDER_CA_FILE $PROVIDER_CA_FILE is empty or missing"
	kc -n "$NS" create configmap provider-kvm-ca --from-file=ca.crt="$PROVIDER_CA_FILE" --dry-run=client -o yaml |
		kc apply -f - >/dev/null || ndie "cannot create ConfigMap $NS/provider-kvm-ca"
	ca_env='env: [{name: SSL_CERT_DIR, value: /etc/provider-kvm/ca}], '
	ca_mount='volumeMounts: [{name: extra-ca, mountPath: /etc/provider-kvm/ca, readOnly: true}], '
	ca_volume='volumes: [{name: extra-ca, configMap: {name: provider-kvm-ca}}]'
	nlog "the provider trusts the CA of $PROVIDER_CA_FILE too (ConfigMap $NS/provider-kvm-ca under SSL_CERT_DIR)"
fi
kc apply -f - >/dev/null <<-YAML
	apiVersion: pkg.crossplane.io/v1beta1
	kind: DeploymentRuntimeConfig
	metadata: {name: provider-kvm}
	spec:
	  deploymentTemplate:
	    spec:
	      selector: {}
	      template:
	        spec:
	          containers: [{name: package-runtime, ${ca_env}${ca_mount}args: [$args]}]
	          ${ca_volume}
	---
	# As a site with a private registry installs: the packages keep their xpkg.crossplane.io
	# names (those the Configuration's dependencies use) and an ImageConfig rewrites them to the
	# node's registry, for the package manager and for the runtime's images.
	apiVersion: pkg.crossplane.io/v1beta1
	kind: ImageConfig
	metadata: {name: node-registry}
	spec:
	  matchImages: [{type: Prefix, prefix: "xpkg.crossplane.io/"}]
	  rewriteImage: {prefix: "$POD_REGISTRY/"}
YAML
if [[ $INSTALL == platform ]]; then
	nlog "the platform's part is in place (function-auto-ready, ImageConfig node-registry, DeploymentRuntimeConfig provider-kvm); the quickstart installs the packages"
	exit 0
fi
kc apply -f - >/dev/null <<-YAML
	# Installed first for its DeploymentRuntimeConfig; once it is in Crossplane's lock the
	# Configuration's dependency on it is satisfied by this one (installed at the same time,
	# the dependency manager would install a second Provider of the same package).
	apiVersion: pkg.crossplane.io/v1
	kind: Provider
	metadata: {name: provider-kvm}
	spec:
	  package: "xpkg.crossplane.io/provider-kvm/provider-kvm:$PKG_TAG"
	  runtimeConfigRef: {name: provider-kvm}
YAML
healthy() { # healthy KIND/NAME: wait until it exists, then until it is Healthy
	for ((i = 0; i < 240; i++)); do # a dependency appears once the Configuration's are resolved
		kc get "$1" >/dev/null 2>&1 && break
		sleep 1
	done
	kc wait --for=condition=Healthy --timeout=240s "$1" >/dev/null ||
		{ kc describe "$1" >&2; ndie "$1 is not Healthy"; }
	nlog "$1 Healthy after $(secs)s"
}
healthy providers.pkg.crossplane.io/provider-kvm
kc apply -f - >/dev/null <<-YAML
	# The Functions are not installed here: Crossplane resolves the Configuration's dependencies
	# against the node's registry (the tags it lists there) and installs them under the names
	# the Compositions use.
	apiVersion: pkg.crossplane.io/v1
	kind: Configuration
	metadata: {name: configuration-kvm-proxy}
	spec:
	  package: "xpkg.crossplane.io/provider-kvm/configuration-kvm-proxy:$PKG_TAG"
YAML
for kind in configurations.pkg.crossplane.io/configuration-kvm-proxy \
	functions.pkg.crossplane.io/provider-kvm-function-kvm-proxy functions.pkg.crossplane.io/crossplane-contrib-function-auto-ready; do
	healthy "$kind"
done
# The dependency manager installed no Provider of its own beside provider-kvm.
n=$(kc get providers.pkg.crossplane.io -o name | grep -c .) || true
[[ $n == 1 ]] || { kc get providers.pkg.crossplane.io >&2; ndie "$n Providers, want provider-kvm alone"; }
# The Functions are the dependency manager's: their packages are the versions it chose from the
# tags of the node's registry, pulled through the ImageConfig.
for f in provider-kvm-function-kvm-proxy:provider-kvm/function-kvm-proxy:$PKG_TAG \
	crossplane-contrib-function-auto-ready:crossplane-contrib/function-auto-ready:$AUTOREADY_VERSION; do
	IFS=: read -r name repo tag <<<"$f"
	got=$(kc get functions.pkg.crossplane.io "$name" -o jsonpath='{.spec.package}')
	[[ $got == "xpkg.crossplane.io/$repo:$tag" ]] ||
		ndie "Function $name has package '$got', want the resolved dependency xpkg.crossplane.io/$repo:$tag"
	pulled=$(kc get functions.pkg.crossplane.io "$name" -o jsonpath='{.status.resolvedPackage}')
	[[ $pulled == "$POD_REGISTRY/$repo:$tag" ]] ||
		ndie "Function $name was pulled as '$pulled', want $POD_REGISTRY/$repo:$tag (the ImageConfig's rewrite)"
	nlog "Function $name installed by dependency resolution: $got, pulled as $pulled"
done
rev=$(kc get providers.pkg.crossplane.io provider-kvm -o jsonpath='{.status.currentRevision}')
for ((i = 0; i < 240; i++)); do
	pod=$(kc -n "$NS" get pods -l "pkg.crossplane.io/revision=$rev" -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}' 2>/dev/null || true)
	[[ -n $pod ]] && break
	sleep 0.5
done
[[ -n $pod ]] || { kc -n "$NS" get pods >&2; ndie "no running pod of provider revision $rev"; }
nlog "provider pod $pod Running after $(secs)s"
kc wait --for=condition=Ready --timeout=120s -n "$NS" "pod/$pod" >/dev/null || ndie "provider pod $pod not Ready"
t_ready=$(secs)

sa=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.spec.serviceAccountName}')
crb=$(kc get clusterrolebindings -o jsonpath="{range .items[?(@.subjects[0].name==\"$sa\")]}{.roleRef.name}{\"\\n\"}{end}")
[[ $crb == "crossplane:provider:$rev:system" ]] || ndie "ServiceAccount $sa is bound to '$crb', not the RBAC manager's crossplane:provider:$rev:system"
cid=$(kc -n "$NS" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
pid=$(find /sys/fs/cgroup/pids/"$CGROUP_PARENT" -path "*$cid*" -name cgroup.procs -exec cat {} + | head -n1)
[[ -n $pid ]] || ndie "no process of the provider container $cid"
status=$(grep -E '^(Uid|Gid|NoNewPrivs|CapEff):' "/proc/$pid/status")
printf '%s\n' "$status" | sed 's/^/  provider process: /'
grep -Eq '^Uid:\s+2000\s+2000\s+2000\s+2000$' <<<"$status" || ndie "the provider does not run as uid 2000"
grep -Eq '^NoNewPrivs:\s+1$' <<<"$status" || ndie "the provider may gain privileges"
grep -Eq '^CapEff:\s+0+$' <<<"$status" || ndie "the provider has capabilities"
for xrd in proxies.platform.kvm.crossplane.io xproxies.platform.kvm.crossplane.io; do
	kc wait --for=condition=Established --timeout=120s "compositeresourcedefinition/$xrd" >/dev/null ||
		ndie "XRD $xrd not Established"
done
for f in provider-kvm-function-kvm-proxy crossplane-contrib-function-auto-ready; do
	n=$(kc -n "$NS" get pods -l "pkg.crossplane.io/function=$f" -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}' | grep -c .) || true
	[[ $n -ge 1 ]] || ndie "no running pod of Function $f"
done
kc get providers.pkg.crossplane.io,functions.pkg.crossplane.io,configurations.pkg.crossplane.io
echo "TIMING node packages healthy+provider-ready ${t_ready}s"
nlog "packages check passed (provider $rev as $sa, bound to crossplane:provider:$rev:system)"
