package sourcepolicy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

func TestNamespaced(t *testing.T) {
	type args struct {
		platform, own v1alpha1.ImageSourcePolicy
		url           string
		ip            string
	}
	lift := func(cidr string) v1alpha1.ImageSourcePolicy {
		return v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: cidr}}}
	}
	cases := map[string]struct {
		reason string
		args   args
		want   Decision
	}{
		"PublicAllowed": {
			reason: "A public address passes the platform's default and a team's empty policy.",
			args:   args{url: "https://cloud.debian.org/a.qcow2", ip: "194.71.11.173"},
			want:   Decision{Allowed: true},
		},
		"OwnLoopbackLiftIgnored": {
			reason: "A namespaced config's allow rule naming 127.0.0.1 lifts nothing.",
			args:   args{own: lift("127.0.0.1/32"), url: "http://127.0.0.1:8080/img"},
			want:   Decision{Rule: PlatformRule + "built-in: loopback 127.0.0.0/8, which no rule lifts for a namespaced ProviderConfig"},
		},
		"OwnMetadataLiftIgnored": {
			reason: "Nor does one naming the metadata address.",
			args:   args{own: lift("169.254.169.254/32"), url: "http://169.254.169.254/latest/"},
			want:   Decision{Rule: PlatformRule + "built-in: link-local 169.254.0.0/16 (the cloud metadata address), which no rule lifts for a namespaced ProviderConfig"},
		},
		"PlatformLoopbackLiftIgnored": {
			reason: "Not even the platform's policy lifts loopback for namespaced configs.",
			args:   args{platform: lift("127.0.0.1/32"), own: lift("127.0.0.1/32"), url: "http://127.0.0.1:8080/img"},
			want:   Decision{Rule: PlatformRule + "built-in: loopback 127.0.0.0/8, which no rule lifts for a namespaced ProviderConfig"},
		},
		"IPv6LinkLocal": {
			reason: "fe80::/10 is refused.",
			args:   args{url: "http://[fe80::1]/img"},
			want:   Decision{Rule: PlatformRule + "built-in: link-local fe80::/10, which no rule lifts for a namespaced ProviderConfig"},
		},
		"RFC1918": {
			reason: "Private addresses are refused for namespaced configs by default.",
			args:   args{url: "http://images.example.org/img", ip: "10.1.2.3"},
			want:   Decision{Rule: PlatformRule + "built-in: private (RFC 1918) 10.0.0.0/8"},
		},
		"RFC1918OwnLiftIgnored": {
			reason: "A team's allow rule cannot lift a private range.",
			args:   args{own: lift("192.168.1.10/32"), url: "http://192.168.1.10/img"},
			want:   Decision{Rule: PlatformRule + "built-in: private (RFC 1918) 192.168.0.0/16"},
		},
		"RFC1918PlatformLift": {
			reason: "The platform's allow rule naming a private address lifts it for namespaced configs.",
			args:   args{platform: lift("10.20.30.40/32"), url: "http://10.20.30.40/img"},
			want:   Decision{Allowed: true},
		},
		"RFC1918PlatformLiftOwnNarrows": {
			reason: "A team's deny rule still narrows what the platform allows.",
			args: args{platform: lift("10.20.30.40/32"), url: "http://10.20.30.40/img",
				own: v1alpha1.ImageSourcePolicy{Deny: []v1alpha1.ImageSourceRule{{CIDR: "10.0.0.0/8"}}}},
			want: Decision{Rule: "deny[0] (cidr 10.0.0.0/8)"},
		},
		"CGNAT": {
			reason: "100.64.0.0/10 is refused.",
			args:   args{url: "http://100.100.100.200/img"},
			want:   Decision{Rule: PlatformRule + "built-in: shared address space (CGNAT) 100.64.0.0/10"},
		},
		"ULA": {
			reason: "fc00::/7 is refused.",
			args:   args{url: "http://x.example.org/img", ip: "fd00::1"},
			want:   Decision{Rule: PlatformRule + "built-in: unique local (IPv6 ULA) fc00::/7"},
		},
		"NAT64": {
			reason: "64:ff9b::/96 (an IPv4 address behind NAT64, here loopback) is refused.",
			args:   args{url: "http://[64:ff9b::7f00:1]/img"},
			want:   Decision{Rule: PlatformRule + "built-in: NAT64 64:ff9b::/96"},
		},
		"PlatformAllowList": {
			reason: "The platform's allow list bounds a team that allows more.",
			args: args{platform: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "mirror.example.org"}}},
				own: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "evil.example.net"}}},
				url: "https://evil.example.net/img", ip: "203.0.113.7"},
			want: Decision{Rule: PlatformRule + NotAllowed},
		},
		"OwnAllowListNarrows": {
			reason: "A team's allow list narrows a platform without allow rules.",
			args: args{own: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "mirror.example.org"}}},
				url: "https://other.example.org/img", ip: "203.0.113.7"},
			want: Decision{Rule: NotAllowed},
		},
		"BothAllow": {
			reason: "A destination both allow passes, named by the team's rule.",
			args: args{platform: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "*.example.org"}}},
				own: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "mirror.example.org"}}},
				url: "https://mirror.example.org/img", ip: "203.0.113.7"},
			want: Decision{Allowed: true, Rule: "allow[0] (host mirror.example.org)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := Namespaced(tc.args.platform, tc.args.own)
			if err != nil {
				t.Fatal(err)
			}
			tgt := Target{URL: mustURL(t, tc.args.url)}
			if tc.args.ip != "" {
				tgt.IP = netip.MustParseAddr(tc.args.ip)
			}
			if diff := cmp.Diff(tc.want, p.Check(tgt)); diff != "" {
				t.Errorf("%s\nCheck(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestClusterConfigUnchanged(t *testing.T) {
	// A ClusterProviderConfig's policy keeps its meaning: private ranges are allowed and an
	// allow rule naming a loopback address lifts the denial.
	p, _, err := Platform{}.Compile(v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "127.0.0.1/32"}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]bool{"http://127.0.0.1/img": true, "http://127.0.0.2/img": false, "http://10.0.0.1/img": false} {
		if got := p.Check(Target{URL: mustURL(t, u)}).Allowed; got != want {
			t.Errorf("Check(%s).Allowed = %v, want %v", u, got, want)
		}
	}
	p, _, _ = Platform{}.Compile(v1alpha1.ImageSourcePolicy{}, false)
	if !p.Check(Target{URL: mustURL(t, "http://10.0.0.1/img")}).Allowed {
		t.Error("a ClusterProviderConfig without rules must allow RFC 1918 addresses")
	}
}

func TestPlatformLimits(t *testing.T) {
	pl := Platform{Namespaced: v1alpha1.ImageSourcePolicy{MaxImageSizeMiB: 1024, StallTimeoutSeconds: 120}}
	cases := map[string]struct {
		own        v1alpha1.ImageSourcePolicy
		namespaced bool
		want       Limits
	}{
		"ClusterConfigOwnLimits": {
			own:  v1alpha1.ImageSourcePolicy{MaxImageSizeMiB: 4096},
			want: Limits{MaxBytes: 4096 << 20, HeaderTimeout: 30 * time.Second, StallTimeout: 60 * time.Second},
		},
		"NamespacedCannotRaise": {
			own:        v1alpha1.ImageSourcePolicy{MaxImageSizeMiB: 4096, StallTimeoutSeconds: 600},
			namespaced: true,
			want:       Limits{MaxBytes: 1024 << 20, HeaderTimeout: 30 * time.Second, StallTimeout: 120 * time.Second},
		},
		"NamespacedLowers": {
			own:        v1alpha1.ImageSourcePolicy{MaxImageSizeMiB: 10, HeaderTimeoutSeconds: 5},
			namespaced: true,
			want:       Limits{MaxBytes: 10 << 20, HeaderTimeout: 5 * time.Second, StallTimeout: 60 * time.Second},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, got, err := pl.Compile(tc.own, tc.namespaced)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Compile(...) limits: -want, +got:\n%s", diff)
			}
		})
	}
}

func TestSHA256Rule(t *testing.T) {
	on := v1alpha1.ImageSourcePolicy{RequireSHA256: true}
	cases := map[string]struct {
		pl         Platform
		own        v1alpha1.ImageSourcePolicy
		namespaced bool
		want       string
	}{
		"None":             {want: ""},
		"Flag":             {pl: Platform{RequireSHA256: true}, want: "the provider's flag --require-image-sha256"},
		"PlatformNS":       {pl: Platform{Namespaced: on}, namespaced: true, want: "requireSHA256 of the platform's policy for namespaced ProviderConfigs (--namespaced-image-sources)"},
		"PlatformNSOnlyNS": {pl: Platform{Namespaced: on}, want: ""},
		"Own":              {own: on, want: "imageSources.requireSHA256 of ProviderConfig/own"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.pl.SHA256Rule(tc.own, tc.namespaced, "ProviderConfig/own")); diff != "" {
				t.Errorf("SHA256Rule(...): -want, +got:\n%s", diff)
			}
		})
	}
}
