package function

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// obj parses YAML into the JSON-shaped map that structpb and the desired state use (every
// number a float64).
func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("bad test YAML: %v\n%s", err, y)
	}
	m := map[string]any{}
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	return m
}

func st(t *testing.T, y string) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(obj(t, y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testPolicy is the step input of the tests' requests: the defaults, and the origins the
// tests' probes use allowed.
const testPolicy = `
apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1
kind: ProxyPolicy
destinations:
  allowedRanges:
  - {name: libvirt-host, cidr: 192.168.122.1/32}
  - {name: lab, cidr: 10.1.0.0/16}
`

// newRequest builds a RunFunctionRequest from an XR and observed composed resources by name,
// with testPolicy as its input.
func newRequest(t *testing.T, xr string, observed map[string]string) *fnv1.RunFunctionRequest {
	t.Helper()
	req := &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "test"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: st(t, xr)}},
		Input:    st(t, testPolicy),
	}
	if len(observed) > 0 {
		req.Observed.Resources = map[string]*fnv1.Resource{}
		for name, y := range observed {
			req.Observed.Resources[name] = &fnv1.Resource{Resource: st(t, y)}
		}
	}
	// One roomy host, "default", as Crossplane gives it for the function's requirement: a
	// Proxy without spec.host is placed there (placement_test.go tests placement itself).
	withHosts(t, req, hostCPC(t, "default", hostOpts{}))
	return req
}

func run(t *testing.T, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	rsp, err := New(logging.NewNopLogger()).RunFunction(context.Background(), req)
	if err != nil {
		t.Fatalf("RunFunction returned an error (it should report failures as results): %v", err)
	}
	return rsp
}

func desired(rsp *fnv1.RunFunctionResponse) map[string]map[string]any {
	out := map[string]map[string]any{}
	for name, r := range rsp.GetDesired().GetResources() {
		out[name] = r.GetResource().AsMap()
	}
	return out
}

func fatals(rsp *fnv1.RunFunctionResponse) []string {
	var msgs []string
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			msgs = append(msgs, r.GetMessage())
		}
	}
	return msgs
}

func mustNoFatal(t *testing.T, rsp *fnv1.RunFunctionResponse) {
	t.Helper()
	if f := fatals(rsp); len(f) > 0 {
		t.Fatalf("unexpected fatal results: %q", f)
	}
}

// xrStatus is the status the function wrote to the desired XR, without the generations
// (generation_test.go tests those) and the replica counts.
func xrStatus(rsp *fnv1.RunFunctionResponse) map[string]any {
	s := xrStatusAll(rsp)
	delete(s, "generation")
	delete(s, "generations")
	delete(s, "replicas") // replicas_test.go tests these
	delete(s, "readyReplicas")
	return s
}

// xrStatusAll is the whole status the function wrote to the desired XR.
func xrStatusAll(rsp *fnv1.RunFunctionResponse) map[string]any {
	s, _ := rsp.GetDesired().GetComposite().GetResource().AsMap()["status"].(map[string]any)
	return s
}

// userData takes spec.forProvider.userData out of a desired SeedVolume and returns it.
func userData(t *testing.T, seed map[string]any) string {
	t.Helper()
	fp := seed["spec"].(map[string]any)["forProvider"].(map[string]any)
	ud, ok := fp["userData"].(string)
	if !ok {
		t.Fatalf("seed has no string userData: %v", fp)
	}
	delete(fp, "userData")
	return ud
}

const minimalXR = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-a, uid: 1b2c}
spec:
  image: {baseImageName: debian-12}
  probe: {url: "http://192.168.122.1:8204/"}
`

func TestRunFunctionMinimal(t *testing.T) {
	rsp := run(t, newRequest(t, minimalXR, nil))
	mustNoFatal(t, rsp)
	got := desired(rsp)
	ud := userData(t, got[ResourceSeed])
	if !strings.HasPrefix(ud, "#cloud-config\n") {
		t.Errorf("user-data does not start with #cloud-config:\n%s", ud)
	}
	want := map[string]map[string]any{
		ResourceSeed: obj(t, `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: web-seed, namespace: team-a}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: default}
  forProvider: {hostname: web}
`),
		ResourceDomain: obj(t, `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: web, namespace: team-a}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: default}
  forProvider:
    vcpu: 1
    memoryMiB: 512
    baseImageRef: {name: debian-12}
    seedVolumeRef: {name: web-seed}
    readinessProbe:
      httpProxy: {port: 3128, url: "http://192.168.122.1:8204/", expectedStatus: 204}
`),
		ResourceService: serviceObj(t, "team-a", "web-proxy", 3128),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("desired resources (-want +got):\n%s", d)
	}
	wantStatus := map[string]any{"phase": PhaseCreating, "message": "", "secretName": "web-proxy", "host": "default"}
	if d := cmp.Diff(wantStatus, xrStatus(rsp)); d != "" {
		t.Errorf("XR status (-want +got):\n%s", d)
	}
}

const fullXR = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: egress, namespace: team-b}
spec:
  host: lab-host
  image:
    url: https://images.example.org/debian-12.qcow2
    sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  vcpu: 2
  memoryMiB: 1024
  diskSizeGiB: 8
  port: 8080
  allowedCIDRs: [10.1.0.0/16, 192.168.122.0/24, "fd00::/8"]
  squidDirectives:
  - "cache deny all"
  - "acl blocked dstdomain .example.com # runcmd: [evil]"
  - "http_access deny blocked"
  - "- key: value"
  sshAuthorizedKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample ops@example.org"]
  probe: {url: "http://10.1.0.1/generate_204", expectedStatus: 200}
  namespace: other-team
`

