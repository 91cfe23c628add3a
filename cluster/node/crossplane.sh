#!/usr/bin/env bash
# crossplane.sh -- the Crossplane core (with its RBAC manager) as Deployments on the node
# (make node-crossplane, after make node-up), the way a Helm install runs them: the image is
# the v2.4.0 core binary (make tools builds it) at /usr/local/bin/crossplane with the core's
# CRDs at /crds (its `core init` installs them), made by cluster/xpkg/mkimage and pushed to the
# node's registry. Namespace crossplane-system, the TLS Secrets `core init` fills, the pods'
# security context as the chart's (65532, read-only root, no privilege escalation). The
# ServiceAccounts crossplane and rbac-manager and their RBAC are the chart's own: its RBAC
# templates (the chart in the v2.4.0 module, cluster/charts/crossplane) rendered with its
# default values by cluster/node/chart (there is no helm here), no cluster-admin. Waits until
# both Deployments are Available, then checks the core's ServiceAccount is not cluster-admin.
#
# Webhooks are on, as in the chart (WEBHOOKS=0: off): Service crossplane-webhooks, the core's
# webhook configurations at /webhookconfigurations in the image; the API server reaches the
# webhook at the pod's IP (up.sh: --enable-aggregator-routing).
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster/node/lib.sh
. "$HERE/lib.sh"
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
[[ $(id -u) == 0 ]] || ndie "must run as root"
{ holder_ok && alive kubelet; } || ndie "the node is not up: make node-up"
CORE_VERSION=${CORE_VERSION:-v2.4.0}
CORE=$BIN/crossplane-core
[[ -x $CORE ]] || ndie "missing $CORE (make tools)"
XP_MOD=$(go env GOMODCACHE)/github.com/crossplane/crossplane/v2@$CORE_VERSION
CRDS=$XP_MOD/cluster/crds
WEBHOOKS=${WEBHOOKS:-1}
if [[ $WEBHOOKS == 1 ]]; then enable_webhooks=true; else enable_webhooks=false; fi
[[ -d $CRDS ]] || ndie "no Crossplane CRDs at $CRDS (make e2e's preflight downloads the module)"
CHART=$XP_MOD/cluster/charts/crossplane
[[ -s $CHART/Chart.yaml ]] || ndie "no Crossplane chart at $CHART"
# Pods pull it from the node's registry on loopback of netns node (containerd's view).
IMG=$REGISTRY/crossplane/crossplane:$CORE_VERSION
T0=$SECONDS

tar=$NODE_DIR/images/crossplane-$CORE_VERSION.tar
if [[ ! -s $tar || $CORE -nt $tar || $0 -nt $tar ]]; then
	[[ -x $NODE_DIR/images/mkimage ]] || ndie "no mkimage in $NODE_DIR/images (make node-up builds it)"
	files=()
	for f in "$CRDS"/*.yaml; do files+=(-file "$f=/crds/${f##*/}"); done
	for f in "$XP_MOD"/cluster/webhookconfigurations/*.yaml; do files+=(-file "$f=/webhookconfigurations/${f##*/}"); done
	"$NODE_DIR/images/mkimage" -binary "$CORE" -path /usr/local/bin/crossplane -tag "$IMG" "${files[@]}" -o "$tar.tmp"
	mv -f "$tar.tmp" "$tar"
	nlog "image $IMG: $(stat -c %s "$tar") bytes, $(( SECONDS - T0 ))s"
fi
in_node "$BIN/crane" push --insecure "$tar" "$IMG" >>"$LOGS/push.log" 2>&1 || ndie "crane push $IMG failed (see $LOGS/push.log)"

# The chart's ServiceAccounts and RBAC, as `helm install` creates them with the default values.
(cd "$HERE" && GOTOOLCHAIN=local go build -o "$NODE_DIR/images/chart" ./chart) || ndie "go build of cluster/node/chart failed"
rbac=$NODE_DIR/crossplane-chart-rbac.yaml
"$NODE_DIR/images/chart" -chart "$CHART" -namespace crossplane-system \
	serviceaccount.yaml rbac-manager-serviceaccount.yaml clusterrole.yaml clusterrolebinding.yaml \
	rbac-manager-clusterrole.yaml rbac-manager-clusterrolebinding.yaml \
	rbac-manager-managed-clusterroles.yaml rbac-manager-allowed-provider-permissions.yaml >"$rbac" ||
	ndie "cannot render the chart's RBAC"
kc apply --server-side -f - >/dev/null <<<'{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "crossplane-system"}}'
kc apply --server-side -f "$rbac" >/dev/null || ndie "cannot apply the chart's RBAC ($rbac)"
# What a node started before the chart's RBAC had.
kc delete clusterrolebinding crossplane-node-admin --ignore-not-found >/dev/null
nlog "the chart's RBAC: $(grep -c '^kind:' "$rbac") objects ($rbac)"

