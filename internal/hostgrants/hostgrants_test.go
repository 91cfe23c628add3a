package hostgrants

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

const src = "ClusterProviderConfig/gold"

var (
	teamA = Namespace{Name: "team-a", Labels: map[string]string{"tier": "gold"}}
	teamB = Namespace{Name: "team-b", Labels: map[string]string{"tier": "bronze"}}
	gold  = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
)

func TestAdmit(t *testing.T) {
	cases := map[string]struct {
		reason string
		sel    *v1alpha1.NamespaceSelection
		ns     Namespace
		want   error
	}{
		"Unset": {
			reason: "without allowedNamespaces every namespace may use the config, as before",
			ns:     teamB,
		},
		"ByName": {
			reason: "a listed namespace may",
			sel:    &v1alpha1.NamespaceSelection{Names: []string{"team-a", "team-b"}},
			ns:     teamB,
		},
		"BySelector": {
			reason: "a namespace whose labels match may",
			sel:    &v1alpha1.NamespaceSelection{Selector: gold},
			ns:     teamA,
		},
		"NameOrSelector": {
			reason: "names and selector add up",
			sel:    &v1alpha1.NamespaceSelection{Names: []string{"team-b"}, Selector: gold},
			ns:     teamB,
		},
		"NotSelected": {
			reason: "any other namespace is refused with a message naming the rule and no other namespace",
			sel:    &v1alpha1.NamespaceSelection{Names: []string{"team-c"}, Selector: gold},
			ns:     teamB,
			want:   errors.Errorf(errNotAdmitted, "team-b", src),
		},
		"EmptySelector": {
			reason: "an empty selector selects every namespace (Kubernetes' meaning)",
			sel:    &v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{}},
			ns:     teamB,
		},
		"BadSelector": {
			reason: "an invalid selector refuses, saying where it is",
			sel: &v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: "Near"}}}},
			ns:   teamA,
			want: errors.Wrapf(errors.New(`"Near" is not a valid label selector operator`), errSelector, src, fieldAllowed),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Admit(src, tc.sel, tc.ns)
			if diff := cmp.Diff(tc.want, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nAdmit(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestNeedsLabels(t *testing.T) {
	cases := map[string]struct {
		spec v1alpha1.ProviderConfigSpec
		want bool
	}{
		"Nothing":       {},
		"NamesOnly":     {spec: v1alpha1.ProviderConfigSpec{AllowedNamespaces: &v1alpha1.NamespaceSelection{Names: []string{"a"}}}},
		"AllowSelector": {spec: v1alpha1.ProviderConfigSpec{AllowedNamespaces: &v1alpha1.NamespaceSelection{Selector: gold}}, want: true},
		"GrantSelector": {spec: v1alpha1.ProviderConfigSpec{Attachments: []v1alpha1.AttachmentGrant{{Namespaces: &v1alpha1.NamespaceSelection{Selector: gold}, Pools: []string{"p"}}}}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NeedsLabels(tc.spec); got != tc.want {
				t.Errorf("NeedsLabels() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGrant(t *testing.T) {
	spec := v1alpha1.ProviderConfigSpec{
		Defaults: v1alpha1.HostDefaults{Pool: "default", Network: "nat"},
		Attachments: []v1alpha1.AttachmentGrant{
			{Networks: []string{"shared"}},
			{Namespaces: &v1alpha1.NamespaceSelection{Selector: gold}, Pools: []string{"fast"},
				Bridges: []v1alpha1.HostBridge{{Name: "br-lan", CIDRs: []string{"10.77.0.0/24", "10.78.0.1/16"}}}},
			{Namespaces: &v1alpha1.NamespaceSelection{Names: []string{"ops"}}, Networks: []string{"mgmt"}},
		},
	}
	type check struct {
		kind, name string
		want       error
	}
	// granted is what the message lists as granted to team-a and team-b.
	const grantedA, grantedB = "bridge br-lan, network shared, pool fast", "network shared"
	cases := map[string]struct {
		reason     string
		spec       v1alpha1.ProviderConfigSpec
		ns         Namespace
		namespaced bool
		checks     []check
		bridge     string
		ranges     []netip.Prefix
	}{
		"DefaultsOnly": {
			reason: "without attachments a namespace may use the defaults and nothing else",
			spec:   v1alpha1.ProviderConfigSpec{Defaults: v1alpha1.HostDefaults{Pool: "default"}},
			ns:     teamB,
			checks: []check{
				{kindPool, "default", nil},
				{kindNetwork, v1alpha1.DefaultNetwork, nil},
				{kindPool, "images", errors.Errorf(errNotGranted, kindPool, "images", "team-b", src, grantedNone)},
				{kindNetwork, "mgmt", errors.Errorf(errNotGranted, kindNetwork, "mgmt", "team-b", src, grantedNone)},
				{kindBridge, "br0", errors.Errorf(errNotGranted, kindBridge, "br0", "team-b", src, grantedNone)},
			},
		},
		"DefaultBridge": {
			reason: "the default bridge is granted with its ranges; the default network then is not",
			spec:   v1alpha1.ProviderConfigSpec{Defaults: v1alpha1.HostDefaults{Pool: "default", Bridge: "br0", BridgeCIDRs: []string{"192.168.50.0/24"}}},
			ns:     teamB,
			checks: []check{
				{kindBridge, "br0", nil},
				{kindNetwork, v1alpha1.DefaultNetwork, errors.Errorf(errNotGranted, kindNetwork, "default", "team-b", src, grantedNone)},
			},
			bridge: "br0", ranges: []netip.Prefix{netip.MustParsePrefix("192.168.50.0/24")},
		},
		"SelectedNamespace": {
			reason: "a namespace gets the grants that select it and those that select every namespace",
			spec:   spec,
			ns:     teamA,
			checks: []check{
				{kindNetwork, "nat", nil},
				{kindNetwork, "shared", nil},
				{kindPool, "fast", nil},
				{kindBridge, "br-lan", nil},
				{kindNetwork, "mgmt", errors.Errorf(errNotGranted, kindNetwork, "mgmt", "team-a", src, grantedA)},
			},
			bridge: "br-lan", ranges: []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24"), netip.MustParsePrefix("10.78.0.0/16")},
		},
		"OtherNamespace": {
			reason: "another namespace does not get them, and the message lists only its own grants",
			spec:   spec,
			ns:     teamB,
			checks: []check{
				{kindNetwork, "shared", nil},
				{kindPool, "fast", errors.Errorf(errNotGranted, kindPool, "fast", "team-b", src, grantedB)},
				{kindBridge, "br-lan", errors.Errorf(errNotGranted, kindBridge, "br-lan", "team-b", src, grantedB)},
			},
			bridge: "br-lan",
		},
		"NamespacedConfig": {
			reason: "a ProviderConfig serves its own namespace: its grants apply whatever they select",
			spec:   spec,
			ns:     teamB,
			checks: []check{
				{kindNetwork, "mgmt", nil},
				{kindPool, "fast", nil},
			},
			namespaced: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := For(src, tc.spec, tc.ns, tc.namespaced)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.checks {
				var err error
				switch c.kind {
				case kindPool:
					err = g.CheckPool(c.name)
				case kindNetwork:
					err = g.CheckAttachment(c.name, "")
				case kindBridge:
					err = g.CheckAttachment("", c.name)
				}
				if diff := cmp.Diff(c.want, err, test.EquateErrors()); diff != "" {
					t.Errorf("%s\n%s %s: -want, +got:\n%s", tc.reason, c.kind, c.name, diff)
				}
			}
			if tc.bridge != "" {
				if diff := cmp.Diff(tc.ranges, g.BridgeRanges(tc.bridge), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
					t.Errorf("%s\nBridgeRanges(%s): -want, +got:\n%s", tc.reason, tc.bridge, diff)
				}
			}
		})
	}
}

func TestZeroGrantRefuses(t *testing.T) {
	// A Grant nobody computed (a resource being deleted) grants nothing.
	var g Grant
	if g.CheckPool("default") == nil || g.CheckNetwork("default") == nil || g.CheckBridge("br0") == nil {
		t.Error("the zero Grant allows something")
	}
}

func TestBadBridgeRange(t *testing.T) {
	spec := v1alpha1.ProviderConfigSpec{Defaults: v1alpha1.HostDefaults{Bridge: "br0", BridgeCIDRs: []string{"fd00::/64"}}}
	_, err := For(src, spec, teamA, false)
	if diff := cmp.Diff(errors.Errorf(errBadCIDR, src, "fd00::/64", "br0"), err, test.EquateErrors()); diff != "" {
		t.Errorf("For(): -want, +got:\n%s", diff)
	}
}