func TestRunFunctionFull(t *testing.T) {
	rsp := run(t, newRequest(t, fullXR, nil))
	mustNoFatal(t, rsp)
	got := desired(rsp)
	_ = userData(t, got[ResourceSeed])
	want := map[string]map[string]any{
		ResourceBaseImage: obj(t, `
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: egress-image, namespace: team-b}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: lab-host}
  forProvider:
    source:
      url: https://images.example.org/debian-12.qcow2
      sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
`),
		ResourceSeed: obj(t, `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: egress-seed, namespace: team-b}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: lab-host}
  forProvider: {hostname: egress}
`),
		ResourceDomain: obj(t, `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: egress, namespace: team-b}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: lab-host}
  forProvider:
    vcpu: 2
    memoryMiB: 1024
    diskSizeGiB: 8
    baseImageRef: {name: egress-image}
    seedVolumeRef: {name: egress-seed}
    readinessProbe:
      httpProxy: {port: 8080, url: "http://10.1.0.1/generate_204", expectedStatus: 200}
`),
		ResourceService: serviceObj(t, "team-b", "egress-proxy", 8080),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("desired resources (-want +got):\n%s", d)
	}
}

func TestRunFunctionTCPProbeWithoutProbeURL(t *testing.T) {
	rsp := run(t, newRequest(t, `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-a}
spec:
  image: {baseImageName: debian-12}
  port: 3130
`, nil))
	mustNoFatal(t, rsp)
	fp := desired(rsp)[ResourceDomain]["spec"].(map[string]any)["forProvider"].(map[string]any)
	want := obj(t, `tcp: {port: 3130}`)
	if d := cmp.Diff(want, fp["readinessProbe"]); d != "" {
		t.Errorf("readinessProbe (-want +got):\n%s", d)
	}
}

// parsedUserData is the user-data of fullXR, decoded.
type parsedUserData struct {
	WriteFiles []struct {
		Path        string `json:"path"`
		Owner       string `json:"owner"`
		Permissions string `json:"permissions"`
		Content     string `json:"content"`
	} `json:"write_files"`
	SSHAuthorizedKeys []string   `json:"ssh_authorized_keys"`
	RunCmd            [][]string `json:"runcmd"`
	BootCmd           [][]string `json:"bootcmd"`
}

