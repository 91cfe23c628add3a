package function

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

const budgetPolicy = `
apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1
kind: ProxyPolicy
destinations:
  allowedRanges: [{name: libvirt-host, cidr: 192.168.122.1/32}]
budgets:
  default: {maxProxies: 10}
  namespaces:
  - {namespace: team-a, maxVCPU: 4, maxMemoryMiB: 2048, maxProxies: 3}
`

// budgetProxy is a Proxy of team-a created at the given time.
func budgetProxy(name, created string, vcpu int) string {
	return `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: ` + name + `, namespace: team-a, creationTimestamp: "` + created + `"}
spec:
  host: default # given, so that no placement is needed
  image: {baseImageName: debian-12}
  vcpu: ` + strconv.Itoa(vcpu) + `
  probe: {url: "http://192.168.122.1:8204/"}
`
}

func TestBudget(t *testing.T) {
	a := budgetProxy("a", "2026-12-01T10:00:00Z", 2)
	b := budgetProxy("b", "2026-12-01T10:00:05Z", 2)
	c := budgetProxy("c", "2026-12-01T10:00:05Z", 1) // created in the same second as b: the name orders them
	claim := `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: ProxyClaim
metadata: {name: old, namespace: team-a, creationTimestamp: "2026-11-30T10:00:00Z"}
spec: {image: {baseImageName: debian-12}, memoryMiB: 1800}
`
	other := `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: x, namespace: team-b, creationTimestamp: "2026-11-01T10:00:00Z"}
spec: {image: {baseImageName: debian-12}, vcpu: 4}
`
	cases := map[string]struct {
		reason   string
		xr       string
		proxies  []string // nil: not sent yet
		claims   []string
		want     []string // fatal results
		composed bool
	}{
		"Pending": {
			reason: "before Crossplane sends the namespace's Proxies the function asks for them and composes nothing",
			xr:     a,
		},
		"FirstFits": {
			reason:   "the earliest Proxy is admitted whatever comes after it",
			xr:       a,
			proxies:  []string{a, b, c, other},
			claims:   []string{},
			composed: true,
		},
		"SecondTakesTheLast": {
			reason:   "b is second: a holds 2 vCPUs, b asks for 2 of 4",
			xr:       b,
			proxies:  []string{a, b, c},
			claims:   []string{},
			composed: true,
		},
		"CreatedAtOnceOnlyOneTakesTheLast": {
			reason:  "b and c were created in the same second; by name b comes first and takes the last vCPUs, so c is refused, and the same order holds in both runs",
			xr:      c,
			proxies: []string{c, b, a},
			claims:  []string{},
			want:    []string{"Proxy team-a/c breaks the platform's policy: spec.vcpu: namespace team-a's budget is 4 vCPUs (policy budgets); the Proxies created before this one hold 4 and this one asks for 1"},
		},
		"ClaimsCountAndMemory": {
			reason:  "a ProxyClaim of the namespace counts too; another namespace's Proxy does not",
			xr:      a,
			proxies: []string{a, b, other},
			claims:  []string{claim},
			want:    []string{"Proxy team-a/a breaks the platform's policy: spec.memoryMiB: namespace team-a's budget is 2048 MiB of memory (policy budgets); the Proxies created before this one hold 1800 and this one asks for 512"},
		},
		"NotSeenYetComesLast": {
			reason:  "a Proxy the list lacks (a stale read) counts after every other",
			xr:      a,
			proxies: []string{b, c},
			claims:  []string{},
			want:    []string{"Proxy team-a/a breaks the platform's policy: spec.vcpu: namespace team-a's budget is 4 vCPUs (policy budgets); the Proxies created before this one hold 3 and this one asks for 2"},
		},
		"ReplicasCountSelf": {
			reason:  "a Proxy of two replicas asks for twice its vCPUs",
			xr:      strings.Replace(budgetProxy("e", "2026-12-01T11:00:00Z", 2), "  vcpu:", "  replicas: 2\n  vcpu:", 1),
			proxies: []string{a},
			claims:  []string{},
			want:    []string{"Proxy team-a/e breaks the platform's policy: spec.vcpu: namespace team-a's budget is 4 vCPUs (policy budgets); the Proxies created before this one hold 2 and this one asks for 4"},
		},
		"ReplicasCountOthers": {
			reason:  "a Proxy of two replicas created before holds twice its vCPUs",
			xr:      c,
			proxies: []string{strings.Replace(budgetProxy("early", "2026-12-01T09:00:00Z", 2), "  vcpu:", "  replicas: 2\n  vcpu:", 1), c},
			claims:  []string{},
			want:    []string{"Proxy team-a/c breaks the platform's policy: spec.vcpu: namespace team-a's budget is 4 vCPUs (policy budgets); the Proxies created before this one hold 4 and this one asks for 1"},
		},
		"MaxProxies": {
			reason:  "the fourth Proxy of a namespace with a budget of 3",
			xr:      budgetProxy("d", "2026-12-01T11:00:00Z", 1),
			proxies: []string{budgetProxy("p", "2026-12-01T09:00:00Z", 1), budgetProxy("q", "2026-12-01T09:00:01Z", 1), budgetProxy("r", "2026-12-01T09:00:02Z", 1)},
			claims:  []string{},
			want:    []string{"Proxy team-a/d breaks the platform's policy: namespace team-a's budget is 3 Proxies (policy budgets); 3 were created before this one"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, tc.xr, nil)
			req.Input = st(t, budgetPolicy)
			if tc.proxies != nil {
				req.RequiredResources = map[string]*fnv1.Resources{requiredProxies: {}, requiredClaims: {}}
				for _, p := range tc.proxies {
					req.RequiredResources[requiredProxies].Items = append(req.RequiredResources[requiredProxies].Items, &fnv1.Resource{Resource: st(t, p)})
				}
				for _, c := range tc.claims {
					req.RequiredResources[requiredClaims].Items = append(req.RequiredResources[requiredClaims].Items, &fnv1.Resource{Resource: st(t, c)})
				}
			}
			rsp := run(t, req)
			if diff := cmp.Diff(tc.want, fatals(rsp)); diff != "" {
				t.Errorf("%s\nfatal results: -want +got:\n%s", tc.reason, diff)
			}
			if got := len(rsp.GetDesired().GetResources()) > 0; got != tc.composed {
				t.Errorf("%s\ncomposed = %v, want %v", tc.reason, got, tc.composed)
			}
			if tc.want == nil {
				sel := rsp.GetRequirements().GetResources()[requiredProxies]
				if sel.GetKind() != "Proxy" || sel.GetNamespace() != "team-a" || sel.GetMatchLabels() == nil {
					t.Errorf("%s\nrequirement %s = %v, want every Proxy of team-a", tc.reason, requiredProxies, sel)
				}
			}
		})
	}
}
