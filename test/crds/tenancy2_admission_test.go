package crds

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAdmissionTenancySecondRound covers the admission rules of issue 24 (items 3 and 8):
// imageSources.requireSHA256 is a boolean a config may set, and KVMDomain and SeedVolume names
// are bounded so that the names of their files on the host fit (instead of libvirt's
// ENAMETOOLONG).
func TestAdmissionTenancySecondRound(t *testing.T) {
	ensureNamespace(t, "admission")
	long := strings.Repeat("a", 151)
	maxName := strings.Repeat("a", 150)
	rejected := map[string]struct {
		manifest string
		wantMsg  string
	}{
		"RequireSHA256NotBool": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  imageSources: {requireSHA256: "sometimes"}
`, "spec.imageSources.requireSHA256"},
		"KVMDomainNameTooLong": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: ` + long + `, namespace: admission}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: default}
  forProvider: {baseImageName: debian}
`, "metadata.name must be at most 150 characters"},
		"SeedVolumeNameTooLong": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: ` + long + `, namespace: admission}
spec:
  forProvider: {userData: "#cloud-config\n"}
`, "metadata.name must be at most 150 characters"},
	}
	for name, tc := range rejected {
		t.Run(name, func(t *testing.T) {
			wantRejected(t, kube.Create(testContext(t), mustObject(t, tc.manifest), client.DryRunAll), tc.wantMsg)
		})
	}
	accepted := map[string]string{
		"RequireSHA256": `
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: pinned, namespace: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {name: ssh, key: key}}
  knownHosts: {secretRef: {name: ssh, key: known_hosts}}
  imageSources: {requireSHA256: true}
`,
		"KVMDomainNameAtMax": `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: ` + maxName + `, namespace: admission}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: default}
  forProvider: {baseImageName: debian}
`,
	}
	for name, m := range accepted {
		t.Run(name, func(t *testing.T) {
			if err := kube.Create(testContext(t), mustObject(t, m), client.DryRunAll); err != nil {
				t.Errorf("valid object rejected: %v", err)
			}
		})
	}
}