func TestUserDataOfFullProxy(t *testing.T) {
	rsp := run(t, newRequest(t, fullXR, nil))
	mustNoFatal(t, rsp)
	ud := userData(t, desired(rsp)[ResourceSeed])
	if !strings.HasPrefix(ud, "#cloud-config\n") {
		t.Fatalf("user-data does not start with #cloud-config:\n%s", ud)
	}

	// Only the keys the function writes, whatever the directives hold.
	var top map[string]any
	if err := yaml.UnmarshalStrict([]byte(ud), &top); err != nil {
		t.Fatalf("user-data is not YAML: %v\n%s", err, ud)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	if d := cmp.Diff([]string{"bootcmd", "runcmd", "ssh_authorized_keys", "write_files"}, sorted(keys)); d != "" {
		t.Errorf("top-level keys (-want +got):\n%s", d)
	}

	var cc parsedUserData
	if err := yaml.UnmarshalStrict([]byte(ud), &cc); err != nil {
		t.Fatalf("user-data: %v\n%s", err, ud)
	}
	var paths []string
	for _, f := range cc.WriteFiles {
		paths = append(paths, f.Path)
		if f.Owner != "root:root" || f.Permissions != "0644" {
			t.Errorf("%s: owner %s, permissions %s", f.Path, f.Owner, f.Permissions)
		}
	}
	wantPaths := []string{"/etc/squid/conf.d/proxy.conf"}
	for _, pg := range []string{"LOOPBACK", "LINK_LOCAL", "PRIVATE", "CGNAT", "UNIQUE_LOCAL"} {
		wantPaths = append(wantPaths, "/usr/share/squid/errors/templates/ERR_PROXY_DST_"+pg)
	}
	if d := cmp.Diff(wantPaths, paths); d != "" {
		t.Fatalf("write_files (-want +got):\n%s", d)
	}
	f := cc.WriteFiles[0]
	wantConf := []string{
		"# Written by provider-kvm's function-kvm-proxy. Changes are lost on re-provisioning.",
		"http_port 8080",
		"visible_hostname egress",
		"acl proxy_clients src 10.1.0.0/16",
		"acl proxy_clients src 192.168.122.0/24",
		"acl proxy_clients src fd00::/8",
		"acl proxy_dst_allowed dst 192.168.122.1/32 # libvirt-host",
		"acl proxy_dst_allowed dst 10.1.0.0/16 # lab",
		"acl proxy_dst_loopback dst 127.0.0.0/8 0.0.0.0/8 ::1/128 ::/128",
		"acl proxy_dst_link_local dst 169.254.0.0/16 fe80::/10",
		"acl proxy_dst_private dst 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16",
		"acl proxy_dst_cgnat dst 100.64.0.0/10",
		"acl proxy_dst_unique_local dst fc00::/7",
		"deny_info ERR_PROXY_DST_LOOPBACK proxy_dst_loopback",
		"deny_info ERR_PROXY_DST_LINK_LOCAL proxy_dst_link_local",
		"deny_info ERR_PROXY_DST_PRIVATE proxy_dst_private",
		"deny_info ERR_PROXY_DST_CGNAT proxy_dst_cgnat",
		"deny_info ERR_PROXY_DST_UNIQUE_LOCAL proxy_dst_unique_local",
		"logformat proxy_kvm %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt %err_code",
		"access_log daemon:/var/log/squid/access.log logformat=proxy_kvm",
		"http_access deny !proxy_clients",
		"http_access deny !proxy_dst_allowed proxy_dst_loopback",
		"http_access deny !proxy_dst_allowed proxy_dst_link_local",
		"http_access deny !proxy_dst_allowed proxy_dst_private",
		"http_access deny !proxy_dst_allowed proxy_dst_cgnat",
		"http_access deny !proxy_dst_allowed proxy_dst_unique_local",
		"# The Proxy's squidDirectives: after the platform's deny rules, so they can only narrow access.",
		"cache deny all",
		"acl blocked dstdomain .example.com # runcmd: [evil]",
		"http_access deny blocked",
		"- key: value",
		"http_access allow proxy_clients",
		"",
	}
	if d := cmp.Diff(wantConf, strings.Split(f.Content, "\n")); d != "" {
		t.Errorf("squid configuration (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample ops@example.org"}, cc.SSHAuthorizedKeys); d != "" {
		t.Errorf("ssh_authorized_keys (-want +got):\n%s", d)
	}
	wantCmd := [][]string{
		{"sed", "-i", "-e", `s/^http_port[[:space:]]/# provider-kvm: see conf.d\/proxy.conf: &/`, "/etc/squid/squid.conf"},
		{"systemctl", "restart", "squid"},
		{"systemctl", "enable", "--no-reload", "squid"},
		{"systemctl", "start", "--no-block", "qemu-guest-agent"},
	}
	if d := cmp.Diff(wantCmd, cc.RunCmd); d != "" {
		t.Errorf("runcmd (-want +got):\n%s", d)
	}
}

func TestUserDataWithoutSSHKeys(t *testing.T) {
	rsp := run(t, newRequest(t, minimalXR, nil))
	mustNoFatal(t, rsp)
	ud := userData(t, desired(rsp)[ResourceSeed])
	var cc parsedUserData
	if err := yaml.UnmarshalStrict([]byte(ud), &cc); err != nil {
		t.Fatal(err)
	}
	if cc.SSHAuthorizedKeys != nil {
		t.Errorf("ssh_authorized_keys = %q, want none", cc.SSHAuthorizedKeys)
	}
	// The whole configuration is in testdata/squid (TestSquidConfGolden); here, the rules'
	// order: clients, then destinations, then the allow.
	conf := cc.WriteFiles[0].Content
	var access []string
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "http_access ") || strings.HasPrefix(l, "http_port ") {
			access = append(access, l)
		}
	}
	wantAccess := []string{
		"http_port 3128",
		"http_access deny !proxy_clients",
		"http_access deny !proxy_dst_allowed proxy_dst_loopback",
		"http_access deny !proxy_dst_allowed proxy_dst_link_local",
		"http_access deny !proxy_dst_allowed proxy_dst_private",
		"http_access deny !proxy_dst_allowed proxy_dst_cgnat",
		"http_access deny !proxy_dst_allowed proxy_dst_unique_local",
		"http_access allow proxy_clients",
	}
	if d := cmp.Diff(wantAccess, access); d != "" {
		t.Errorf("squid configuration's access rules (-want +got):\n%s", d)
	}
	if !strings.Contains(conf, "acl proxy_clients src 192.168.0.0/16\n") {
		t.Errorf("squid configuration lacks the default client networks:\n%s", conf)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// observedSecret49 is the proxy's Secret as composed for an earlier address, 192.168.122.49.
const observedSecret49 = `
apiVersion: v1
kind: Secret
metadata: {name: web-proxy, namespace: team-a}
data: {url: aHR0cDovLzE5Mi4xNjguMTIyLjQ5OjMxMjg=, host: MTkyLjE2OC4xMjIuNDk=, port: MzEyOA==}
`

const observedDomainReady = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: web, namespace: team-a}
status:
  atProvider: {state: Running, ipv4: 192.168.122.50, ipSource: lease}
  conditions:
  - {type: Synced, status: "True", reason: ReconcileSuccess}
  - {type: Ready, status: "True", reason: Available}
`

func secretObj(t *testing.T, ns, name, url, host, ip, port string) map[string]any {
	t.Helper()
	m := obj(t, `
