package sourcepolicy

import (
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestCheck(t *testing.T) {
	type args struct {
		policy v1alpha1.ImageSourcePolicy
		url    string
		ip     string // "" means not known yet
		port   int
	}
	mirror := v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{
		{URLPrefix: "https://mirror.example.org/images/"},
		{Host: "*.cdn.example.net", Ports: []int32{443}},
		{CIDR: "192.0.2.0/24"},
	}}
	loopbackServer := v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "127.0.0.1/32", Ports: []int32{8080}}}}

	cases := map[string]struct {
		reason string
		args   args
		want   Decision
	}{
		"NoRulesPublicAddress": {
			reason: "Without rules any address outside the built-in ranges is allowed.",
			args:   args{url: "https://cloud.debian.org/images/a.qcow2", ip: "194.71.11.173", port: 443},
			want:   Decision{Allowed: true},
		},
		"NoRulesLoopbackLiteral": {
			reason: "A URL to 127.0.0.1 is refused by default, before any dial.",
			args:   args{url: "http://127.0.0.1:8080/img"},
			want:   Decision{Rule: "built-in: loopback 127.0.0.0/8"},
		},
		"NoRulesNameResolvedToLoopback": {
			reason: "A host name that resolves to loopback is refused on the dialed address.",
			args:   args{url: "http://images.example.org/img", ip: "127.0.0.53", port: 80},
			want:   Decision{Rule: "built-in: loopback 127.0.0.0/8"},
		},
		"NoRulesNameUnresolved": {
			reason: "A host name checked before resolution is allowed for now: the dial decides.",
			args:   args{url: "http://images.example.org/img"},
			want:   Decision{Allowed: true},
		},
		"IPv6Loopback": {
			reason: "::1 is loopback.",
			args:   args{url: "http://[::1]:8080/img"},
			want:   Decision{Rule: "built-in: loopback ::1"},
		},
		"IPv4MappedLoopback": {
			reason: "An IPv4-mapped IPv6 address is treated as the IPv4 address.",
			args:   args{url: "http://[::ffff:127.0.0.1]:8080/img"},
			want:   Decision{Rule: "built-in: loopback 127.0.0.0/8"},
		},
		"IPv4MappedDialed": {
			reason: "A dialed IPv4-mapped address is treated as IPv4 too.",
			args:   args{url: "http://images.example.org/img", ip: "::ffff:169.254.169.254", port: 80},
			want:   Decision{Rule: "built-in: link-local 169.254.0.0/16 (the cloud metadata address)"},
		},
		"Metadata": {
			reason: "The cloud metadata address is refused.",
			args:   args{url: "http://169.254.169.254/latest/meta-data/"},
			want:   Decision{Rule: "built-in: link-local 169.254.0.0/16 (the cloud metadata address)"},
		},
		"IPv6LinkLocalWithZone": {
			reason: "fe80::/10 is link-local, with or without a zone.",
			args:   args{url: "http://[fe80::1%25eth0]/img"},
			want:   Decision{Rule: "built-in: link-local fe80::/10"},
		},
		"Unspecified4": {
			reason: "0.0.0.0 reaches the local host on Linux.",
			args:   args{url: "http://0.0.0.0:8080/img"},
			want:   Decision{Rule: "built-in: unspecified 0.0.0.0"},
		},
		"Unspecified6": {
			reason: ":: reaches the local host on Linux.",
			args:   args{url: "http://[::]:8080/img"},
			want:   Decision{Rule: "built-in: unspecified ::"},
		},
		"Multicast4": {
			reason: "Multicast is refused.",
			args:   args{url: "http://239.1.2.3/img"},
			want:   Decision{Rule: "built-in: multicast 224.0.0.0/4"},
		},
		"Multicast6": {
			reason: "IPv6 multicast is refused.",
			args:   args{url: "http://[ff02::1]/img"},
			want:   Decision{Rule: "built-in: multicast ff00::/8"},
		},
		"DenyWinsOverAllow": {
			reason: "An explicit deny rule wins over an allow rule that matches too.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{
					Allow: []v1alpha1.ImageSourceRule{{CIDR: "10.0.0.0/8"}},
					Deny:  []v1alpha1.ImageSourceRule{{Host: "a.example.org"}, {Host: "b.example.org"}, {CIDR: "10.0.0.0/8"}},
				},
				url: "http://mirror.internal/img", ip: "10.1.2.3", port: 80,
			},
			want: Decision{Rule: "deny[2] (cidr 10.0.0.0/8)"},
		},
		"DenyWinsOverLiftedBuiltIn": {
			reason: "A deny rule refuses an address that an allow rule lifts from the built-in denial.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: loopbackServer.Allow, Deny: []v1alpha1.ImageSourceRule{{URLPrefix: "http://127.0.0.1:8080/private/"}}},
				url:    "http://127.0.0.1:8080/private/img",
			},
			want: Decision{Rule: "deny[0] (urlPrefix http://127.0.0.1:8080/private/)"},
		},
		"DenyByHostBeforeResolution": {
			reason: "A deny rule without cidr refuses a URL before its host is resolved.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Deny: []v1alpha1.ImageSourceRule{{Host: "*.internal.example.org"}}},
				url:    "https://vault.internal.example.org/img",
			},
			want: Decision{Rule: "deny[0] (host *.internal.example.org)"},
		},
		"DenyCIDRWaitsForResolution": {
			reason: "A deny rule with a cidr cannot refuse a host name before it is resolved.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Deny: []v1alpha1.ImageSourceRule{{CIDR: "10.0.0.0/8"}}},
				url:    "https://mirror.example.org/img",
			},
			want: Decision{Allowed: true},
		},
		"DenyOtherPort": {
			reason: "A deny rule with ports does not match other ports.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Deny: []v1alpha1.ImageSourceRule{{CIDR: "192.0.2.0/24", Ports: []int32{22, 25}}}},
				url:    "http://192.0.2.7/img",
			},
			want: Decision{Allowed: true},
		},
		"AllowLiftsBuiltInForItsServer": {
			reason: "An allow rule naming 127.0.0.1/32 and its port lifts the built-in denial for that server.",
			args:   args{policy: loopbackServer, url: "http://127.0.0.1:8080/img", ip: "127.0.0.1", port: 8080},
			want:   Decision{Allowed: true, Rule: "allow[0] (cidr 127.0.0.1/32, ports 8080)"},
		},
		"AllowLiftsOnlyItsPort": {
			reason: "The same server on another port is refused: not matched by the allow rule.",
			args:   args{policy: loopbackServer, url: "http://127.0.0.1:9090/img"},
			want:   Decision{Rule: "built-in: loopback 127.0.0.0/8"},
		},
		"AllowLiftsOnlyItsAddress": {
			reason: "Another loopback address is still refused.",
			args:   args{policy: loopbackServer, url: "http://127.0.0.2:8080/img"},
			want:   Decision{Rule: "built-in: loopback 127.0.0.0/8"},
		},
		"AllowByHostDoesNotLiftBuiltIn": {
			reason: "An allowed host name that resolves to loopback stays refused: only a cidr names an address.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "mirror.example.org"}}},
				url:    "http://mirror.example.org/img", ip: "127.0.0.1", port: 80,
			},
			want: Decision{Rule: "built-in: loopback 127.0.0.0/8; allow[0] (host mirror.example.org) matches but only an allow rule whose cidr names this address lifts the built-in denial"},
		},
		"AllowEverythingDoesNotLiftBuiltIn": {
			reason: "cidr 0.0.0.0/0 does not name the metadata address.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "0.0.0.0/0"}}},
				url:    "http://169.254.169.254/",
			},
			want: Decision{Rule: "built-in: link-local 169.254.0.0/16 (the cloud metadata address); allow[0] (cidr 0.0.0.0/0) matches but only an allow rule whose cidr names this address lifts the built-in denial"},
		},
		"AllowMappedCIDR": {
			reason: "An IPv4-mapped cidr in a rule is treated as IPv4.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "::ffff:127.0.0.1/128"}}},
				url:    "http://127.0.0.1:8080/img",
			},
			want: Decision{Allowed: true, Rule: "allow[0] (cidr ::ffff:127.0.0.1/128)"},
		},
		"AllowURLPrefix": {
			reason: "A URL under an allowed prefix is allowed.",
			args:   args{policy: mirror, url: "https://mirror.example.org/images/debian-12.qcow2", ip: "198.51.100.4", port: 443},
			want:   Decision{Allowed: true, Rule: "allow[0] (urlPrefix https://mirror.example.org/images/)"},
		},
		"AllowURLPrefixCaseAndDefaultPort": {
			reason: "Scheme and host compare case-insensitively, and the default port equals no port.",
			args:   args{policy: mirror, url: "HTTPS://Mirror.Example.ORG:443/images/a.qcow2"},
			want:   Decision{Allowed: true, Rule: "allow[0] (urlPrefix https://mirror.example.org/images/)"},
		},
		"URLPrefixDotDot": {
			reason: "Dot segments are resolved before comparing: /images/../ leaves the prefix.",
			args:   args{policy: mirror, url: "https://mirror.example.org/images/../private/key", ip: "198.51.100.4", port: 443},
			want:   Decision{Rule: NotAllowed},
		},
		"URLPrefixEncodedDotDot": {
			reason: "Encoded dot segments are resolved too.",
			args:   args{policy: mirror, url: "https://mirror.example.org/images/%2e%2e/private/key", ip: "198.51.100.4", port: 443},
			want:   Decision{Rule: NotAllowed},
		},
		"URLPrefixOtherHostWithSamePrefixString": {
			reason: "A host that merely starts with the prefix's host does not match.",
			args:   args{policy: mirror, url: "https://mirror.example.org.evil.example/images/a.qcow2", ip: "203.0.113.9", port: 443},
			want:   Decision{Rule: NotAllowed},
		},
		"URLPrefixSchemeDiffers": {
			reason: "http is not https.",
			args:   args{policy: mirror, url: "http://mirror.example.org/images/a.qcow2", ip: "198.51.100.4", port: 80},
			want:   Decision{Rule: NotAllowed},
		},
		"URLPrefixWithQuery": {
			reason: "A prefix with a query compares path and query.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{URLPrefix: "https://x.example.org/get?file=debian"}}},
				url:    "https://x.example.org/get?file=debian-12.qcow2", ip: "198.51.100.4", port: 443,
			},
			want: Decision{Allowed: true, Rule: "allow[0] (urlPrefix https://x.example.org/get?file=debian)"},
		},
		"AllowWildcardHost": {
			reason: "*.cdn.example.net matches a subdomain on an allowed port.",
			args:   args{policy: mirror, url: "https://eu.cdn.example.net/a.qcow2", ip: "198.51.100.77", port: 443},
			want:   Decision{Allowed: true, Rule: "allow[1] (host *.cdn.example.net, ports 443)"},
		},
		"WildcardHostNotApex": {
			reason: "*.cdn.example.net does not match cdn.example.net itself.",
			args:   args{policy: mirror, url: "https://cdn.example.net/a.qcow2", ip: "198.51.100.77", port: 443},
			want:   Decision{Rule: NotAllowed},
		},
		"WildcardHostWrongPort": {
			reason: "The wildcard rule only covers port 443.",
			args:   args{policy: mirror, url: "http://eu.cdn.example.net/a.qcow2", ip: "198.51.100.77", port: 80},
			want:   Decision{Rule: NotAllowed},
		},
		"HostTrailingDot": {
			reason: "A fully qualified name with a trailing dot is the same host.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "mirror.example.org"}}},
				url:    "https://mirror.example.org./a.qcow2", ip: "198.51.100.4", port: 443,
			},
			want: Decision{Allowed: true, Rule: "allow[0] (host mirror.example.org)"},
		},
		"AllowCIDR": {
			reason: "A dialed address in an allowed cidr is allowed.",
			args:   args{policy: mirror, url: "http://files.lab/a.qcow2", ip: "192.0.2.200", port: 80},
			want:   Decision{Allowed: true, Rule: "allow[2] (cidr 192.0.2.0/24)"},
		},
		"AllowCIDRBeforeResolution": {
			reason: "Before resolution an allow rule with a cidr may still match: the dial decides.",
			args:   args{policy: mirror, url: "http://files.lab/a.qcow2"},
			want:   Decision{Allowed: true},
		},
		"NotMatchedByAnyAllow": {
			reason: "With allow rules, an address none matches is refused.",
			args:   args{policy: mirror, url: "http://files.lab/a.qcow2", ip: "203.0.113.1", port: 80},
			want:   Decision{Rule: NotAllowed},
		},
		"NotMatchedBeforeResolution": {
			reason: "A URL that no allow rule can match is refused before any dial.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "mirror.example.org"}}},
				url:    "https://other.example.org/a.qcow2",
			},
			want: Decision{Rule: NotAllowed},
		},
		"AllRuleFieldsMustMatch": {
			reason: "A rule with cidr and host matches only when both do.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "192.0.2.0/24", Host: "mirror.example.org"}}},
				url:    "https://mirror.example.org/a.qcow2", ip: "198.51.100.4", port: 443,
			},
			want: Decision{Rule: NotAllowed},
		},
		"DialedPortWins": {
			reason: "The port dialed is the one checked.",
			args:   args{policy: loopbackServer, url: "http://127.0.0.1:8080/img", ip: "127.0.0.1", port: 9999},
			want:   Decision{Rule: "built-in: loopback 127.0.0.0/8"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := New(tc.args.policy)
			if err != nil {
				t.Fatalf("New(): %v", err)
			}
			target := Target{URL: mustURL(t, tc.args.url), Port: tc.args.port}
			if tc.args.ip != "" {
				target.IP = netip.MustParseAddr(tc.args.ip)
			}
			got := p.Check(target)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nCheck(%s, %s:%d): -want, +got:\n%s", tc.reason, tc.args.url, tc.args.ip, tc.args.port, diff)
			}
		})
	}
}

