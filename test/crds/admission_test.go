package crds

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

const validDomain = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider:
    vcpu: 2
    memoryMiB: 1024
    baseImageRef: {name: debian}
    seedVolumeRef: {name: seed}
`

const validCPC = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {namespace: crossplane-system, name: ssh, key: key}}
  knownHosts: {secretRef: {namespace: crossplane-system, name: ssh, key: known_hosts}}
`

// mustObject parses a YAML manifest; patch, if given, is applied to spec.forProvider (or spec).
func mustObject(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("bad test manifest: %v", err)
	}
	return u
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := kube.Create(testContext(t), ns); err != nil && !kerrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// TestAdmissionAcceptsValid guards the rejection cases below: the objects they start from
// are admitted when left alone.
func TestAdmissionAcceptsValid(t *testing.T) {
	ensureNamespace(t, "admission")
	for _, m := range []string{validDomain, validCPC} {
		if err := kube.Create(testContext(t), mustObject(t, m), client.DryRunAll); err != nil {
			t.Errorf("valid object rejected: %v", err)
		}
	}
}

// TestAdmissionRejects proves the OpenAPI and CEL rules in the CRDs turn bad input away at
// admission, with a message that tells the user what is wrong.
func TestAdmissionRejects(t *testing.T) {
	ensureNamespace(t, "admission")
	cases := map[string]struct {
		manifest string
		wantMsg  string
	}{
		"MalformedSHA256": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: img, namespace: admission}
spec:
  forProvider:
    source: {url: "https://example.org/i.qcow2", sha256: "ABC123"}
`, "spec.forProvider.source.sha256"},
		"NonHTTPURL": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: img, namespace: admission}
spec:
  forProvider:
    source: {url: "file:///etc/passwd"}
`, "spec.forProvider.source.url"},
		"UnknownImageFormat": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: img, namespace: admission}
spec:
  forProvider:
    source: {url: "https://example.org/i.vmdk"}
    format: vmdk
`, `Unsupported value: "vmdk"`},
		"PoolNameWithSlash": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: img, namespace: admission}
spec:
  forProvider:
    source: {url: "https://example.org/i.qcow2"}
    pool: ../etc
`, "spec.forProvider.pool"},
		"UserDataInlineAndSecret": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: seed, namespace: admission}
spec:
  forProvider:
    userData: "#cloud-config\n"
    userDataSecretRef: {name: ud, key: user-data}
`, "set userData or userDataSecretRef, not both"},
		"BadHostname": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: seed, namespace: admission}
spec:
  forProvider:
    hostname: "Proxy_1!"
`, "spec.forProvider.hostname"},
		"ZeroVCPU": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider: {vcpu: 0}
`, "spec.forProvider.vcpu"},
		"TooLittleMemory": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider: {memoryMiB: 64}
`, "spec.forProvider.memoryMiB"},
		"UnknownPowerState": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider: {powerState: Hibernating}
`, `Unsupported value: "Hibernating"`},
		"MulticastMAC": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider: {macAddress: "01:00:5e:00:00:01"}
`, "spec.forProvider.macAddress"},
		"NetworkAndBridge": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider: {network: default, bridge: br0}
`, "set network or bridge, not both"},
		"ZeroDiskSize": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider: {diskSizeGiB: 0}
`, "spec.forProvider.diskSizeGiB"},
		"ProbeWithTwoKinds": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider:
    readinessProbe:
      tcp: {port: 22}
      httpProxy: {url: "http://192.168.122.1:8204/"}
`, "set exactly one of tcp or httpProxy"},
		"CrossNamespaceBaseImageRef": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: vm, namespace: admission}
spec:
  forProvider:
    baseImageRef: {name: debian, namespace: other-team}
`, "baseImageRef must not name a namespace"},
		"SSHWithoutKnownHosts": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {namespace: crossplane-system, name: ssh, key: key}}
`, "transport SSH needs knownHosts to pin the host key"},
		"SSHWithoutHost": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  insecureSkipHostKeyVerification: true
  credentials: {secretRef: {namespace: crossplane-system, name: ssh, key: key}}
`, "transport SSH needs host and credentials"},
		"EvacuateWithoutCordon": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  host: 10.0.0.5
  insecureSkipHostKeyVerification: true
  credentials: {secretRef: {namespace: crossplane-system, name: ssh, key: key}}
  evacuate: true
`, "evacuate needs unschedulable: true"},
		"PortOutOfRange": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  host: 10.0.0.5
  port: 70000
  insecureSkipHostKeyVerification: true
  credentials: {secretRef: {namespace: crossplane-system, name: ssh, key: key}}
`, "spec.port"},
		"ClusterConfigSecretWithoutNamespace": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {name: ssh, key: key}}
  knownHosts: {secretRef: {namespace: crossplane-system, name: ssh, key: known_hosts}}
`, "must name the namespace of its credentials Secrets"},
		"NamespacedConfigReadsOtherNamespace": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: bad, namespace: admission}
spec:
  host: 10.0.0.5
  credentials: {secretRef: {namespace: crossplane-system, name: ssh, key: key}}
  knownHosts: {secretRef: {name: ssh, key: known_hosts}}
`, "reads Secrets from its own namespace"},
		"UnknownDomainType": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  defaults: {domainType: xen}
`, `Unsupported value: "xen"`},
		"DefaultNetworkAndBridge": {`
apiVersion: kvm.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: bad}
spec:
  transport: Unix
  defaults: {network: default, bridge: br0}
`, "defaults.network and defaults.bridge are mutually exclusive"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wantRejected(t, kube.Create(testContext(t), mustObject(t, tc.manifest), client.DryRunAll), tc.wantMsg)
		})
	}
}

// wantRejected fails unless err is admission's Invalid error with a message mentioning wantMsg.
func wantRejected(t *testing.T, err error, wantMsg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want rejection mentioning %q", wantMsg)
	}
	if !kerrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("rejection message %q does not mention %q", err.Error(), wantMsg)
	}
}