apiVersion: v1
kind: Secret
type: Opaque
`)
	m["metadata"] = map[string]any{"name": name, "namespace": ns}
	m["data"] = map[string]any{"url": b64(url), "host": b64(host), "ip": b64(ip), "port": b64(port)}
	return m
}

const observedSeedReady = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: web-seed}
status:
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "True"}]
`

const observedImageReady = `
apiVersion: kvm.crossplane.io/v1alpha1
kind: BaseImage
metadata: {name: web-image}
status:
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "True"}]
`

func TestRunFunctionObserved(t *testing.T) {
	cases := map[string]struct {
		observed   map[string]string
		wantStatus map[string]any
		wantSecret map[string]any // nil: no Secret composed
		wantConn   map[string]string
	}{
		"ReadyWithAddress": {
			observed: map[string]string{ResourceDomain: observedDomainReady},
			wantStatus: map[string]any{
				"phase": PhaseReady, "message": "", "secretName": "web-proxy", "host": "default",
				"ip": "192.168.122.50", "url": "http://web-proxy.team-a.svc:3128",
			},
			wantSecret: secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.50", "3128"),
			wantConn:   map[string]string{"url": "http://web-proxy.team-a.svc:3128", "host": "web-proxy.team-a.svc", "ip": "192.168.122.50", "port": "3128"},
		},
		"AddressButProbeFails": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: Running, ipv4: 192.168.122.51}
  conditions:
  - {type: Synced, status: "True"}
  - {type: Ready, status: "False", reason: Unavailable, message: "readiness probe failing: connection refused"}
`},
			wantStatus: map[string]any{
				"phase": PhaseProbing, "message": "readiness probe failing: connection refused", "secretName": "web-proxy", "host": "default",
				"ip": "192.168.122.51", "url": "http://web-proxy.team-a.svc:3128",
			},
			wantSecret: secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.51", "3128"),
			wantConn:   map[string]string{"url": "http://web-proxy.team-a.svc:3128", "host": "web-proxy.team-a.svc", "ip": "192.168.122.51", "port": "3128"},
		},
		"BootingNoAddress": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: Running}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "False", message: "running; waiting for the guest's IPv4 address"}]
`},
			wantStatus: map[string]any{"phase": PhaseBooting, "message": "running; waiting for the guest's IPv4 address", "secretName": "web-proxy", "host": "default"},
		},
		"NotAnIPv4Address": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: Running, ipv4: "not-an-ip"}
`},
			wantStatus: map[string]any{"phase": PhaseBooting, "message": "", "secretName": "web-proxy", "host": "default"},
		},
		"ReconcileError": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "cannot get BaseImage debian: not found"}]
`, ResourceSeed: observedSeedReady, ResourceBaseImage: observedImageReady},
			wantStatus: map[string]any{"phase": PhaseError, "message": "cannot get BaseImage debian: not found", "secretName": "web-proxy", "host": "default"},
		},
		"ReferenceToAnInputNotObservedYetIsNotAnError": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "cannot resolve references: SeedVolume web-seed not found"}]
`},
			wantStatus: map[string]any{"phase": PhaseCreating, "message": "waiting for its SeedVolume to be created", "secretName": "web-proxy", "host": "default"},
		},
		"ReferenceToAnInputNotReadyYetIsNotAnError": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "cannot resolve references: SeedVolume web-seed is not Ready"}]
`, ResourceSeed: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
metadata: {name: web-seed}
status:
  conditions: [{type: Ready, status: "False", reason: Creating, message: "uploading the seed"}]
`},
			wantStatus: map[string]any{"phase": PhaseCreating, "message": "waiting for SeedVolume web-seed to be Ready: uploading the seed", "secretName": "web-proxy", "host": "default"},
		},
		"WaitingForAnInputIsNotAnError": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {waitingFor: SeedVolume web-seed}
  conditions: [{type: Synced, status: "False", reason: ReconcileError}]
`},
			wantStatus: map[string]any{"phase": PhaseCreating, "message": "waiting for SeedVolume web-seed to be Ready", "secretName": "web-proxy", "host": "default"},
		},
		"WaitingNamesTheInputsOwnMessage": {
			observed: map[string]string{
				ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {waitingFor: SeedVolume web-seed}
  conditions: [{type: Synced, status: "False", reason: ReconcileError}]
`,
				ResourceSeed: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "cannot upload the seed volume: pool default is not active"}]
`},
			wantStatus: map[string]any{"phase": PhaseCreating, "message": "waiting for SeedVolume web-seed to be Ready: cannot upload the seed volume: pool default is not active", "secretName": "web-proxy", "host": "default"},
		},
		"JustComposedIsStillCreating": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status: {}
