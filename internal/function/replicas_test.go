package function

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// replicatedXR is a placed Proxy (no spec.host) with two replicas.
const replicatedXR = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-a, uid: 1b2c}
spec:
  replicas: 2
  image: {baseImageName: debian-12}
  probe: {url: "http://192.168.122.1:8204/"}
`

var reGenID = regexp.MustCompile(`[0-9a-f]{8}$`)

// masked is a resource name with its generation id replaced by <id>.
func masked(name string) string { return reGenID.ReplaceAllString(name, "<id>") }

// domainHosts are the desired KVMDomains, each as its masked resource name @ its host, sorted.
func domainHosts(d map[string]map[string]any) []string {
	var out []string
	for k, o := range d {
		if k != ResourceDomain && !strings.HasPrefix(k, ResourceDomain+"-") {
			continue
		}
		spec, _ := o["spec"].(map[string]any)
		ref, _ := spec["providerConfigRef"].(map[string]any)
		h, _ := ref["name"].(string)
		out = append(out, masked(k)+"@"+h)
	}
	sort.Strings(out)
	return out
}

// endpointIPs are the addresses the desired EndpointSlices list, each with its ready
// condition ("10.0.0.1=true").
func endpointIPs(d map[string]map[string]any) []string {
	var out []string
	for _, k := range []string{ResourceEndpoints, ResourceEndpointsPrev} {
		eps, _ := d[k]["endpoints"].([]any)
		for _, e := range eps {
			m, _ := e.(map[string]any)
			addrs, _ := m["addresses"].([]any)
			cond, _ := m["conditions"].(map[string]any)
			for _, a := range addrs {
				r, _ := json.Marshal(cond["ready"])
				out = append(out, a.(string)+"="+string(r))
			}
		}
	}
	sort.Strings(out)
	return out
}

// statusOf gives the observed status of a composed resource by its (masked) resource name.
type statusOf map[string]string

// observe turns desired resources into observed ones, each with the status its masked
// name has in st.
func observe(t *testing.T, d map[string]map[string]any, st statusOf) map[string]string {
	t.Helper()
	byName := map[string]string{}
	for k := range d {
		if s, ok := st[masked(k)]; ok {
			byName[k] = s
		}
	}
	return asObserved(t, d, byName)
}

// xrWithStatus is xr with status (as the function wrote it) carried over, as Crossplane
// does between calls.
func xrWithStatus(t *testing.T, xr string, status map[string]any) string {
	t.Helper()
	o := obj(t, xr)
	if status != nil {
		o["status"] = status
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func domainAt(ip string, ready bool) string {
	if !ready {
		return "status:\n  atProvider: {state: Running, ipv4: " + ip + "}\n  conditions: [{type: Synced, status: \"True\"}, {type: Ready, status: \"False\", message: \"readiness probe failing: connection refused\"}]\n"
	}
	return "status:\n  atProvider: {state: Running, ipv4: " + ip + "}\n  conditions: [{type: Synced, status: \"True\"}, {type: Ready, status: \"True\"}]\n"
}

const strictPolicy = testPolicy + "placement: {antiAffinity: Strict}\n"

// replicaReq is a request for xr with the observed resources and two hosts: host-a and
// host-b (host-b full when full is set), under policy.
func replicaReq(t *testing.T, xr string, observed map[string]string, policy string, full bool) *fnv1.RunFunctionRequest {
	t.Helper()
	req := newRequest(t, xr, observed)
	req.Input = st(t, policy)
	b := hostOpts{}
	if full {
		b.usedMiB = 1 << 20 // more than any ratio allows
	}
	withHosts(t, req, hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", b))
	return req
}

// settled is a Proxy with two replicas, both Ready, replica 0 at .50 on host-a and replica 1
// at .51 on host-b, its EndpointSlice and Secret observed: the desired state and the status.
func settled(t *testing.T, xr string) (map[string]map[string]any, map[string]any) {
	t.Helper()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
		"domain-r1-<id>": domainAt("192.168.122.51", true), "seed-r1-<id>": inputReady}
	var d map[string]map[string]any
	var status map[string]any
	for range 3 { // composed; observed Ready (EndpointSlice, Secret composed); those observed
		rsp := runAt(t, replicaReq(t, xrWithStatus(t, xr, status), observe(t, d, st), testPolicy, false), now)
		d, status = desired(rsp), xrStatusAll(rsp)
	}
	return d, status
}

func TestReplicas(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	one := strings.Replace(replicatedXR, "replicas: 2", "replicas: 1", 1)
	three := strings.Replace(replicatedXR, "replicas: 2", "replicas: 3", 1)
	two, twoStatus := settled(t, replicatedXR)
	// Replica 0 alone, Ready at .50 on host-a, as a Proxy of one replica is.
	single := map[string]map[string]any{}
	for k, v := range two {
		if !strings.Contains(k, "-r1-") {
			single[k] = v
		}
	}
	single[ResourceEndpoints] = endpointSliceObj(t, "team-a", "web-proxy", "192.168.122.50", 3128, true)
	singleSt := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady}
	bothSt := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
		"domain-r1-<id>": domainAt("192.168.122.51", true), "seed-r1-<id>": inputReady}
	onlyA := map[string]map[string]any{}
	for k, v := range two {
		onlyA[k] = v
	}
	onlyA[ResourceEndpoints] = endpointSliceObj(t, "team-a", "web-proxy", "192.168.122.50", 3128, true)

	type want struct {
		Domains       []string // masked resource name@host
		Endpoints     []string // ip=ready
		Replicas      any
		ReadyReplicas any
		Placed        string // status/reason
		ProxyReady    string // status
	}
	cases := map[string]struct {
		reason    string
		xr        string
		observed  map[string]string
		policy    string
		hostBFull bool
		want      want
	}{
		"ScaleUpSpreads": {
			reason:   "A second replica goes to the host without a replica; replica 0 keeps its names.",
			xr:       replicatedXR,
			observed: observe(t, single, singleSt),
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-b"}, Endpoints: []string{"192.168.122.50=true"},
				Replicas: float64(2), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"ScaleUpToThree": {
			reason:   "With two hosts, a third replica shares the host with the fewest (Preferred).",
			xr:       three,
			observed: observe(t, two, bothSt),
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-b", "domain-r2-<id>@host-a"},
				Endpoints: []string{"192.168.122.50=true", "192.168.122.51=true"},
				Replicas:  float64(3), ReadyReplicas: float64(2), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"PreferredFallsBack": {
			reason:    "When only the host of replica 0 has room, Preferred anti-affinity places replica 1 there too.",
			xr:        replicatedXR,
			observed:  observe(t, single, singleSt),
			hostBFull: true,
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-a"}, Endpoints: []string{"192.168.122.50=true"},
				Replicas: float64(2), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"StrictRefuses": {
			reason:    "Strict anti-affinity leaves replica 1 unplaced when only replica 0's host has room, and says so.",
			xr:        replicatedXR,
			observed:  observe(t, single, singleSt),
			policy:    strictPolicy,
			hostBFull: true,
			want: want{Domains: []string{"domain@host-a"}, Endpoints: []string{"192.168.122.50=true"},
				Replicas: float64(1), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_FALSE/NoHostFits", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"OnlyReadyInEndpointSlice": {
			reason: "A replica whose probe fails is not in the EndpointSlice while another is Ready.",
			xr:     xrWithStatus(t, replicatedXR, twoStatus),
			observed: observe(t, two, statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
				"domain-r1-<id>": domainAt("192.168.122.51", false), "seed-r1-<id>": inputReady}),
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-b"}, Endpoints: []string{"192.168.122.50=true"},
				Replicas: float64(2), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"AnotherReplicaServes": {
			reason: "While replica 0 is not Ready, the Proxy is Ready through replica 1, the only one in the EndpointSlice.",
			xr:     xrWithStatus(t, replicatedXR, twoStatus),
			observed: observe(t, two, statusOf{ResourceDomain: domainAt("192.168.122.50", false), ResourceSeed: inputReady,
				"domain-r1-<id>": domainAt("192.168.122.51", true), "seed-r1-<id>": inputReady}),
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-b"}, Endpoints: []string{"192.168.122.51=true"},
				Replicas: float64(2), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"ScaleDownDrains": {
			reason:   "Scaled down to 1, replica 1 leaves the EndpointSlice first and stays composed until that is seen.",
			xr:       xrWithStatus(t, one, twoStatus),
			observed: observe(t, two, bothSt),
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-b"}, Endpoints: []string{"192.168.122.50=true"},
				Replicas: float64(1), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"ScaleDownRemoves": {
			reason:   "Once the EndpointSlice is seen without replica 1, its resources leave the desired state.",
			xr:       xrWithStatus(t, one, twoStatus),
			observed: observe(t, onlyA, bothSt),
			want: want{Domains: []string{"domain@host-a"}, Endpoints: []string{"192.168.122.50=true"},
				Replicas: float64(1), ReadyReplicas: float64(1), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
		"ScaleDownRemovesTheHighest": {
			reason: "From three to two, replica 2 goes; replicas 0 and 1 stay.",
			xr:     xrWithStatus(t, replicatedXR, twoStatus),
			observed: observe(t, func() map[string]map[string]any {
				rsp := runAt(t, replicaReq(t, xrWithStatus(t, three, twoStatus), observe(t, two, bothSt), testPolicy, false), now)
				return desired(rsp)
			}(), bothSt),
			want: want{Domains: []string{"domain@host-a", "domain-r1-<id>@host-b"}, Endpoints: []string{"192.168.122.50=true", "192.168.122.51=true"},
				Replicas: float64(2), ReadyReplicas: float64(2), Placed: "STATUS_CONDITION_TRUE/Placed", ProxyReady: "STATUS_CONDITION_TRUE"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			policy := tc.policy
			if policy == "" {
				policy = testPolicy
			}
			rsp := runAt(t, replicaReq(t, tc.xr, tc.observed, policy, tc.hostBFull), now)
			d := desired(rsp)
			s := xrStatusAll(rsp)
			got := want{Domains: domainHosts(d), Endpoints: endpointIPs(d), Replicas: s["replicas"], ReadyReplicas: s["readyReplicas"]}
			if c := conditionOf(rsp, ConditionPlaced); c != nil {
				got.Placed = c.GetStatus().String() + "/" + c.GetReason()
			}
			if c := conditionOf(rsp, ConditionProxyReady); c != nil {
				got.ProxyReady = c.GetStatus().String()
			}
			sort.Strings(tc.want.Domains)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReplicasStrictSaysWhy(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rsp := runAt(t, replicaReq(t, replicatedXR, nil, strictPolicy, true), now)
	c := conditionOf(rsp, ConditionPlaced)
	if c == nil || c.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE {
		t.Fatalf("Placed = %v, want False", c)
	}
	for _, w := range []string{"1 of 2 replicas placed", "replica 1", "host-a: holds a replica of this Proxy already (anti-affinity)", "host-b: needs", "Strict"} {
		if !strings.Contains(c.GetMessage(), w) {
			t.Errorf("Placed message %q does not say %q", c.GetMessage(), w)
		}
	}
	warned := false
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING && r.GetReason() == ReasonNoHostFits {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no NoHostFits warning for the unplaced replica")
	}
	if got := domainHosts(desired(rsp)); cmp.Diff([]string{"domain@host-a"}, got) != "" {
		t.Errorf("composed domains = %v, want replica 0's only", got)
	}
}

func TestReplicasOverThePolicy(t *testing.T) {
	xr := strings.Replace(replicatedXR, "replicas: 2", "replicas: 4", 1)
	rsp := run(t, newRequest(t, xr, nil))
	f := fatals(rsp)
	if len(f) != 1 || !strings.Contains(f[0], "spec.replicas: 4 is more than the platform allows per Proxy (3, policy limits.maxReplicas)") {
		t.Errorf("fatal results = %q, want spec.replicas over limits.maxReplicas", f)
	}
}

// TestReplicasRollout edits a Proxy of two Ready replicas: the replicas are replaced one at a
// time, each new generation beside the old one, and the EndpointSlice lists two Ready VMs at
// every step.
func TestReplicasRollout(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d, status := settled(t, replicatedXR)
	edited := strings.Replace(replicatedXR, "spec:\n", "spec:\n  allowedCIDRs: [10.0.0.0/8]\n", 1)
	old := map[string]bool{}
	for k := range d {
		if strings.HasPrefix(k, ResourceDomain) {
			old[k] = true
		}
	}
	// Every domain observed Ready: the old ones at .50 (replica 0) and .51 (replica 1), the
	// new ones at .60 and .61.
	st := func(d map[string]map[string]any) map[string]string {
		s := map[string]string{}
		for k := range d {
			switch {
			case k == ResourceDomain:
				s[k] = domainAt("192.168.122.50", true)
			case strings.HasPrefix(k, ResourceDomain+"-r1-") && old[k]:
				s[k] = domainAt("192.168.122.51", true)
			case strings.HasPrefix(k, ResourceDomain+"-r1-"):
				s[k] = domainAt("192.168.122.61", true)
			case strings.HasPrefix(k, ResourceDomain+"-"):
				s[k] = domainAt("192.168.122.60", true)
			case strings.HasPrefix(k, ResourceSeed):
				s[k] = inputReady
			}
		}
		return s
	}
	type step struct {
		Domains   []string
		Endpoints []string
		Secret    any
		Phase     any
	}
	var got []step
	for i := 0; i < 12; i++ {
		rsp := runAt(t, replicaReq(t, xrWithStatus(t, edited, status), asObserved(t, d, st(d)), testPolicy, false), now)
		prev := d
		d, status = desired(rsp), xrStatusAll(rsp)
		if cmp.Diff(prev, d) == "" {
			break // settled
		}
		s := step{Domains: domainHosts(d), Endpoints: endpointIPs(d), Secret: status["ip"], Phase: status["phase"]}
		got = append(got, s)
		ready := 0
		for _, e := range s.Endpoints {
			if strings.HasSuffix(e, "=true") {
				ready++
			}
		}
		if ready < 2 {
			t.Errorf("step %d: the EndpointSlice lists %d Ready VMs, want at least 2: %v", i, ready, s.Endpoints)
		}
	}
	a0, a1n, b1, b1n := "domain@host-a", "domain-<id>@host-a", "domain-r1-<id>@host-b", "domain-r1-<id>@host-b"
	want := []step{
		// Replica 0's new generation beside its old one; replica 1 waits.
		{Domains: []string{a0, a1n, b1}, Endpoints: []string{"192.168.122.50=true", "192.168.122.51=true"}, Secret: "192.168.122.50", Phase: PhaseUpdating},
		// Ready: it takes replica 0's place in the EndpointSlice, beside replica 1.
		{Domains: []string{a0, a1n, b1}, Endpoints: []string{"192.168.122.51=true", "192.168.122.60=true"}, Secret: "192.168.122.50", Phase: PhaseUpdating},
		// The EndpointSlice seen on it: the Secret follows.
		{Domains: []string{a0, a1n, b1}, Endpoints: []string{"192.168.122.51=true", "192.168.122.60=true"}, Secret: "192.168.122.60", Phase: PhaseUpdating},
		// Replica 0 replaced, its old generation gone: replica 1's new one beside its old one.
		{Domains: []string{a1n, b1, b1n}, Endpoints: []string{"192.168.122.51=true", "192.168.122.60=true"}, Secret: "192.168.122.60", Phase: PhaseUpdating},
		{Domains: []string{a1n, b1, b1n}, Endpoints: []string{"192.168.122.60=true", "192.168.122.61=true"}, Secret: "192.168.122.60", Phase: PhaseUpdating},
		// The EndpointSlice seen on it: replica 1's old generation goes.
		{Domains: []string{a1n, b1n}, Endpoints: []string{"192.168.122.60=true", "192.168.122.61=true"}, Secret: "192.168.122.60", Phase: PhaseReady},
	}
	for _, w := range want {
		sort.Strings(w.Domains)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the roll-out over two replicas (-want +got):\n%s", diff)
	}
}

// TestReplicasPortChange rolls a port change over two replicas: while one replica listens
// on the new port and the other on the old, the Service has both ports and each EndpointSlice
// lists its replicas at the port they listen on, two Ready VMs at every step.
func TestReplicasPortChange(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d, status := settled(t, replicatedXR)
	edited := strings.Replace(replicatedXR, "spec:\n", "spec:\n  port: 8080\n", 1)
	old := map[string]bool{}
	for k := range d {
		old[k] = true
	}
	ipOf := func(k string) string {
		switch {
		case k == ResourceDomain:
			return "192.168.122.50"
		case strings.HasPrefix(k, ResourceDomain+"-r1-") && old[k]:
			return "192.168.122.51"
		case strings.HasPrefix(k, ResourceDomain+"-r1-"):
			return "192.168.122.61"
		default:
			return "192.168.122.60"
		}
	}
	listens := map[string]float64{"192.168.122.50": 3128, "192.168.122.51": 3128, "192.168.122.60": 8080, "192.168.122.61": 8080}
	sawPrev := false
	for i := 0; i < 12; i++ {
		s := map[string]string{}
		for k := range d {
			switch {
			case strings.HasPrefix(k, ResourceDomain):
				s[k] = domainAt(ipOf(k), true)
			case strings.HasPrefix(k, ResourceSeed):
				s[k] = inputReady
			}
		}
		rsp := runAt(t, replicaReq(t, xrWithStatus(t, edited, status), asObserved(t, d, s), testPolicy, false), now)
		prev := d
		d, status = desired(rsp), xrStatusAll(rsp)
		if cmp.Diff(prev, d) == "" {
			break
		}
		ready := 0
		for _, key := range []string{ResourceEndpoints, ResourceEndpointsPrev} {
			eps, ok := d[key]
			if !ok {
				continue
			}
			sawPrev = sawPrev || key == ResourceEndpointsPrev
			ports, _ := eps["ports"].([]any)
			for _, p := range ports {
				port := p.(map[string]any)["port"].(float64)
				for _, e := range eps["endpoints"].([]any) {
					for _, a := range e.(map[string]any)["addresses"].([]any) {
						if listens[a.(string)] != port {
							t.Errorf("step %d: EndpointSlice %s lists %s at port %v; it listens on %v", i, key, a, port, listens[a.(string)])
						}
					}
				}
			}
			ready += len(eps["endpoints"].([]any))
		}
		if ready < 2 {
			t.Errorf("step %d: %d VMs listed, want at least 2: %v", i, ready, endpointIPs(d))
		}
	}
	if !sawPrev {
		t.Errorf("the replicas on the old port never had an EndpointSlice of their own")
	}
	if got := endpointIPs(d); cmp.Diff([]string{"192.168.122.60=true", "192.168.122.61=true"}, got) != "" {
		t.Errorf("EndpointSlice once rolled = %v, want the new VMs", got)
	}
	if _, ok := d[ResourceEndpointsPrev]; ok {
		t.Errorf("the old port's EndpointSlice outlives the roll-out")
	}
	svc := d[ResourceService]["spec"].(map[string]any)["ports"].([]any)
	if len(svc) != 1 || svc[0].(map[string]any)["port"] != float64(8080) {
		t.Errorf("Service ports once rolled = %v, want 8080 only", svc)
	}
}

func TestOneAtATime(t *testing.T) {
	gen := func(id string, exists bool) *generation { return &generation{id: id, exists: exists} }
	rolling := func(r int, from, to *generation) *replicaPlan {
		return &replicaPlan{r: r, want: to, pl: plan{compose: []*generation{from, to}, endpoints: from, secret: from, from: from, to: to}}
	}
	current := func(r int, g *generation) *replicaPlan {
		return &replicaPlan{r: r, want: g, pl: plan{compose: []*generation{g}, endpoints: g, secret: g}}
	}
	// summary: each replica's composed ids.
	sum := func(ps []*replicaPlan) []string {
		var out []string
		for _, p := range ps {
			var ids []string
			for _, g := range p.pl.compose {
				ids = append(ids, g.id)
			}
			out = append(out, strings.Join(ids, ","))
		}
		return out
	}
	cases := map[string]struct {
		reason string
		plans  func() []*replicaPlan
		failed *failure
		want   []string
	}{
		"LowestFirst": {
			reason: "With no new generation composed yet, the lowest replica rolls; the others keep their serving one.",
			plans: func() []*replicaPlan {
				return []*replicaPlan{rolling(0, gen("a0", true), gen("b0", false)), rolling(1, gen("a1", true), gen("b1", false))}
			},
			want: []string{"a0,b0", "a1"},
		},
		"TheOneUnderWayGoesOn": {
			reason: "A replica whose new generation exists goes on, even when a lower one has a change too.",
			plans: func() []*replicaPlan {
				return []*replicaPlan{rolling(0, gen("a0", true), gen("c0", false)), rolling(1, gen("a1", true), gen("b1", true))}
			},
			want: []string{"a0", "a1,b1"},
		},
		"DoneReplicasUntouched": {
			reason: "A replica on the spec's generation is as planned; the next one with a change rolls.",
			plans: func() []*replicaPlan {
				return []*replicaPlan{current(0, gen("b0", true)), rolling(1, gen("a1", true), gen("b1", false))}
			},
			want: []string{"b0", "a1,b1"},
		},
		"AFailureHoldsEveryReplica": {
			reason: "While the spec's generation failed on replica 0, replica 1 does not try it.",
			plans: func() []*replicaPlan {
				held := current(0, gen("a0", true))
				held.want = gen("b0", true) // the spec's generation, dropped past the bound
				return []*replicaPlan{held, rolling(1, gen("a1", true), gen("b1", false))}
			},
			failed: &failure{ID: "b0", Replica: 0},
			want:   []string{"a0", "a1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ps := tc.plans()
			oneAtATime(ps, tc.failed)
			if diff := cmp.Diff(tc.want, sum(ps)); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestReplicasRolloutFailsOnReplica1: replica 0 is replaced, replica 1's new generation is
// not Ready within the bound: it is dropped, replica 1's old VM keeps serving beside replica
// 0's new one, and status.failedGeneration names replica 1.
func TestReplicasRolloutFailsOnReplica1(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d, status := settled(t, replicatedXR)
	edited := strings.Replace(replicatedXR, "spec:\n", "spec:\n  allowedCIDRs: [10.0.0.0/8]\n", 1)
	old := map[string]bool{}
	for k := range d {
		old[k] = true
	}
	st := func(d map[string]map[string]any) map[string]string {
		s := map[string]string{}
		for k := range d {
			switch {
			case k == ResourceDomain:
				s[k] = domainAt("192.168.122.50", true)
			case strings.HasPrefix(k, ResourceDomain+"-r1-") && old[k]:
				s[k] = domainAt("192.168.122.51", true)
			case strings.HasPrefix(k, ResourceDomain+"-r1-"):
				s[k] = "metadata: {creationTimestamp: \"2026-01-01T11:00:00Z\"}\n" + domainAt("192.168.122.61", false)
			case strings.HasPrefix(k, ResourceDomain+"-"):
				s[k] = domainAt("192.168.122.60", true)
			case strings.HasPrefix(k, ResourceSeed):
				s[k] = inputReady
			}
		}
		return s
	}
	var rsp *fnv1.RunFunctionResponse
	for i := 0; i < 12; i++ {
		rsp = runAt(t, replicaReq(t, xrWithStatus(t, edited, status), asObserved(t, d, st(d)), testPolicy, false), now)
		prev := d
		d, status = desired(rsp), xrStatusAll(rsp)
		if cmp.Diff(prev, d) == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"domain-<id>@host-a", "domain-r1-<id>@host-b"}, domainHosts(d)); diff != "" {
		t.Errorf("domains once replica 1's replacement failed (-want +got):\n%s", diff)
	}
	for k := range d {
		if strings.HasPrefix(k, ResourceDomain+"-r1-") && !old[k] {
			t.Errorf("replica 1's failed generation %s is still composed", k)
		}
	}
	if diff := cmp.Diff([]string{"192.168.122.51=true", "192.168.122.60=true"}, endpointIPs(d)); diff != "" {
		t.Errorf("EndpointSlice (-want +got):\n%s", diff)
	}
	fg, _ := status["failedGeneration"].(map[string]any)
	if fg["replica"] != float64(1) || !strings.Contains(fmt.Sprint(fg["message"]), "was not Ready within 15m0s") {
		t.Errorf("status.failedGeneration = %v, want replica 1's, not Ready within the bound", fg)
	}
	if c := conditionOf(rsp, ConditionUpToDate); c == nil || c.GetReason() != ReasonReplacementFailed {
		t.Errorf("UpToDate = %v, want ReplacementFailed", c)
	}
}

// TestReplicasEvacuate: replica 1's host evacuates. With another host that fits, replica 1
// gets a new generation there, composed beside the one it has on the evacuating host (which
// serves until the new one is Ready); with none, it stays, and Placed says why.
func TestReplicasEvacuate(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	two, twoStatus := settled(t, replicatedXR)
	bothSt := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
		"domain-r1-<id>": domainAt("192.168.122.51", true), "seed-r1-<id>": inputReady}
	evacuating := hostOpts{cordoned: true, evacuate: true}
	cases := map[string]struct {
		reason  string
		hosts   []map[string]any
		domains []string
		placed  string
		message string
	}{
		"MovesToAnotherHost": {
			reason:  "replica 1 is placed anew on host-c, apart from replica 0; its generation on host-b stays until the new one serves",
			hosts:   []map[string]any{hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", evacuating), hostCPC(t, "host-c", hostOpts{})},
			domains: []string{"domain@host-a", "domain-r1-<id>@host-b", "domain-r1-<id>@host-c"},
			placed:  "STATUS_CONDITION_TRUE/Placed",
			message: "its 2 replicas are on host-a, host-c",
		},
		"NowhereToGo": {
			reason:  "with no other host but replica 0's (Strict), replica 1 stays on host-b, serving",
			hosts:   []map[string]any{hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", evacuating)},
			domains: []string{"domain@host-a", "domain-r1-<id>@host-b"},
			placed:  "STATUS_CONDITION_FALSE/EvacuationBlocked",
			message: "replica 1: host host-b is evacuating, but no other host fits",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, xrWithStatus(t, replicatedXR, twoStatus), observe(t, two, bothSt))
			req.Input = st(t, strictPolicy)
			withHosts(t, req, tc.hosts...)
			rsp := runAt(t, req, now)
			sort.Strings(tc.domains)
			if diff := cmp.Diff(tc.domains, domainHosts(desired(rsp))); diff != "" {
				t.Errorf("%s\ncomposed domains (-want +got):\n%s", tc.reason, diff)
			}
			c := conditionOf(rsp, ConditionPlaced)
			if c == nil {
				t.Fatalf("%s\nno Placed condition", tc.reason)
			}
			if got := c.GetStatus().String() + "/" + c.GetReason(); got != tc.placed {
				t.Errorf("%s\nPlaced = %s, want %s", tc.reason, got, tc.placed)
			}
			if !strings.Contains(c.GetMessage(), tc.message) {
				t.Errorf("%s\nPlaced message %q does not say %q", tc.reason, c.GetMessage(), tc.message)
			}
		})
	}
}