func TestNilPolicy(t *testing.T) {
	var p *Policy
	got := p.Check(Target{URL: mustURL(t, "http://localhost/"), IP: netip.MustParseAddr("::1"), Port: 80})
	if diff := cmp.Diff(Decision{Rule: "built-in: loopback ::1"}, got); diff != "" {
		t.Errorf("nil Policy: -want, +got:\n%s", diff)
	}
}

func TestNew(t *testing.T) {
	cases := map[string]struct {
		reason string
		policy v1alpha1.ImageSourcePolicy
		want   string // error message; "" for success
	}{
		"Valid": {
			reason: "Valid rules compile.",
			policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "10.0.0.0/8"}, {Host: "*.example.org"}, {URLPrefix: "https://x.example.org/"}}},
		},
		"BadCIDR": {
			reason: "An invalid cidr names its rule.",
			policy: v1alpha1.ImageSourcePolicy{Deny: []v1alpha1.ImageSourceRule{{Host: "a"}, {CIDR: "10.0.0.0"}}},
			want:   `deny[1]: cidr "10.0.0.0" is not an IP prefix such as 10.0.0.0/8`,
		},
		"EmptyRule": {
			reason: "A rule that sets nothing to match would match everything.",
			policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Ports: []int32{80}}}},
			want:   "allow[0]: a rule sets at least one of cidr, host or urlPrefix",
		},
		"BadURLPrefix": {
			reason: "A urlPrefix must be an http(s) URL with a host.",
			policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{URLPrefix: "ftp://x/"}}},
			want:   `allow[0]: urlPrefix "ftp://x/" is not an http or https URL`,
		},
		"BadPort": {
			reason: "Ports are 1 to 65535.",
			policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "x", Ports: []int32{0}}}},
			want:   "allow[0]: port 0 is not between 1 and 65535",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.policy)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nNew(): -want error, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestLimitsOf(t *testing.T) {
	cases := map[string]struct {
		reason string
		policy v1alpha1.ImageSourcePolicy
		want   Limits
	}{
		"Defaults": {
			reason: "Zero fields (an object stored before they existed) get the CRD's defaults.",
			want:   Limits{MaxBytes: 20480 << 20, HeaderTimeout: 30 * time.Second, StallTimeout: time.Minute},
		},
		"Set": {
			reason: "Set fields are used as they are.",
			policy: v1alpha1.ImageSourcePolicy{MaxImageSizeMiB: 2, HeaderTimeoutSeconds: 5, StallTimeoutSeconds: 7},
			want:   Limits{MaxBytes: 2 << 20, HeaderTimeout: 5 * time.Second, StallTimeout: 7 * time.Second},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, LimitsOf(tc.policy)); diff != "" {
				t.Errorf("%s\nLimitsOf(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