`},
			wantStatus: map[string]any{"phase": PhaseCreating, "message": "", "secretName": "web-proxy", "host": "default"},
		},
		"ShutOff": {
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: ShutOff}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "False", message: "domain is ShutOff"}]
`},
			wantStatus: map[string]any{"phase": PhaseStopped, "message": "domain is ShutOff", "secretName": "web-proxy", "host": "default"},
		},
		"SecretKeptWhileAddressUnknown": {
			observed: map[string]string{
				ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: Running}
`,
				ResourceSecret: observedSecret49,
			},
			wantStatus: map[string]any{
				"phase": PhaseBooting, "message": "", "secretName": "web-proxy", "host": "default",
				"ip": "192.168.122.49", "url": "http://web-proxy.team-a.svc:3128",
			},
			wantSecret: secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.49", "3128"),
			wantConn:   map[string]string{"url": "http://web-proxy.team-a.svc:3128", "host": "web-proxy.team-a.svc", "ip": "192.168.122.49", "port": "3128"},
		},
		"NewAddressReplacesSecretData": {
			observed: map[string]string{
				ResourceDomain: observedDomainReady,
				ResourceSecret: observedSecret49,
			},
			wantStatus: map[string]any{
				"phase": PhaseReady, "message": "", "secretName": "web-proxy", "host": "default",
				"ip": "192.168.122.50", "url": "http://web-proxy.team-a.svc:3128",
			},
			wantSecret: secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.50", "3128"),
			wantConn:   map[string]string{"url": "http://web-proxy.team-a.svc:3128", "host": "web-proxy.team-a.svc", "ip": "192.168.122.50", "port": "3128"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, newRequest(t, minimalXR, tc.observed))
			mustNoFatal(t, rsp)
			if d := cmp.Diff(tc.wantStatus, xrStatus(rsp)); d != "" {
				t.Errorf("XR status (-want +got):\n%s", d)
			}
			got := desired(rsp)
			secret, ok := got[ResourceSecret]
			if tc.wantSecret == nil {
				if ok {
					t.Errorf("a Secret was composed before any address was known: %v", secret)
				}
			} else if d := cmp.Diff(tc.wantSecret, secret); d != "" {
				t.Errorf("Secret (-want +got):\n%s", d)
			}
			if _, ok := got[ResourceDomain]; !ok {
				t.Errorf("no desired KVMDomain")
			}
			if _, ok := got[ResourceService]; !ok {
				t.Errorf("no desired Service")
			}
			// The EndpointSlice follows the Secret: composed once an address is known, ready
			// while the guest is.
			eps, ok := got[ResourceEndpoints]
			switch {
			case tc.wantSecret == nil && ok:
				t.Errorf("an EndpointSlice was composed before any address was known: %v", eps)
			case tc.wantSecret != nil:
				want := endpointSliceObj(t, "team-a", "web-proxy", tc.wantStatus["ip"].(string), 3128, tc.wantStatus["phase"] == PhaseReady)
				if d := cmp.Diff(want, eps); d != "" {
					t.Errorf("EndpointSlice (-want +got):\n%s", d)
				}
			}
			// An existing Secret is ready; the rest is left to function-auto-ready.
			for name, r := range rsp.GetDesired().GetResources() {
				_, observed := tc.observed[name]
				want := fnv1.Ready_READY_UNSPECIFIED
				if (name == ResourceSecret || name == ResourceService || name == ResourceEndpoints) && observed {
					want = fnv1.Ready_READY_TRUE
				}
				if r.GetReady() != want {
					t.Errorf("%s ready = %v, want %v", name, r.GetReady(), want)
				}
			}
			conn := map[string]string{}
			for k, v := range rsp.GetDesired().GetComposite().GetConnectionDetails() {
				conn[k] = string(v)
			}
			if tc.wantConn == nil {
				tc.wantConn = map[string]string{}
			}
			if d := cmp.Diff(tc.wantConn, conn); d != "" {
				t.Errorf("connection details (-want +got):\n%s", d)
			}
		})
	}
}

func TestRunFunctionSecretFollowsPort(t *testing.T) {
	xr := strings.Replace(minimalXR, "spec:\n", "spec:\n  port: 8080\n", 1)
	rsp := run(t, newRequest(t, xr, map[string]string{ResourceDomain: observedDomainReady}))
	mustNoFatal(t, rsp)
	want := secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:8080", "web-proxy.team-a.svc", "192.168.122.50", "8080")
	if d := cmp.Diff(want, desired(rsp)[ResourceSecret]); d != "" {
		t.Errorf("Secret (-want +got):\n%s", d)
	}
}

func TestRunFunctionInvalid(t *testing.T) {
	const head = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-a}
`
	cases := map[string]struct {
		xr   string
		want []string // substrings of the fatal message
		// hidden are substrings the fatal message must not repeat (secrets).
		hidden []string
	}{
		"BadCIDR": {
			xr:   head + "spec: {image: {baseImageName: deb}, allowedCIDRs: [10.0.0.0/8, 10.0.0.300/8]}",
			want: []string{"spec.allowedCIDRs[1]", `"10.0.0.300/8" is not a CIDR`},
		},
		"CIDRWithoutMask": {
			xr:   head + "spec: {image: {baseImageName: deb}, allowedCIDRs: [10.0.0.1]}",
			want: []string{"spec.allowedCIDRs[0]"},
		},
		"NoCIDRs": {
			xr:   head + "spec: {image: {baseImageName: deb}, allowedCIDRs: []}",
			want: []string{"spec.allowedCIDRs: must list at least one network"},
		},
		"PortZero": {
			xr:   head + "spec: {image: {baseImageName: deb}, port: 0}",
			want: []string{"spec.port: must be between 1 and 65535, got 0"},
		},
		"PortTooHigh": {
			xr:   head + "spec: {image: {baseImageName: deb}, port: 70000}",
			want: []string{"spec.port: must be between 1 and 65535, got 70000"},
		},
		"BothImageWays": {
			xr: head + "spec: {image: {baseImageName: deb, url: 'https://x.example/a.qcow2', " +
				"sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}}",
			want: []string{"spec.image: set either baseImageName", "not both"},
		},
		"NeitherImageWay": {
			xr:   head + "spec: {image: {}}",
			want: []string{"spec.image: set either baseImageName"},
		},
		"NoImageAtAll": {
			xr:   head + "spec: {vcpu: 1}",
			want: []string{"spec.image: set either baseImageName"},
		},
		"URLWithoutSHA256": {
			xr:   head + "spec: {image: {url: 'https://x.example/a.qcow2'}}",
			want: []string{"spec.image.sha256: must be 64 lower-case hex characters"},
		},
		"FTPImageURL": {
			xr: head + "spec: {image: {url: 'ftp://x.example/a.qcow2', " +
				"sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}}",
			want: []string{"spec.image.url"},
		},
		"DirectiveWithNewline": {
			xr:   head + `spec: {image: {baseImageName: deb}, squidDirectives: ["cache deny all", "http_access allow all\nruncmd: [[rm, -rf, /]]"]}`,
			want: []string{"spec.squidDirectives[1]: must be a single line"},
		},
		"DirectiveWithCarriageReturn": {
			xr:   head + `spec: {image: {baseImageName: deb}, squidDirectives: ["a\rb"]}`,
			want: []string{"spec.squidDirectives[0]: must be a single line"},
		},
		"DirectiveWithControlCharacter": {
			xr:   head + `spec: {image: {baseImageName: deb}, squidDirectives: ["a\u2028b"]}`,
			want: []string{"spec.squidDirectives[0]: must not contain control characters"},
		},
		"SSHKeyWithNewline": {
			xr:   head + `spec: {image: {baseImageName: deb}, sshAuthorizedKeys: ["ssh-ed25519 AAAA\nssh-rsa BBBB"]}`,
			want: []string{"spec.sshAuthorizedKeys[0]: must be a single line"},
		},
		"SSHPrivateKeyPEM": {
			xr:     head + `spec: {image: {baseImageName: deb}, sshAuthorizedKeys: ["ssh-ed25519 AAAAok ops", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQSECRETSECRET\n-----END OPENSSH PRIVATE KEY-----"]}`,
			want:   []string{"spec.sshAuthorizedKeys[1]: is a private key, which is refused (its value is not repeated here)"},
			hidden: []string{"SECRETSECRET", "BEGIN OPENSSH"},
		},
		"SSHPrivateKeyOneLine": {
			xr:     head + `spec: {image: {baseImageName: deb}, sshAuthorizedKeys: ["b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQSECRETSECRET"]}`,
			want:   []string{"spec.sshAuthorizedKeys[0]: is a private key"},
			hidden: []string{"SECRETSECRET"},
		},
		"ProbeHTTPS": {
			xr:   head + "spec: {image: {baseImageName: deb}, probe: {url: 'https://x.example/'}}",
			want: []string{"spec.probe.url"},
		},
		"ProbeStatus": {
			xr:   head + "spec: {image: {baseImageName: deb}, probe: {url: 'http://x.example/', expectedStatus: 99}}",
			want: []string{"spec.probe.expectedStatus"},
		},
		"VCPUZero": {
			xr:   head + "spec: {image: {baseImageName: deb}, vcpu: 0}",
			want: []string{"spec.vcpu: must be between 1 and 256, got 0"},
		},
		"VCPUNotANumber": {
			xr:   head + "spec: {image: {baseImageName: deb}, vcpu: two}",
			want: []string{"cannot read spec"},
		},
		"MemoryTooSmall": {
			xr:   head + "spec: {image: {baseImageName: deb}, memoryMiB: 64}",
			want: []string{"spec.memoryMiB"},
		},
		"BadHost": {
			xr:   head + "spec: {image: {baseImageName: deb}, host: Lab_Host}",
			want: []string{"spec.host"},
		},
		"EveryProblemAtOnce": {
			xr:   head + "spec: {image: {}, port: -1, allowedCIDRs: [nope]}",
			want: []string{"spec.image:", "spec.port:", "spec.allowedCIDRs[0]:", "Proxy team-a/web"},
		},
		"LegacyXRWithoutClaim": {
			xr: `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: XProxy
metadata: {name: web-x7k2p}
spec: {image: {baseImageName: deb}, namespace: team-a}
`,
			want: []string{"no spec.claimRef.namespace"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, newRequest(t, tc.xr, map[string]string{ResourceDomain: observedDomainReady}))
			f := fatals(rsp)
			if len(f) != 1 {
				t.Fatalf("want one fatal result, got %q", f)
			}
			for _, w := range tc.want {
				if !strings.Contains(f[0], w) {
					t.Errorf("fatal message %q does not contain %q", f[0], w)
				}
			}
			for _, h := range tc.hidden {
				if strings.Contains(f[0], h) {
					t.Errorf("fatal message %q repeats %q", f[0], h)
				}
			}
			if n := len(rsp.GetDesired().GetResources()); n != 0 {
				t.Errorf("want no desired resources, got %d: %v", n, desired(rsp))
			}
			if s := xrStatus(rsp); s != nil {
				t.Errorf("want no desired XR status, got %v", s)
			}
		})
	}
}

