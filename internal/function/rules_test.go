package function

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

func TestResolveRulesDefaults(t *testing.T) {
	r, err := ResolveRules(ppv1.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	want := "maxVCPU 4 maxMemoryMiB 4096 maxDiskSizeGiB 64 clients [10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7] directives true ssh true probe <nil> report false denied [loopback link-local private cgnat unique-local] allowed [] domains []"
	got := fmt.Sprint("maxVCPU ", r.MaxVCPU, " maxMemoryMiB ", r.MaxMemoryMiB, " maxDiskSizeGiB ", r.MaxDiskSizeGiB,
		" clients ", r.ClientCIDRs, " directives ", r.AllowSquidDirectives, " ssh ", r.AllowSSHKeys,
		" probe ", r.Probe, " report ", r.Destinations.Report, " denied ", r.Destinations.Denied,
		" allowed ", r.Destinations.Allowed, " domains ", r.Destinations.DefaultDomains)
	if got != want {
		t.Errorf("defaults:\n got %s\nwant %s", got, want)
	}
}

func TestResolveRulesRefusesABadPolicy(t *testing.T) {
	cases := map[string]struct {
		reason string
		in     ppv1.Rules
		err    error
	}{
		"ClientCIDR": {
			reason: "a client network that is no CIDR names the input's field",
			in:     ppv1.Rules{ClientCIDRs: []string{"10.0.0.0/8", "ten"}},
			err:    errors.New(`function input (ProxyPolicy) clientCIDRs[1]: "ten" is not a CIDR such as 10.0.0.0/8`),
		},
		"Mode": {
			reason: "an unknown destination mode is refused, never read as Enforce or Report",
			in:     ppv1.Rules{Destinations: &ppv1.Destinations{Mode: "Audit"}},
			err:    errors.New(`function input (ProxyPolicy) destinations.mode: must be Enforce or Report, got "Audit"`),
		},
		"RangeClass": {
			reason: "an unknown range class is refused",
			in:     ppv1.Rules{Destinations: &ppv1.Destinations{DeniedRanges: []ppv1.RangeClass{"private", "public"}}},
			err:    errors.New(`function input (ProxyPolicy) destinations.deniedRanges[1]: "public" is not one of loopback, link-local, private, cgnat, unique-local`),
		},
		"AllowedRange": {
			reason: "an allowed range needs a unique name and a CIDR",
			in: ppv1.Rules{Destinations: &ppv1.Destinations{AllowedRanges: []ppv1.NamedRange{
				{Name: "lan", CIDR: "10.77.0.0/24"}, {Name: "lan", CIDR: "10.78.0.0/24"}, {Name: "x", CIDR: "10.79.0.0"},
			}}},
			err: errors.New(`function input (ProxyPolicy) destinations.allowedRanges[1].name: "lan" must be a unique lower-case name such as lab-lan; ` +
				`function input (ProxyPolicy) destinations.allowedRanges[2].cidr: "10.79.0.0" is not a CIDR such as 10.77.0.0/24`),
		},
		"DefaultDomain": {
			reason: "the platform's default domains follow the same grammar as a Proxy's",
			in:     ppv1.Rules{Destinations: &ppv1.Destinations{DefaultAllowedDomains: []string{"example.*"}}},
			err:    errors.New(`function input (ProxyPolicy) destinations.defaultAllowedDomains[0]: "example.*" has a '*': squid's dstdomain has no such wildcard; write .example.com for example.com and every name under it`),
		},
		"Probe": {
			reason: "the platform's probe is an http URL and a status",
			in:     ppv1.Rules{Probe: &ppv1.Probe{URL: "https://x/", ExpectedStatus: ptr.To[int64](99)}},
			err: errors.New(`function input (ProxyPolicy) probe.url: "https://x/" is not an http:// URL; ` +
				`function input (ProxyPolicy) probe.expectedStatus: must be an HTTP status between 100 and 599, got 99`),
		},
		"Budgets": {
			reason: "a budget names a namespace once and is never negative",
			in: ppv1.Rules{Budgets: &ppv1.Budgets{Namespaces: []ppv1.NamespaceBudget{
				{Namespace: "team-a", Budget: ppv1.Budget{MaxProxies: ptr.To[int64](-1)}}, {Namespace: "team-a"},
			}}},
			err: errors.New(`function input (ProxyPolicy) budgets.namespaces[0].maxProxies: must not be negative, got -1; ` +
				`function input (ProxyPolicy) budgets.namespaces[1].namespace: "team-a" must be a namespace name listed once`),
		},
		"Limits": {
			reason: "a limit below what any Proxy needs is refused",
			in:     ppv1.Rules{Limits: &ppv1.Limits{MaxVCPU: ptr.To[int64](0), MaxMemoryMiB: ptr.To[int64](64)}},
			err: errors.New(`function input (ProxyPolicy) limits.maxVCPU: must be at least 1, got 0; ` +
				`function input (ProxyPolicy) limits.maxMemoryMiB: must be at least 128, got 64`),
		},
		"MaxReplicas": {
			reason: "a replica limit no Proxy can meet, or above the API's, is refused",
			in:     ppv1.Rules{Limits: &ppv1.Limits{MaxReplicas: ptr.To[int64](0)}},
			err:    errors.New(`function input (ProxyPolicy) limits.maxReplicas: must be between 1 and 16, got 0`),
		},
		"AptSourcesNotALine": {
			reason: "an apt source is a one-line deb line with a URI and a suite; the message names the line",
			in:     ppv1.Rules{Packages: &ppv1.Packages{AptSources: "deb http://mirror.example.internal/debian bookworm main\nhttp://mirror.example.internal/debian"}},
			err: errors.New(`function input (ProxyPolicy) packages.aptSources: line 2 "http://mirror.example.internal/debian" is not an apt source such as ` +
				`"deb http://mirror.example.internal/debian bookworm main" (one-line style: deb [OPTIONS] URI SUITE [COMPONENT...])`),
		},
		"AptSourcesNoSuite": {
			reason: "a deb line without a suite is refused",
			in:     ppv1.Rules{Packages: &ppv1.Packages{AptSources: "deb [trusted=yes] http://192.168.122.1:8205/"}},
			err: errors.New(`function input (ProxyPolicy) packages.aptSources: line 1 "deb [trusted=yes] http://192.168.122.1:8205/" is not an apt source such as ` +
				`"deb http://mirror.example.internal/debian bookworm main" (one-line style: deb [OPTIONS] URI SUITE [COMPONENT...])`),
		},
		"AptSourcesCommentsOnly": {
			reason: "sources with no deb line would leave apt nothing: refused, pointing at leaving the field out",
			in:     ppv1.Rules{Packages: &ppv1.Packages{AptSources: "# none yet\n"}},
			err:    errors.New(`function input (ProxyPolicy) packages.aptSources: has no deb line: leave the field out to keep the image's own sources`),
		},
		"AptSourcesControl": {
			reason: "a control character (a carriage return) is refused",
			in:     ppv1.Rules{Packages: &ppv1.Packages{AptSources: "deb http://m/debian bookworm main\r"}},
			err:    errors.New(`function input (ProxyPolicy) packages.aptSources: line 1 has a control character`),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ResolveRules(tc.in)
			if diff := cmp.Diff(tc.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nResolveRules(...): -want error, +got error:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestApplyRules has one case per rule a Proxy can break, with its message.
func TestApplyRules(t *testing.T) {
	lab := ppv1.NamedRange{Name: "lab", CIDR: "10.77.0.0/24"}
	cases := map[string]struct {
		reason string
		policy ppv1.Rules
		spec   ProxySpec
		err    error
	}{
		"WithinEveryRule": {
			reason: "a Proxy within every rule passes",
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{AllowedRanges: []ppv1.NamedRange{lab}}},
			spec: ProxySpec{VCPU: ptr.To[int64](4), MemoryMiB: ptr.To[int64](4096), DiskSizeGiB: ptr.To[int64](64),
				AllowedCIDRs: []string{"10.42.0.0/16"}, Probe: &ProbeSpec{URL: "http://10.77.0.1:8204/"}},
		},
		"MaxVCPU": {
			reason: "more vCPUs than the limit names the field, the request and the limit",
			spec:   ProxySpec{VCPU: ptr.To[int64](8)},
			err:    errors.New("spec.vcpu: 8 is more than the platform allows per Proxy (4, policy limits.maxVCPU)"),
		},
		"MaxMemoryMiB": {
			reason: "more memory than the limit",
			policy: ppv1.Rules{Limits: &ppv1.Limits{MaxMemoryMiB: ptr.To[int64](1024)}},
			spec:   ProxySpec{MemoryMiB: ptr.To[int64](2048)},
			err:    errors.New("spec.memoryMiB: 2048 is more than the platform allows per Proxy (1024, policy limits.maxMemoryMiB)"),
		},
		"MaxDiskSizeGiB": {
			reason: "a larger disk than the limit",
			spec:   ProxySpec{DiskSizeGiB: ptr.To[int64](100)},
			err:    errors.New("spec.diskSizeGiB: 100 is more than the platform allows per Proxy (64, policy limits.maxDiskSizeGiB)"),
		},
		"ClientCIDRs": {
			reason: "a client network outside the platform's, even one that holds them all, is refused",
			spec:   ProxySpec{AllowedCIDRs: []string{"10.1.0.0/16", "0.0.0.0/0"}},
			err:    errors.New("spec.allowedCIDRs[1]: 0.0.0.0/0 is not inside the client networks the platform allows (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7, policy clientCIDRs)"),
		},
		"SquidDirectivesForbidden": {
			reason: "directives where the platform forbids them",
			policy: ppv1.Rules{AllowSquidDirectives: ptr.To(false)},
			spec:   ProxySpec{SquidDirectives: []string{"cache deny all"}},
			err:    errors.New("spec.squidDirectives: the platform does not allow squid directives (policy allowSquidDirectives: false); remove them"),
		},
		"SquidDirectiveWidens": {
			reason: "a directive that would add to the proxy's client list is refused",
			spec:   ProxySpec{SquidDirectives: []string{"cache deny all", "acl proxy_clients src all"}},
			err:    errors.New(`spec.squidDirectives[1]: acl "proxy_clients" is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise`),
		},
		"SSHKeysForbidden": {
			reason: "SSH keys where the platform forbids them",
			policy: ppv1.Rules{AllowSSHKeys: ptr.To(false)},
			spec:   ProxySpec{SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA x"}},
			err:    errors.New("spec.sshAuthorizedKeys: the platform does not allow SSH keys (policy allowSSHKeys: false); remove them"),
		},
		"ProbeToADeniedRange": {
			reason: "a probe the proxy's own rules would refuse keeps it from ever being Ready",
			spec:   ProxySpec{Probe: &ProbeSpec{URL: "http://169.254.169.254/latest/"}},
			err:    errors.New("spec.probe.url: the probe's address 169.254.169.254 is a link-local address (169.254.169.254 is the cloud metadata address), which the platform denies (policy destinations.deniedRanges link-local, no allowedRanges entry holds it), so the proxy would refuse its own readiness probe"),
		},
		"ProbeOutsideAllowedDomains": {
			reason: "a probe outside the Proxy's allowedDomains is refused by its own proxy",
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{AllowedRanges: []ppv1.NamedRange{lab}}},
			spec:   ProxySpec{AllowedDomains: []string{".example.com"}, Probe: &ProbeSpec{URL: "http://10.77.0.1/"}},
			err:    errors.New(`spec.probe.url: the probe's host "10.77.0.1" is not in allowedDomains, so the proxy would refuse its own readiness probe`),
		},
		"ProbeToADeniedRangeInReportMode": {
			reason: "in Report mode nothing is denied, so the probe passes",
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{Mode: ppv1.DestinationReport}},
			spec:   ProxySpec{Probe: &ProbeSpec{URL: "http://127.0.0.1/"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := ResolveRules(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			tc.spec.Image = ImageSpec{BaseImageName: "debian-12"}
			p, err := tc.spec.Validate()
			if err != nil {
				t.Fatal(err)
			}
			err = r.Apply(&p)
			if diff := cmp.Diff(tc.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nApply(...): -want error, +got error:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestApplyRulesDefaults(t *testing.T) {
	r, err := ResolveRules(ppv1.Rules{
		Probe:        &ppv1.Probe{URL: "http://origin.example.com/"},
		Destinations: &ppv1.Destinations{DefaultAllowedDomains: []string{".example.com"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		reason      string
		spec        ProxySpec
		wantProbe   string
		wantStatus  int32
		wantDomains []string
	}{
		"PlatformDefaults": {
			reason:    "a Proxy without probe or domains gets the platform's",
			wantProbe: "http://origin.example.com/", wantStatus: 204, wantDomains: []string{".example.com"},
		},
		"ProxysOwn": {
			reason:    "a Proxy's own probe and domains win",
			spec:      ProxySpec{Probe: &ProbeSpec{URL: "http://www.example.org/", ExpectedStatus: ptr.To[int64](200)}, AllowedDomains: []string{"www.example.org"}},
			wantProbe: "http://www.example.org/", wantStatus: 200, wantDomains: []string{"www.example.org"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.spec.Image = ImageSpec{BaseImageName: "debian-12"}
			p, err := tc.spec.Validate()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(&p); err != nil {
				t.Fatal(err)
			}
			if p.ProbeURL != tc.wantProbe || p.ProbeStatus != tc.wantStatus {
				t.Errorf("%s: probe %s %d, want %s %d", tc.reason, p.ProbeURL, p.ProbeStatus, tc.wantProbe, tc.wantStatus)
			}
			if diff := cmp.Diff(tc.wantDomains, p.AllowedDomains); diff != "" {
				t.Errorf("%s: allowedDomains -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestResolveRulesAptSources: the platform's apt sources, checked, reach every Proxy; none
// leaves a Proxy with the image's own sources.
func TestResolveRulesAptSources(t *testing.T) {
	cases := map[string]struct {
		reason string
		in     *ppv1.Packages
		want   string
	}{
		"None": {
			reason: "no packages setting: the image's own sources",
		},
		"Empty": {
			reason: "an empty aptSources is the same as none",
			in:     &ppv1.Packages{},
		},
		"Mirror": {
			reason: "a local flat repository (the test bed's) and a mirror with options and comments, kept as written but trimmed",
			in:     &ppv1.Packages{AptSources: "\n# the bed\ndeb [trusted=yes] http://192.168.122.1:8205/ ./\ndeb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg arch=amd64] https://mirror.example.internal/debian bookworm main contrib\n"},
			want:   "# the bed\ndeb [trusted=yes] http://192.168.122.1:8205/ ./\ndeb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg arch=amd64] https://mirror.example.internal/debian bookworm main contrib",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := ResolveRules(ppv1.Rules{Packages: tc.in})
			if err != nil {
				t.Fatal(err)
			}
			p, err := ProxySpec{Image: ImageSpec{BaseImageName: "debian-12"}}.Validate()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(&p); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.AptSources); diff != "" {
				t.Errorf("%s: the Proxy's apt sources -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCheckDomain(t *testing.T) {
	for d, want := range map[string]string{
		"example.com":       "",
		".example.com":      "",
		"www.example.co.uk": "",
		"xn--bcher-kva.ch":  "",
		"localhost":         "",
		"example.*":         `"example.*" has a '*': squid's dstdomain has no such wildcard; write .example.com for example.com and every name under it`,
		"*.example.com":     `"*.example.com" has a '*': squid's dstdomain has no such wildcard; write .example.com for example.com and every name under it`,
		"Example.com":       `"Example.com" is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
		"10.0.0.1":          "",
		"10.0.0.300":        `"10.0.0.300" is not an IPv4 address`,
		".10.0.0.1":         `".10.0.0.1" is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
		"..example.com":     `"..example.com" is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
		"example.com.":      `"example.com." is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
		"-a.example.com":    `"-a.example.com" is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
		"a b":               `"a b" is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
		".":                 `"." is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address`,
	} {
		if got := checkDomain(d); got != want {
			t.Errorf("checkDomain(%q) = %q, want %q", d, got, want)
		}
	}
}

func TestCheckDirective(t *testing.T) {
	for d, want := range map[string]string{
		"cache deny all":                          "",
		"acl blocked dstdomain .example.com":      "",
		"http_access deny blocked":                "",
		"http_access allow all":                   "", // it comes after every deny: it can only allow what the proxy would
		"# a comment":                             "",
		"deny_info ERR_ACCESS_DENIED blocked":     "",
		"acl proxy_clients src all":               `acl "proxy_clients" is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise`,
		"acl PROXY_dst_allowed dst 0.0.0.0/0":     `acl "PROXY_dst_allowed" is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise`,
		"acl localhost src all":                   `acl "localhost" is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise`,
		"acl Safe_ports port 1-65535":             `acl "Safe_ports" is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise`,
		"follow_x_forwarded_for allow all":        `"follow_x_forwarded_for" is not allowed: it lets a client choose the address the client rules see`,
		"include /tmp/x.conf":                     `"include" is not allowed: it reads configuration the platform did not check`,
		"cache_peer 169.254.169.254 parent 80 0":  `"cache_peer" is not allowed: a peer is reached without the destination rules`,
		"url_rewrite_program /bin/sh":             `"url_rewrite_program" is not allowed: request rewriting and adaptation happen after the access rules and could send a request where they deny`,
		"ICAP_service x reqmod_precache icap://x": `"ICAP_service" is not allowed: request rewriting and adaptation happen after the access rules and could send a request where they deny`,
		"external_acl_type x %SRC /bin/sh":        `"external_acl_type" is not allowed: it runs a program in the guest`,
		"access_log none":                         `"access_log" is not allowed: the access log says why requests are denied; the platform sets it`,
		"deny_info http://x/ proxy_dst_private":   `deny_info may not name the proxy's own "proxy_dst_private"`,
	} {
		if got := checkDirective(d); got != want {
			t.Errorf("checkDirective(%q) = %q, want %q", d, got, want)
		}
	}
}

func TestSquidDomains(t *testing.T) {
	got := squidDomains([]string{"www.example.com", ".example.com", "example.com", "example.org", "example.org", ".a.example.com"})
	if diff := cmp.Diff([]string{".example.com", "example.org"}, got); diff != "" {
		t.Errorf("squidDomains: -want +got:\n%s", diff)
	}
}

// TestRunFunctionRefusesAProxyBreakingThePolicy: a fatal result naming the field and the
// limit, and nothing composed.
func TestRunFunctionRefusesAProxyBreakingThePolicy(t *testing.T) {
	req := newRequest(t, `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: big, namespace: team-a}
spec:
  image: {baseImageName: debian-12}
  vcpu: 3
  allowedDomains: [.example.com]
`, nil)
	req.Input = st(t, `
apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1
kind: ProxyPolicy
limits: {maxVCPU: 2}
`)
	rsp := run(t, req)
	want := []string{"Proxy team-a/big breaks the platform's policy: spec.vcpu: 3 is more than the platform allows per Proxy (2, policy limits.maxVCPU)"}
	if diff := cmp.Diff(want, fatals(rsp)); diff != "" {
		t.Errorf("fatal results: -want +got:\n%s", diff)
	}
	if n := len(rsp.GetDesired().GetResources()); n != 0 {
		t.Errorf("composed %d resources, want none", n)
	}
}

// TestPolicyCRDDefaultsAreTheFunctions: the input's CRD (what crossplane beta validate and
// readers see) states the defaults the function applies.
func TestPolicyCRDDefaultsAreTheFunctions(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "package", "function", "input", "proxy.fn.kvm.crossplane.io_proxypolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd extv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatal(err)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	def := func(path ...string) any {
		p := root
		var s extv1.JSONSchemaProps
		for _, x := range path {
			s = p[x]
			p = s.Properties
		}
		if s.Default == nil {
			return nil
		}
		var v any
		if err := json.Unmarshal(s.Default.Raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	r, err := ResolveRules(ppv1.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	var denied []any
	for _, c := range r.Destinations.Denied {
		denied = append(denied, string(c))
	}
	var clients []any
	for _, c := range DefaultClientCIDRs {
		clients = append(clients, c)
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"limits", "maxVCPU"}, float64(r.MaxVCPU)},
		{[]string{"limits", "maxMemoryMiB"}, float64(r.MaxMemoryMiB)},
		{[]string{"limits", "maxDiskSizeGiB"}, float64(r.MaxDiskSizeGiB)},
		{[]string{"limits", "maxReplicas"}, float64(r.MaxReplicas)},
		{[]string{"placement", "antiAffinity"}, string(ppv1.AntiAffinityPreferred)},
		{[]string{"clientCIDRs"}, clients},
		{[]string{"allowSquidDirectives"}, r.AllowSquidDirectives},
		{[]string{"allowSSHKeys"}, r.AllowSSHKeys},
		{[]string{"destinations", "mode"}, string(ppv1.DestinationEnforce)},
		{[]string{"destinations", "deniedRanges"}, denied},
		{[]string{"probe", "expectedStatus"}, float64(DefaultExpectedStatus)},
	} {
		if diff := cmp.Diff(c.want, def(c.path...)); diff != "" {
			t.Errorf("CRD default of %v: -function +CRD:\n%s", c.path, diff)
		}
	}
}
