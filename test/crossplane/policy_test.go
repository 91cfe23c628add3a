package crossplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// strictPolicy is a platform policy tighter than the shipped one, for the cases of the rules a
// Proxy can break.
const strictPolicy = `
apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1
kind: ProxyPolicy
limits: {maxVCPU: 2, maxMemoryMiB: 1024, maxDiskSizeGiB: 10, maxReplicas: 2}
clientCIDRs: [10.0.0.0/8, 192.168.122.0/24]
allowSquidDirectives: false
allowSSHKeys: false
destinations:
  allowedRanges:
  - {name: libvirt-host, cidr: 192.168.122.1/32}
`

// policyProxy is a Proxy of team-a whose spec ends with extra.
func policyProxy(name, extra string) string {
	return `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: ` + name + `, namespace: team-a}
spec:
  image: {baseImageName: debian-12}
  probe: {url: "http://192.168.122.1:8204/"}
` + extra
}

// policyCases are TestRender's cases of the platform policy: one per rule a Proxy can break,
// each refused with a fatal result whose message names the field and the limit, and nothing
// composed; one Proxy within the shipped policy that narrows its destinations.
func policyCases() []renderCase {
	refused := func(name, policy, extra string, want ...string) renderCase {
		return renderCase{
			name: "policy-" + name, composition: compositionV2, xrd: xrdV2, policy: policy,
			xrYAML: policyProxy(name, extra), wantFail: true,
			check: func(t *testing.T, out rendered) {
				prefix := "Proxy team-a/" + name + " breaks the platform's policy: "
				if name == "domain-wildcard" { // the grammar is the Proxy API's own, whatever the policy
					prefix = "invalid Proxy team-a/" + name + ": "
				}
				for _, w := range append([]string{prefix}, want...) {
					if !strings.Contains(out.stderr, w) {
						t.Errorf("render's error does not say %q:\n%s", w, out.stderr)
					}
				}
				for _, o := range out.objects {
					if o.GetKind() != "Result" {
						t.Errorf("a fatal result composed %s %s; want nothing", o.GetKind(), o.GetName())
					}
				}
			},
		}
	}
	return []renderCase{
		refused("max-vcpu", strictPolicy, "  allowedCIDRs: [10.0.0.0/8]\n  vcpu: 3\n",
			"spec.vcpu: 3 is more than the platform allows per Proxy (2, policy limits.maxVCPU)"),
		refused("max-memory", strictPolicy, "  allowedCIDRs: [10.0.0.0/8]\n  memoryMiB: 2048\n",
			"spec.memoryMiB: 2048 is more than the platform allows per Proxy (1024, policy limits.maxMemoryMiB)"),
		refused("max-disk", strictPolicy, "  allowedCIDRs: [10.0.0.0/8]\n  diskSizeGiB: 20\n",
			"spec.diskSizeGiB: 20 is more than the platform allows per Proxy (10, policy limits.maxDiskSizeGiB)"),
		refused("max-replicas", strictPolicy, "  allowedCIDRs: [10.0.0.0/8]\n  replicas: 3\n",
			"spec.replicas: 3 is more than the platform allows per Proxy (2, policy limits.maxReplicas)"),
		refused("client-cidrs", strictPolicy, "  allowedCIDRs: [192.168.122.0/24, 172.16.0.0/12]\n",
			"spec.allowedCIDRs[1]: 172.16.0.0/12 is not inside the client networks the platform allows (10.0.0.0/8, 192.168.122.0/24, policy clientCIDRs)"),
		refused("squid-directives", strictPolicy, "  allowedCIDRs: [10.0.0.0/8]\n  squidDirectives: [cache deny all]\n",
			"spec.squidDirectives: the platform does not allow squid directives (policy allowSquidDirectives: false); remove them"),
		refused("ssh-keys", strictPolicy, "  allowedCIDRs: [10.0.0.0/8]\n  sshAuthorizedKeys: [ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOe6wjTrmbGaLMHqEuw8zQTpwDkvyzCZVTPiNvVnCrTg ops@example.org]\n",
			"spec.sshAuthorizedKeys: the platform does not allow SSH keys (policy allowSSHKeys: false); remove them"),
		refused("directive-widens", "", "  squidDirectives: [acl proxy_clients src all, http_access allow all]\n",
			`spec.squidDirectives[0]: acl "proxy_clients" is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise`),
		refused("probe-denied", "", "  probe: {url: \"http://169.254.169.254/latest/meta-data/\"}\n",
			"spec.probe.url: the probe's address 169.254.169.254 is a link-local address (169.254.169.254 is the cloud metadata address), which the platform denies (policy destinations.deniedRanges link-local, no allowedRanges entry holds it), so the proxy would refuse its own readiness probe"),
		refused("domain-wildcard", "", "  allowedDomains: [.debian.org, \"debian.*\"]\n",
			`spec.allowedDomains[1]: "debian.*" has a '*': squid's dstdomain has no such wildcard; write .example.com for example.com and every name under it`),
		{
			name: "policy-budget", composition: compositionV2, xrd: xrdV2, wantFail: true,
			policy: strictPolicy + "budgets:\n  namespaces:\n  - {namespace: team-a, maxVCPU: 3}\n",
			xrYAML: strings.Replace(policyProxy("late", "  allowedCIDRs: [10.0.0.0/8]\n  vcpu: 2\n"), "namespace: team-a}", "namespace: team-a, creationTimestamp: \"2026-12-01T10:00:05Z\"}", 1),
			// An earlier Proxy of team-a holds 2 vCPUs; another namespace's does not count.
			required: `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: early, namespace: team-a, creationTimestamp: "2026-12-01T10:00:00Z"}
spec: {image: {baseImageName: debian-12}, vcpu: 2}
---
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: elsewhere, namespace: team-b, creationTimestamp: "2026-12-01T09:00:00Z"}
spec: {image: {baseImageName: debian-12}, vcpu: 2}
`,
			check: func(t *testing.T, out rendered) {
				if w := "Proxy team-a/late breaks the platform's policy: spec.vcpu: namespace team-a's budget is 3 vCPUs (policy budgets); the Proxies created before this one hold 2 and this one asks for 2"; !strings.Contains(out.stderr, w) {
					t.Errorf("render's error does not say %q:\n%s", w, out.stderr)
				}
			},
		},
		{
			name: "policy-bad-input", composition: compositionV2, xrd: xrdV2, wantFail: true,
			policy: "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\ndestinations: {mode: Audit}\n",
			xrYAML: policyProxy("bad-input", ""),
			check: func(t *testing.T, out rendered) {
				if w := `function input (ProxyPolicy) destinations.mode: must be Enforce or Report, got "Audit"`; !strings.Contains(out.stderr, w) {
					t.Errorf("render's error does not say %q:\n%s", w, out.stderr)
				}
			},
		},
		{
			name: "policy-allowed-domains", composition: compositionV2, xrd: xrdV2,
			xrYAML: policyProxy("narrow", "  allowedDomains: [.debian.org, www.debian.org, 192.168.122.1]\n  squidDirectives: [http_access allow all]\n"),
			check: func(t *testing.T, out rendered) {
				out.wantComposed(t, "SeedVolume/seed/narrow-seed", "KVMDomain/domain/narrow", "Service/service/narrow-proxy")
				var cc struct {
					WriteFiles []struct{ Path, Content string } `json:"write_files"`
				}
				if err := yaml.Unmarshal([]byte(out.userData(t)), &cc); err != nil || len(cc.WriteFiles) == 0 {
					t.Fatalf("user-data: %v", err)
				}
				ud := cc.WriteFiles[0].Content
				// The team's allow comes after every deny of the platform, before the proxy's allow.
				order := []string{
					"acl proxy_domains dstdomain -n .debian.org 192.168.122.1\n",
					"acl proxy_dst_allowed dst 192.168.122.1/32 # libvirt-host\n",
					"acl proxy_dst_allowed dst 10.77.0.0/24 # lab-lan\n",
					"http_access deny !proxy_clients\n",
					"http_access deny !proxy_domains\n",
					"http_access deny !proxy_dst_allowed proxy_dst_link_local\n",
					"http_access deny !proxy_dst_allowed proxy_dst_unique_local\n",
					"http_access allow all\n",
					"http_access allow proxy_clients\n",
				}
				at := 0
				for _, o := range order {
					i := strings.Index(ud[at:], o)
					if i < 0 {
						t.Fatalf("user-data lacks %q after offset %d:\n%s", o, at, ud)
					}
					at += i + len(o)
				}
				if p := cc.WriteFiles[1].Path; p != "/usr/share/squid/errors/templates/ERR_PROXY_DOMAIN_NOT_ALLOWED" {
					t.Errorf("write_files[1] is %s, want the page of rule proxy_domains", p)
				}
				if !strings.Contains(cc.WriteFiles[1].Content, "Access denied by rule proxy_domains<") {
					t.Errorf("the page of rule proxy_domains does not name it:\n%s", cc.WriteFiles[1].Content)
				}
			},
		},
	}
}

