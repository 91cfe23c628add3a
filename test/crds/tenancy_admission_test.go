package crds

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAdmissionRejectsTenancyInput covers the admission rules that keep namespaces apart and
// bound outside input: transports and imports a namespaced ProviderConfig may not use, and the
// image source policy's shape.
func TestAdmissionRejectsTenancyInput(t *testing.T) {
	ensureNamespace(t, "admission")
	cases := map[string]struct {
		manifest string
		wantMsg  string
	}{
		"NamespacedConfigUnixTransport": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: bad, namespace: admission}
spec:
  transport: Unix
`, "a ProviderConfig cannot use transport Unix"},
		"NamespacedConfigImportsOtherNamespaces": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: bad, namespace: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {name: ssh, key: key}}
  knownHosts: {secretRef: {name: ssh, key: known_hosts}}
  imports: {allowed: true, namespaces: [team-b]}
`, "allows imports in its own namespace only"},
		"ImageRuleWithoutDestination": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {allow: [{ports: [443]}]}
`, "a rule sets at least one of cidr, host or urlPrefix"},
		"ImageRuleBadCIDR": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {deny: [{cidr: "10.0.0.0/33"}]}
`, "cidr must be an IP prefix"},
		"ImageRuleBadHost": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {allow: [{host: "mirror/evil"}]}
`, "spec.imageSources.allow[0].host"},
		"ImageRulePortOutOfRange": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {allow: [{host: mirror.example.org, ports: [70000]}]}
`, "spec.imageSources.allow[0].ports[0]"},
		"ImageRuleURLPrefixNotHTTP": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {allow: [{urlPrefix: "file:///etc/"}]}
`, "spec.imageSources.allow[0].urlPrefix"},
		"ImageMaxSizeZero": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {maxImageSizeMiB: 0}
`, "spec.imageSources.maxImageSizeMiB"},
		"HeaderTimeoutTooLong": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {headerTimeoutSeconds: 100000}
`, "spec.imageSources.headerTimeoutSeconds"},
		"StallTimeoutZero": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {stallTimeoutSeconds: 0}
`, "spec.imageSources.stallTimeoutSeconds"},
		"NamespacedConfigAllowedNamespaces": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: bad, namespace: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {name: ssh, key: key}}
  knownHosts: {secretRef: {name: ssh, key: known_hosts}}
  allowedNamespaces: {names: [team-b]}
`, "a ProviderConfig serves its own namespace only: omit allowedNamespaces"},
		"NamespacedConfigGrantToOtherNamespaces": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: bad, namespace: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {name: ssh, key: key}}
  knownHosts: {secretRef: {name: ssh, key: known_hosts}}
  attachments: [{namespaces: {names: [team-b]}, pools: [fast]}]
`, "omit attachments[].namespaces"},
		"AllowedNamespacesEmpty": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  allowedNamespaces: {}
`, "name namespaces or select them by label"},
		"GrantOfNothing": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  attachments: [{namespaces: {names: [team-a]}}]
`, "a grant names at least one network, bridge or pool"},
		"GrantBadPoolName": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  attachments: [{pools: ["../etc"]}]
`, "spec.attachments[0].pools[0]"},
		"GrantBridgeCIDRNotIPv4": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  attachments: [{bridges: [{name: br0, cidrs: ["fd00::/64"]}]}]
`, "cidrs are IPv4 prefixes"},
		"GrantBridgeNameTooLong": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  attachments: [{bridges: [{name: a-bridge-name-too-long}]}]
`, "spec.attachments[0].bridges[0].name"},
		"DefaultBridgeCIDRNotACIDR": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  defaults: {bridge: br0, bridgeCIDRs: ["10.0.0.300/24"]}
`, "bridgeCIDRs are IPv4 prefixes"},
		"AllowedNamespacesBadSelector": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  allowedNamespaces: {selector: {matchExpressions: [{key: tier}]}}
`, "spec.allowedNamespaces.selector.matchExpressions[0].operator"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wantRejected(t, kube.Create(testContext(t), mustObject(t, tc.manifest), client.DryRunAll), tc.wantMsg)
		})
	}
}

// TestAdmissionAcceptsTenancyBounds: a ClusterProviderConfig with every new bound, and a
// ProviderConfig granting its own namespace more, are admitted.
func TestAdmissionAcceptsTenancyBounds(t *testing.T) {
	ensureNamespace(t, "admission")
	for name, manifest := range map[string]string{
		"ClusterProviderConfig": `
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bounded}
spec:
  transport: Unix
  defaults: {pool: default, bridge: br0, bridgeCIDRs: ["192.168.50.0/24"]}
  allowedNamespaces:
    names: [ops]
    selector: {matchLabels: {kvm.example.org/host: gold}}
  attachments:
  - networks: [default]
  - namespaces: {selector: {matchExpressions: [{key: team, operator: In, values: [db]}]}}
    bridges: [{name: br-lan, cidrs: ["10.77.0.0/24"]}]
    pools: [fast]
