package function

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// movingDomain is a KVMDomain of another Proxy moving off host, as Crossplane lists it for the
// moves requirement.
func movingDomain(t *testing.T, ns, composite, host string) *fnv1.Resource {
	t.Helper()
	return &fnv1.Resource{Resource: structOf(t, map[string]any{
		"apiVersion": "kvm.crossplane.io/v1alpha1", "kind": "KVMDomain",
		"metadata": map[string]any{"name": composite + "-0a1b2c3d", "namespace": ns,
			"labels": map[string]any{LabelMovingFrom: host, labelComposite: composite}},
	})}
}

// TestMovesPerHost: with placement.maxMovesPerHost, a replica leaving an evacuating host starts
// its move only while fewer KVMDomains of other Proxies are moving off that host; its new
// KVMDomain carries the moving-from label the others count; a move that has begun goes on.
func TestMovesPerHost(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	oneXR := strings.Replace(replicatedXR, "replicas: 2", "replicas: 1", 1)
	one, oneStatus := settled(t, oneXR)
	st0 := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
		"domain-<id>": domainAt("192.168.122.52", false), "seed-<id>": inputReady}
	hosts := []map[string]any{hostCPC(t, "host-a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "host-b", hostOpts{})}
	policy := testPolicy + "placement: {maxMovesPerHost: 1}\n"
	cases := map[string]struct {
		reason   string
		observed map[string]map[string]any // nil: the settled Proxy on host-a
		moving   []*fnv1.Resource          // what Crossplane gave for the moves requirement; nil: not given
		given    bool
		domains  []string
		label    string // the moving-from label of the new KVMDomain; "" none
		placed   string
	}{
		"NotKnownYetStays": {
			reason:  "Until Crossplane gave the KVMDomains moving off host-a, nothing starts moving.",
			domains: []string{"domain@host-a"},
			placed:  "STATUS_CONDITION_TRUE/Placed",
		},
		"TurnTaken": {
			reason:  "Another Proxy's KVMDomain is moving off host-a: this one waits, serving on host-a.",
			moving:  []*fnv1.Resource{movingDomain(t, "team-b", "other", "host-a")},
			given:   true,
			domains: []string{"domain@host-a"},
			placed:  "STATUS_CONDITION_FALSE/MoveQueued",
		},
		"OwnNotCounted": {
			reason:  "Its own KVMDomains are not counted against it.",
			moving:  []*fnv1.Resource{movingDomain(t, "team-a", "web", "host-a")},
			given:   true,
			domains: []string{"domain-<id>@host-b", "domain@host-a"},
			label:   "host-a",
			placed:  "STATUS_CONDITION_TRUE/Placed",
		},
		"TurnFree": {
			reason:  "Nothing moves off host-a: the move starts, its new KVMDomain labelled with the host it leaves.",
			given:   true,
			domains: []string{"domain-<id>@host-b", "domain@host-a"},
			label:   "host-a",
			placed:  "STATUS_CONDITION_TRUE/Placed",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, xrWithStatus(t, oneXR, oneStatus), observe(t, one, st0))
			req.Input = st(t, policy)
			withHosts(t, req, hosts...)
			if tc.given {
				req.RequiredResources[requiredMovesPrefix+"host-a"] = &fnv1.Resources{Items: tc.moving}
			}
			rsp := runAt(t, req, now)
			d := desired(rsp)
			if diff := cmp.Diff(tc.domains, domainHosts(d)); diff != "" {
				t.Errorf("%s\ncomposed domains (-want +got):\n%s", tc.reason, diff)
			}
			label := ""
			for k, o := range d {
				if strings.HasPrefix(k, ResourceDomain+"-") {
					m, _ := o["metadata"].(map[string]any)
					l, _ := m["labels"].(map[string]any)
					label, _ = l[LabelMovingFrom].(string)
				}
			}
			if label != tc.label {
				t.Errorf("%s\nthe new KVMDomain's %s label = %q, want %q", tc.reason, LabelMovingFrom, label, tc.label)
			}
			c := conditionOf(rsp, ConditionPlaced)
			if got := c.GetStatus().String() + "/" + c.GetReason(); got != tc.placed {
				t.Errorf("%s\nPlaced = %s (%s), want %s", tc.reason, got, c.GetMessage(), tc.placed)
			}
			if r := rsp.GetRequirements().GetResources()[requiredMovesPrefix+"host-a"]; r == nil || r.GetKind() != "KVMDomain" || r.Namespace != nil ||
				r.GetMatchLabels().GetLabels()[LabelMovingFrom] != "host-a" {
				t.Errorf("%s\nthe KVMDomains moving off host-a, in every namespace, are not asked for: %v", tc.reason, r)
			}
		})
	}
}

// TestMoveBegunGoesOn: a replica whose new generation exists keeps moving however many others
// move off the host now, and once the new VM serves alone its KVMDomain loses the label, so
// it no longer takes a turn.
func TestMoveBegunGoesOn(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	oneXR := strings.Replace(replicatedXR, "replicas: 2", "replicas: 1", 1)
	d, status := settled(t, oneXR)
	hosts := []map[string]any{hostCPC(t, "host-a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "host-b", hostOpts{})}
	byHost := map[string]string{"host-a": domainAt("192.168.122.50", true), "host-b": domainAt("192.168.122.52", true)}
	call := func(moving ...*fnv1.Resource) *fnv1.RunFunctionResponse {
		t.Helper()
		req := newRequest(t, xrWithStatus(t, oneXR, status), asObserved(t, d, statusByHost(d, byHost)))
		req.Input = st(t, testPolicy+"placement: {maxMovesPerHost: 1}\n")
		withHosts(t, req, hosts...)
		req.RequiredResources[requiredMovesPrefix+"host-a"] = &fnv1.Resources{Items: moving}
		rsp := runAt(t, req, now)
		d, status = desired(rsp), xrStatusAll(rsp)
		return rsp
	}
	call() // the turn is free: the move begins
	other := movingDomain(t, "team-b", "other", "host-a")
	var rsp *fnv1.RunFunctionResponse
	for range 8 {
		prev := d
		rsp = call(other)
		if c := conditionOf(rsp, ConditionPlaced); c.GetReason() == ReasonMoveQueued {
			t.Fatalf("a move that had begun was queued: %s", c.GetMessage())
		}
		if cmp.Diff(prev, d) == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"domain-<id>@host-b"}, domainHosts(d)); diff != "" {
		t.Errorf("domains once moved (-want +got):\n%s", diff)
	}
	for k, o := range d {
		m, _ := o["metadata"].(map[string]any)
		if l, _ := m["labels"].(map[string]any); l[LabelMovingFrom] != nil {
			t.Errorf("%s still carries %s once it serves alone", k, LabelMovingFrom)
		}
	}
}

// TestMaxMovesPerHostBelowOne: a bound of 0 would stop every move; it is refused.
func TestMaxMovesPerHostBelowOne(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	oneXR := strings.Replace(replicatedXR, "replicas: 2", "replicas: 1", 1)
	d, status := settled(t, oneXR)
	req := newRequest(t, xrWithStatus(t, oneXR, status), observe(t, d, statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady}))
	req.Input = st(t, testPolicy+"placement: {maxMovesPerHost: 0}\n")
	withHosts(t, req, hostCPC(t, "host-a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "host-b", hostOpts{}))
	rsp, err := New(logging.NewNopLogger(), WithClock(func() time.Time { return now })).RunFunction(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fatals(rsp), "\n"); !strings.Contains(got, "placement.maxMovesPerHost 0 is below 1") {
		t.Errorf("fatal results %q do not refuse maxMovesPerHost 0", got)
	}
}