env_common() { # the env of the chart's containers (POD_NAMESPACE, POD_SERVICE_ACCOUNT)
	cat <<-YAML
		        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
		        - {name: POD_SERVICE_ACCOUNT, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}
	YAML
}
secctx='securityContext: {runAsUser: 65532, runAsGroup: 65532, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true}'
kc apply --server-side -f - >/dev/null <<-YAML
	apiVersion: v1
	kind: Service
	metadata: {name: crossplane-webhooks, namespace: crossplane-system}
	spec:
	  selector: {app: crossplane}
	  ports: [{protocol: TCP, port: 9443, targetPort: 9443}]
	---
	apiVersion: v1
	kind: Secret
	metadata: {name: crossplane-root-ca, namespace: crossplane-system}
	type: Opaque
	---
	apiVersion: v1
	kind: Secret
	metadata: {name: crossplane-tls-server, namespace: crossplane-system}
	type: Opaque
	---
	apiVersion: v1
	kind: Secret
	metadata: {name: crossplane-tls-client, namespace: crossplane-system}
	type: Opaque
	---
	apiVersion: apps/v1
	kind: Deployment
	metadata: {name: crossplane, namespace: crossplane-system, labels: {app: crossplane}}
	spec:
	  replicas: 1
	  strategy: {type: Recreate}
	  selector: {matchLabels: {app: crossplane}}
	  template:
	    metadata: {labels: {app: crossplane}}
	    spec:
	      serviceAccountName: crossplane
	      initContainers:
	      - name: crossplane-init
	        image: $IMG
	        imagePullPolicy: Always
	        args: [core, init, "--activation=*"]  # the chart's default activation: every MRD
	        $secctx
	        env:
	$(env_common)
	        - {name: ENABLE_WEBHOOKS, value: "$enable_webhooks"}
	        - {name: WEBHOOK_SERVICE_NAME, value: crossplane-webhooks}
	        - {name: WEBHOOK_SERVICE_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
	        - {name: WEBHOOK_SERVICE_PORT, value: "9443"}
	        - {name: TLS_CA_SECRET_NAME, value: crossplane-root-ca}
	        - {name: TLS_SERVER_SECRET_NAME, value: crossplane-tls-server}
	        - {name: TLS_CLIENT_SECRET_NAME, value: crossplane-tls-client}
	      containers:
	      - name: crossplane
	        image: $IMG
	        imagePullPolicy: Always
	        args: [core, start]
	        $secctx
	        ports:
	        - {name: readyz, containerPort: 8081}
	        - {name: metrics, containerPort: 8080}
	        - {name: webhooks, containerPort: 9443}
	        startupProbe: {failureThreshold: 30, periodSeconds: 2, tcpSocket: {port: readyz}}
	        env:
	$(env_common)
	        - {name: LEADER_ELECTION, value: "true"}
	        - {name: ENABLE_WEBHOOKS, value: "$enable_webhooks"}
	        - {name: WEBHOOK_PORT, value: "9443"}
	        - {name: TLS_SERVER_SECRET_NAME, value: crossplane-tls-server}
	        - {name: TLS_SERVER_CERTS_DIR, value: /tls/server}
	        - {name: TLS_CLIENT_SECRET_NAME, value: crossplane-tls-client}
	        - {name: TLS_CLIENT_CERTS_DIR, value: /tls/client}
	        volumeMounts:
	        - {name: package-cache, mountPath: /cache/xpkg}
	        - {name: function-cache, mountPath: /cache/xfn}
	        - {name: tls-server-certs, mountPath: /tls/server}
	        - {name: tls-client-certs, mountPath: /tls/client}
	      volumes:
	      - {name: package-cache, emptyDir: {sizeLimit: 20Mi}}
	      - {name: function-cache, emptyDir: {sizeLimit: 512Mi}}
	      - {name: tls-server-certs, secret: {secretName: crossplane-tls-server}}
	      - {name: tls-client-certs, secret: {secretName: crossplane-tls-client}}
	---
	apiVersion: apps/v1
	kind: Deployment
	metadata: {name: crossplane-rbac-manager, namespace: crossplane-system, labels: {app: crossplane-rbac-manager}}
	spec:
	  replicas: 1
	  strategy: {type: Recreate}
	  selector: {matchLabels: {app: crossplane-rbac-manager}}
	  template:
	    metadata: {labels: {app: crossplane-rbac-manager}}
	    spec:
	      serviceAccountName: rbac-manager
	      initContainers:
	      - name: crossplane-init
	        image: $IMG
	        imagePullPolicy: Always
	        args: [rbac, init]
	        $secctx
	        env:
	$(env_common)
	      containers:
	      - name: crossplane
	        image: $IMG
	        imagePullPolicy: Always
	        args: [rbac, start, "--provider-clusterrole=crossplane:allowed-provider-permissions"]
	        $secctx
	        env:
	$(env_common)
	        - {name: LEADER_ELECTION, value: "true"}
YAML
for d in crossplane crossplane-rbac-manager; do
	kc -n crossplane-system rollout status "deployment/$d" --timeout=180s >/dev/null ||
		{ kc -n crossplane-system describe pods >&2; ndie "deployment $d not Available (see $LOGS/kubelet.log)"; }
done
nlog "Crossplane $CORE_VERSION core and RBAC manager Available as Deployments ($((SECONDS - T0))s)"
# They run with the chart's RBAC and nothing more: neither may do everything, each may do its job.
can() { kc auth can-i "${@:2}" --as="system:serviceaccount:crossplane-system:$1" 2>/dev/null || true; }
for sa in crossplane rbac-manager; do
	[[ $(can "$sa" '*' '*') == no ]] || ndie "ServiceAccount $sa may do anything: it should have the chart's RBAC only"
done
[[ $(can crossplane create customresourcedefinitions.apiextensions.k8s.io) == yes ]] ||
	ndie "ServiceAccount crossplane may not create CRDs: the chart's ClusterRole crossplane is missing"
[[ $(can crossplane create clusterrolebindings.rbac.authorization.k8s.io) == no ]] ||
	ndie "ServiceAccount crossplane may bind ClusterRoles: more than the chart gives the core"
[[ $(can rbac-manager bind clusterroles.rbac.authorization.k8s.io) == yes ]] ||
	ndie "ServiceAccount rbac-manager may not bind ClusterRoles: the chart's crossplane-rbac-manager is missing"
nlog "the core and the RBAC manager have the chart's RBAC, not cluster-admin"
kc -n crossplane-system get pods -o wide