`,
		"ProviderConfig": `
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: own, namespace: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {name: ssh, key: key}}
  knownHosts: {secretRef: {name: ssh, key: known_hosts}}
  attachments: [{networks: [lab], pools: [fast]}]
`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := kube.Create(testContext(t), mustObject(t, manifest), client.DryRunAll); err != nil {
				t.Errorf("refused, want it admitted: %v", err)
			}
		})
	}
}

const (
	immutableDomain = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: NAME, namespace: immutable}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: default}
  forProvider:
    baseImageName: debian
    pool: default
    network: default
    macAddress: "52:54:00:00:00:01"
    firmware: uefi
    domainType: qemu
    diskSizeGiB: 8
`
	immutableImage = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: NAME, namespace: immutable}
spec:
  forProvider:
    source: {url: "https://example.org/i.qcow2"}
    pool: default
`
	immutableSeed = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: NAME, namespace: immutable}
spec:
  forProvider:
    userData: "#cloud-config\n"
`
)

// TestAdmissionImmutableFields proves that fields the objects on the host were made with cannot
// change after creation (the change is refused with a message to create a new resource), that
// diskSizeGiB may grow but not shrink, and that fields which may change still can.
func TestAdmissionImmutableFields(t *testing.T) {
	ensureNamespace(t, "immutable")
	forProvider := func(u *unstructured.Unstructured) map[string]any {
		return u.Object["spec"].(map[string]any)["forProvider"].(map[string]any)
	}
	set := func(k string, v any) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { forProvider(u)[k] = v }
	}
	unset := func(k string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { delete(forProvider(u), k) }
	}
	pcRef := func(u *unstructured.Unstructured) {
		u.Object["spec"].(map[string]any)["providerConfigRef"] = map[string]any{"kind": "ClusterProviderConfig", "name": "other-host"}
	}
	cases := map[string]struct {
		manifest string
		change   func(*unstructured.Unstructured)
		wantMsg  string // "" means the change is admitted
	}{
		"DomainPool":              {immutableDomain, set("pool", "fast"), "pool cannot change after creation"},
		"DomainPoolUnset":         {immutableDomain, unset("pool"), "pool cannot change after creation"},
		"DomainNetwork":           {immutableDomain, set("network", "other"), "network cannot change after creation"},
		"DomainBridgeAdded":       {immutableDomain, func(u *unstructured.Unstructured) { unset("network")(u); set("bridge", "br0")(u) }, "cannot change after creation"},
		"DomainMAC":               {immutableDomain, set("macAddress", "52:54:00:00:00:02"), "macAddress cannot change after creation"},
		"DomainFirmware":          {immutableDomain, set("firmware", "bios"), "firmware cannot change after creation"},
		"DomainType":              {immutableDomain, set("domainType", "kvm"), "domainType cannot change after creation"},
		"DomainDiskShrinks":       {immutableDomain, set("diskSizeGiB", int64(4)), "diskSizeGiB can grow but never shrink"},
		"DomainDiskUnset":         {immutableDomain, unset("diskSizeGiB"), "diskSizeGiB can grow but never shrink"},
		"DomainProviderConfigRef": {immutableDomain, pcRef, "providerConfigRef cannot change after creation"},
		"DomainDiskGrows":         {immutableDomain, set("diskSizeGiB", int64(16)), ""},
		"DomainVCPUChanges":       {immutableDomain, set("vcpu", int64(4)), ""},
		"ImagePool":               {immutableImage, set("pool", "fast"), "pool cannot change after creation"},
		"ImageFormat":             {immutableImage, set("format", "raw"), "format cannot change after creation"},
		"ImageProviderConfigRef":  {immutableImage, pcRef, "providerConfigRef cannot change after creation"},
		"ImageURLChanges":         {immutableImage, set("source", map[string]any{"url": "https://example.org/j.qcow2"}), ""},
		"SeedPoolAdded":           {immutableSeed, set("pool", "fast"), "pool cannot change after creation"},
		"SeedProviderConfigRef":   {immutableSeed, pcRef, "providerConfigRef cannot change after creation"},
		"SeedUserDataChanges":     {immutableSeed, set("userData", "#cloud-config\nhostname: x\n"), ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			u := mustObject(t, strings.ReplaceAll(tc.manifest, "NAME", strings.ToLower(name)))
			if err := kube.Create(ctx, u); err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = kube.Delete(ctx, u) })
			tc.change(u)
			err := kube.Update(ctx, u, client.DryRunAll)
			if tc.wantMsg == "" {
				if err != nil {
					t.Errorf("change refused, want it admitted: %v", err)
				}
				return
			}
			wantRejected(t, err, tc.wantMsg)
		})
	}
}