// withPolicy writes a copy of the Composition file whose compose-proxy step has policy as its
// input, and returns its path.
func withPolicy(t *testing.T, file, policy string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := yaml.Unmarshal([]byte(policy), &in); err != nil {
		t.Fatal(err)
	}
	steps, _ := c["spec"].(map[string]any)["pipeline"].([]any)
	found := false
	for _, s := range steps {
		if st := s.(map[string]any); st["step"] == "compose-proxy" {
			st["input"], found = in, true
		}
	}
	if !found {
		t.Fatalf("%s has no compose-proxy step", file)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "composition.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestValidatePolicy runs `crossplane beta validate` on the Compositions' ProxyPolicy inputs
// on their own against the input's CRD (package/function/input): the shipped policy passes, a
// bad one is refused field by field. (TestValidate validates them inside the Compositions.) A
// cluster never validates a step's input, so this is where a typo in the platform's policy
// shows before the function reports it.
func TestValidatePolicy(t *testing.T) {
	cli := crossplaneCLI(t)
	cache := seedValidateCache(t, cli)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var inputs []string
	for i, c := range []string{compositionV2, compositionLegacy} {
		b, err := os.ReadFile(filepath.Join(root, c))
		if err != nil {
			t.Fatal(err)
		}
		var comp struct {
			Spec struct {
				Pipeline []struct {
					Step  string         `json:"step"`
					Input map[string]any `json:"input"`
				} `json:"pipeline"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &comp); err != nil {
			t.Fatal(err)
		}
		for _, s := range comp.Spec.Pipeline {
			if s.Step == "compose-proxy" && s.Input != nil {
				// validate names what it checks by metadata.name.
				s.Input["metadata"] = map[string]any{"name": []string{"proxies", "xproxies"}[i]}
				out, _ := yaml.Marshal(s.Input)
				inputs = append(inputs, writeYAML(t, dir, "input-"+filepath.Base(c), string(out)))
			}
		}
	}
	if len(inputs) != 2 {
		t.Fatalf("found %d compose-proxy inputs in the Compositions, want 2", len(inputs))
	}
	bad := writeYAML(t, dir, "bad.yaml", `
apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1
kind: ProxyPolicy
metadata: {name: bad}
limits: {maxVCPU: 0}
defaultAttachment: {network: default, bridge: br0}
destinations:
  mode: Audit
  deniedRanges: [private, public]
  allowedRanges: [{name: Lab_LAN, cidr: 10.77.0.0/24}]
colour: blue
`)
	cases := []struct {
		name      string
		resources []string
		wantOK    bool
		want      []string
	}{
		{
			name: "the Compositions' policies", resources: inputs, wantOK: true,
			want: validated([]string{
				"proxy.fn.kvm.crossplane.io/v1alpha1, Kind=ProxyPolicy, proxies",
				"proxy.fn.kvm.crossplane.io/v1alpha1, Kind=ProxyPolicy, xproxies",
			}),
		},
		{
			name: "a bad policy", resources: []string{bad},
			want: []string{
				"limits.maxVCPU in body should be greater than or equal to 1",
				"set exactly one of network and bridge",
				`destinations.mode: Unsupported value: "Audit"`,
				`destinations.deniedRanges[1]: Unsupported value: "public"`,
				"destinations.allowedRanges[0].name in body should match",
				`colour: Invalid value: "colour": unknown field: "colour"`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, root, nil, cli, "beta", "validate", "package/function/input", strings.Join(tc.resources, ","),
				"--cache-dir="+cache, "--error-on-missing-schemas")
			out := r.stdout + r.stderr
			t.Logf("crossplane beta validate took %v:\n%s", r.took, out)
			if ok := r.err == nil; ok != tc.wantOK {
				t.Fatalf("validate succeeded=%v, want %v:\n%s", ok, tc.wantOK, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// writeYAMLDocs writes a multi-document YAML file and returns its path.
func writeYAMLDocs(t *testing.T, dir, name, content string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