func TestRunFunctionLegacyClaim(t *testing.T) {
	const xr = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: XProxy
metadata: {name: web-x7k2p}
spec:
  claimRef: {apiVersion: platform.kvm.crossplane.io/v1alpha1, kind: ProxyClaim, name: web, namespace: team-c}
  namespace: kube-system
  targetNamespace: kube-system
  image:
    url: https://images.example.org/debian-12.qcow2
    sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  probe: {url: "http://192.168.122.1:8204/"}
`
	rsp := run(t, newRequest(t, xr, map[string]string{ResourceDomain: observedDomainReady}))
	mustNoFatal(t, rsp)
	got := desired(rsp)
	want := map[string]string{
		// Named after the claim, which is what the team sees, not the generated XR name.
		ResourceBaseImage: "team-c/web-image",
		ResourceSeed:      "team-c/web-seed",
		ResourceDomain:    "team-c/web",
		ResourceSecret:    "team-c/web-proxy",
		ResourceService:   "team-c/web-proxy",
		ResourceEndpoints: "team-c/web-proxy",
	}
	gotNames := map[string]string{}
	for name, o := range got {
		md := o["metadata"].(map[string]any)
		gotNames[name] = md["namespace"].(string) + "/" + md["name"].(string)
	}
	if d := cmp.Diff(want, gotNames); d != "" {
		t.Errorf("composed namespace/name (-want +got):\n%s", d)
	}
	fp := got[ResourceDomain]["spec"].(map[string]any)["forProvider"].(map[string]any)
	if d := cmp.Diff(obj(t, "{name: web-image}"), fp["baseImageRef"]); d != "" {
		t.Errorf("baseImageRef (-want +got):\n%s", d)
	}
	if s := xrStatus(rsp); s["url"] != "http://web-proxy.team-c.svc:3128" || s["ip"] != "192.168.122.50" || s["phase"] != PhaseReady {
		t.Errorf("XR status = %v", s)
	}
}

func TestRunFunctionKeepsOtherDesiredResources(t *testing.T) {
	req := newRequest(t, minimalXR, nil)
	req.Desired = &fnv1.State{Resources: map[string]*fnv1.Resource{
		"extra": {Resource: st(t, "{apiVersion: v1, kind: ConfigMap, metadata: {name: x}}")},
	}}
	rsp := run(t, req)
	mustNoFatal(t, rsp)
	if _, ok := desired(rsp)["extra"]; !ok {
		t.Errorf("a desired resource of an earlier step was dropped")
	}

	// A fatal result leaves the earlier steps' desired state exactly as it came.
	req = newRequest(t, strings.Replace(minimalXR, "spec:\n", "spec:\n  port: 0\n", 1), nil)
	req.Desired = &fnv1.State{Resources: map[string]*fnv1.Resource{
		"extra": {Resource: st(t, "{apiVersion: v1, kind: ConfigMap, metadata: {name: x}}")},
	}}
	rsp = run(t, req)
	if len(fatals(rsp)) != 1 {
		t.Fatalf("want a fatal result, got %v", rsp.GetResults())
	}
	want := map[string]map[string]any{"extra": obj(t, "{apiVersion: v1, kind: ConfigMap, metadata: {name: x}}")}
	if d := cmp.Diff(want, desired(rsp)); d != "" {
		t.Errorf("desired resources after a fatal result (-want +got):\n%s", d)
	}
}

func TestNamesFor(t *testing.T) {
	if d := cmp.Diff(Names{Domain: "web", Seed: "web-seed", BaseImage: "web-image", Secret: "web-proxy", Service: "web-proxy"}, NamesFor("web")); d != "" {
		t.Errorf("NamesFor(web) (-want +got):\n%s", d)
	}
	long := strings.Repeat("a", 60) + "-x"
	other := strings.Repeat("a", 60) + "-y"
	n, o := NamesFor(long), NamesFor(other)
	for _, s := range []string{n.Domain, n.Seed, n.BaseImage, n.Secret, n.Service} {
		if len(s) > maxNameLen {
			t.Errorf("%q is longer than %d", s, maxNameLen)
		}
		if strings.Contains(s, "--") || strings.HasPrefix(s, "-") {
			t.Errorf("%q is not a tidy name", s)
		}
	}
	if n.Seed == o.Seed || n.Domain == o.Domain {
		t.Errorf("different long names collide: %v %v", n, o)
	}
	if d := cmp.Diff(n, NamesFor(long)); d != "" {
		t.Errorf("names are not deterministic: %s", d)
	}
	if !strings.HasSuffix(n.Seed, "-seed") {
		t.Errorf("%q lost its suffix", n.Seed)
	}
}

func TestValidateDefaults(t *testing.T) {
	p, err := ProxySpec{Image: ImageSpec{BaseImageName: "deb"}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if p.Host != "" || p.VCPU != 1 || p.MemoryMiB != 512 || p.Port != 3128 || p.DiskSizeGiB != nil || p.ProbeURL != "" {
		t.Errorf("defaults: %+v", p)
	}
	var cidrs []string
	for _, c := range p.AllowedCIDRs {
		cidrs = append(cidrs, c.String())
	}
	if d := cmp.Diff(DefaultAllowedCIDRs, cidrs); d != "" {
		t.Errorf("allowedCIDRs (-want +got):\n%s", d)
	}
	p, err = ProxySpec{Image: ImageSpec{BaseImageName: "deb"}, Probe: &ProbeSpec{URL: "http://x/"}}.Validate()
	if err != nil || p.ProbeStatus != 204 {
		t.Errorf("probe default: %+v %v", p, err)
	}
	// A host address inside a network is masked to the network.
	p, err = ProxySpec{Image: ImageSpec{BaseImageName: "deb"}, AllowedCIDRs: []string{"10.1.2.3/8"}}.Validate()
	if err != nil || p.AllowedCIDRs[0].String() != "10.0.0.0/8" {
		t.Errorf("masking: %+v %v", p.AllowedCIDRs, err)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestUserDataRoundTrip: whatever single-line directives a user writes, the YAML encoder
// keeps them as text of the one file (exactly), and the cloud-config keeps its three keys.
func TestUserDataRoundTrip(t *testing.T) {
	directives := []string{
		"trailing space ", "\tleading tab", "# a comment", "---", "...", "- runcmd: [reboot]",
		"write_files: []", `"quoted" 'single'`, "key: value # comment", "{flow: map}", "[flow, seq]",
		"&anchor *alias !!tag", "%YAML 1.2", "| literal", "> folded", "ünïcödé ✓", "@ ` reserved",
		"  ", "",
	}
	p, err := ProxySpec{Image: ImageSpec{BaseImageName: "deb"}, SquidDirectives: directives}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ud, err := UserData(p, "web")
	if err != nil {
		t.Fatal(err)
	}
	var cc parsedUserData
	if err := yaml.UnmarshalStrict([]byte(ud), &cc); err != nil {
		t.Fatalf("user-data: %v\n%s", err, ud)
	}
	if d := cmp.Diff(SquidConf(p, "web"), cc.WriteFiles[0].Content); d != "" {
		t.Errorf("squid configuration after a YAML round trip (-want +got):\n%s\n%s", d, ud)
	}
	var top map[string]any
	if err := yaml.Unmarshal([]byte(ud), &top); err != nil {
		t.Fatal(err)
	}
	if len(top) != 3 { // bootcmd, runcmd, write_files (no ssh keys)
		t.Errorf("top-level keys: %v", top)
	}
}

