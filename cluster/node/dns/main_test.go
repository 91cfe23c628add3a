package main

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestServiceName(t *testing.T) {
	cases := map[string]struct {
		fqdn           string
		wantNS, wantSv string
		wantOK         bool
	}{
		"Service":        {fqdn: "fn.crossplane-system.svc.cluster.local.", wantNS: "crossplane-system", wantSv: "fn", wantOK: true},
		"UpperCase":      {fqdn: "FN.Crossplane-System.SVC.Cluster.Local.", wantNS: "crossplane-system", wantSv: "fn", wantOK: true},
		"SearchTwice":    {fqdn: "fn.crossplane-system.crossplane-system.svc.cluster.local."},
		"NoSvcLabel":     {fqdn: "fn.crossplane-system.cluster.local."},
		"OtherDomain":    {fqdn: "fn.crossplane-system.svc.example.org."},
		"Outside":        {fqdn: "deb.debian.org."},
		"NamespaceOnly":  {fqdn: "crossplane-system.svc.cluster.local."},
		"PodHostnameish": {fqdn: "pod-0.fn.crossplane-system.svc.cluster.local."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns, sv, ok := serviceName(tc.fqdn, "cluster.local")
			if diff := cmp.Diff([]any{tc.wantNS, tc.wantSv, tc.wantOK}, []any{ns, sv, ok}); diff != "" {
				t.Errorf("serviceName(%q): -want +got:\n%s", tc.fqdn, diff)
			}
		})
	}
}

func TestReadyAddrs(t *testing.T) {
	yes, no := true, false
	slices := []*discoveryv1.EndpointSlice{
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"10.244.0.6"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
			{Addresses: []string{"10.244.0.7"}}, // unknown readiness counts as ready
		}},
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}}}},
		{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00::1"}}}},
	}
	want := []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("10.244.0.7")}
	if diff := cmp.Diff(want, readyAddrs(slices), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("readyAddrs: -want +got:\n%s", diff)
	}
}

// TestReply builds real queries, answers them and parses the answers.
func TestReply(t *testing.T) {
	z := &zone{domain: "cluster.local", lookup: func(ns, name string) ([]netip.Addr, bool) {
		switch ns + "/" + name {
		case "crossplane-system/fn":
			return []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("10.244.0.7")}, true
		case "crossplane-system/none-ready":
			return nil, true
		}
		return nil, false
	}}
	cases := map[string]struct {
		name      string
		typ       dnsmessage.Type
		wantRCode dnsmessage.RCode
		wantA     []string
	}{
		"HeadlessService": {name: "fn.crossplane-system.svc.cluster.local.", typ: dnsmessage.TypeA, wantRCode: dnsmessage.RCodeSuccess, wantA: []string{"10.244.0.5", "10.244.0.7"}},
		"AAAAIsNoData":    {name: "fn.crossplane-system.svc.cluster.local.", typ: dnsmessage.TypeAAAA, wantRCode: dnsmessage.RCodeSuccess},
		"NoReadyEndpoint": {name: "none-ready.crossplane-system.svc.cluster.local.", typ: dnsmessage.TypeA, wantRCode: dnsmessage.RCodeSuccess},
		"NoSuchService":   {name: "gone.crossplane-system.svc.cluster.local.", typ: dnsmessage.TypeA, wantRCode: dnsmessage.RCodeNameError},
		"SearchSuffix":    {name: "fn.crossplane-system.crossplane-system.svc.cluster.local.", typ: dnsmessage.TypeA, wantRCode: dnsmessage.RCodeNameError},
		"Outside":         {name: "deb.debian.org.", typ: dnsmessage.TypeA, wantRCode: dnsmessage.RCodeNameError},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := dnsmessage.Question{Name: dnsmessage.MustNewName(tc.name), Type: tc.typ, Class: dnsmessage.ClassINET}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true})
			if err := b.StartQuestions(); err != nil {
				t.Fatal(err)
			}
			if err := b.Question(q); err != nil {
				t.Fatal(err)
			}
			msg, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			out, err := z.reply(msg)
			if err != nil {
				t.Fatal(err)
			}
			var m dnsmessage.Message
			if err := m.Unpack(out); err != nil {
				t.Fatal(err)
			}
			if m.ID != 42 || !m.Response || !m.Authoritative || len(m.Questions) != 1 || m.Questions[0] != q {
				t.Fatalf("reply header/question: %+v %+v", m.Header, m.Questions)
			}
			var got []string
			for _, a := range m.Answers {
				r, ok := a.Body.(*dnsmessage.AResource)
				if !ok {
					t.Fatalf("answer %T, want A", a.Body)
				}
				got = append(got, net.IP(r.A[:]).String())
			}
			if diff := cmp.Diff([]any{tc.wantRCode, tc.wantA}, []any{m.RCode, got}); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
}
