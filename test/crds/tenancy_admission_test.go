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
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wantRejected(t, kube.Create(testContext(t), mustObject(t, tc.manifest), client.DryRunAll), tc.wantMsg)
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