func endpointSliceObj(t *testing.T, ns, name, ip string, port int64, ready bool) map[string]any {
	t.Helper()
	m := obj(t, fmt.Sprintf(`
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
addressType: IPv4
endpoints:
- addresses: [%q]
  conditions: {ready: %t}
ports:
- {name: http-proxy, protocol: TCP, port: %d}
`, ip, ready, port))
	m["metadata"] = map[string]any{"name": name, "namespace": ns, "labels": map[string]any{
		"kubernetes.io/service-name":             name,
		"endpointslice.kubernetes.io/managed-by": ManagedBy,
	}}
	return m
}

func serviceObj(t *testing.T, ns, name string, port int64) map[string]any {
	t.Helper()
	return obj(t, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  type: ClusterIP
  ports:
  - {name: http-proxy, protocol: TCP, port: %d, targetPort: %d}
`, name, ns, port, port))
}

func TestServiceName(t *testing.T) {
	cases := map[string]struct {
		xr   string
		want string
	}{
		"Plain":            {xr: "web", want: "web-proxy"},
		"StartsWithADigit": {xr: "1web", want: "p" + hash12("1web") + "-proxy"},
		"HasDots":          {xr: "web.team", want: "p" + hash12("web.team") + "-proxy"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := serviceName(tc.xr)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("serviceName(%q) (-want +got):\n%s", tc.xr, d)
			}
			if msgs := validation.IsDNS1035Label(got); len(msgs) > 0 {
				t.Errorf("serviceName(%q) = %q is not a DNS-1035 label: %v", tc.xr, got, msgs)
			}
		})
	}
	long := serviceName(strings.Repeat("a", 70))
	if len(validation.IsDNS1035Label(long)) > 0 {
		t.Errorf("a long name gives %q", long)
	}
}

func hash12(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

func TestRunFunctionOwnImageNotObservedYet(t *testing.T) {
	observed := map[string]string{
		ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "cannot resolve references: BaseImage egress-image not found"}]
`,
		ResourceSeed: observedSeedReady,
	}
	rsp := run(t, newRequest(t, fullXR, observed))
	mustNoFatal(t, rsp)
	st := xrStatus(rsp)
	if st["phase"] != PhaseCreating || st["message"] != "waiting for its BaseImage to be created" {
		t.Errorf("phase %v, message %q; want Creating, waiting for its BaseImage to be created", st["phase"], st["message"])
	}
}
