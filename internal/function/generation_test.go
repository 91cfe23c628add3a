package function

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

func TestGenerationID(t *testing.T) {
	base := Def{Host: "a", BaseImage: "debian-12", VCPU: 1, MemoryMiB: 512, Port: 3128, Probe: "http://x/ 204", UserData: "#cloud-config\n"}
	cases := map[string]struct {
		reason string
		change func(d *Def)
		same   bool
	}{
		"Unchanged":   {reason: "An equal definition has the same id.", change: func(*Def) {}, same: true},
		"Host":        {reason: "Another host is another VM.", change: func(d *Def) { d.Host = "b" }},
		"Image":       {reason: "Another image is another VM.", change: func(d *Def) { d.BaseImage = "debian-13" }},
		"ImageURL":    {reason: "An image to cache is not the shared one.", change: func(d *Def) { d.BaseImage, d.ImageURL = "", "https://x" }},
		"VCPU":        {reason: "vCPUs define the VM.", change: func(d *Def) { d.VCPU = 2 }},
		"Memory":      {reason: "Memory defines the VM.", change: func(d *Def) { d.MemoryMiB = 1024 }},
		"Disk":        {reason: "The disk defines the VM.", change: func(d *Def) { d.DiskSizeGiB = 8 }},
		"Port":        {reason: "The port defines the VM.", change: func(d *Def) { d.Port = 8080 }},
		"Probe":       {reason: "The probe is the generation's gate.", change: func(d *Def) { d.Probe = "http://y/ 204" }},
		"SeedContent": {reason: "The seed's content (squid's configuration) defines the VM.", change: func(d *Def) { d.UserData += "x" }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := base
			tc.change(&d)
			a, b := GenerationID(base), GenerationID(d)
			if len(a) != genIDLen || strings.Trim(a, "0123456789abcdef") != "" {
				t.Fatalf("%s\nGenerationID = %q, want %d hex characters", tc.reason, a, genIDLen)
			}
			if (a == b) != tc.same {
				t.Errorf("%s\nGenerationID before %q, after %q: same = %v, want %v", tc.reason, a, b, a == b, tc.same)
			}
		})
	}
}

func TestChangedFields(t *testing.T) {
	base := Def{Host: "a", BaseImage: "debian-12", VCPU: 1, MemoryMiB: 512, Port: 3128, UserData: "u1"}
	cases := map[string]struct {
		reason string
		change func(d *Def)
		want   []string
	}{
		"Squid": {reason: "A seed change with the same port is squid's configuration.",
			change: func(d *Def) { d.UserData = "u2" }, want: []string{"squid configuration (allowedCIDRs, allowedDomains, squidDirectives, sshAuthorizedKeys or the platform's rules)"}},
		"Port": {reason: "A port change changes the seed too: only the port is named.",
			change: func(d *Def) { d.Port, d.UserData = 8080, "u2" }, want: []string{"port"}},
		"Several": {reason: "Every changed field is named, in a stable order.",
			change: func(d *Def) { d.VCPU, d.MemoryMiB, d.BaseImage = 2, 1024, "x" }, want: []string{"image", "vcpu", "memoryMiB"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := base
			tc.change(&d)
			if diff := cmp.Diff(tc.want, ChangedFields(base, d)); diff != "" {
				t.Errorf("%s\nChangedFields (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestDefProxyRoundTrip(t *testing.T) {
	disk := int32(8)
	p := Proxy{Host: "h", ImageURL: "https://x/i.qcow2", ImageSHA256: "ab", VCPU: 2, MemoryMiB: 1024, DiskSizeGiB: &disk, Port: 8080, ProbeURL: "http://o/", ProbeStatus: 200}
	d := DefOf(p, "ud")
	if diff := cmp.Diff(d, DefOf(d.Proxy(), "ud")); diff != "" {
		t.Errorf("a definition does not render the Proxy it came from (-want +got):\n%s", diff)
	}
}

func TestPlanRollout(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	old := &generation{id: "old", exists: true, ready: true, ip: "10.0.0.1", def: Def{Port: 3128, UserData: "a"}, phase: PhaseReady}
	booting := &generation{id: "new", exists: true, ip: "", def: Def{Port: 3128, UserData: "b"}, phase: PhaseBooting, message: "waiting", created: now.Add(-time.Minute)}
	ready := &generation{id: "new", exists: true, ready: true, ip: "10.0.0.2", def: Def{Port: 3128, UserData: "b"}, phase: PhaseReady, created: now.Add(-time.Minute)}
	late := &generation{id: "new", exists: true, ip: "10.0.0.2", def: Def{Port: 3128, UserData: "b"}, phase: PhaseProbing, message: "probe failing", created: now.Add(-16 * time.Minute)}
	onOld := cutOver{endpointIPs: map[string]bool{"10.0.0.1": true}, secretIP: "10.0.0.1", secretPort: 3128}
	epNew := cutOver{endpointIPs: map[string]bool{"10.0.0.2": true}, secretIP: "10.0.0.1", secretPort: 3128}
	allNew := cutOver{endpointIPs: map[string]bool{"10.0.0.2": true}, secretIP: "10.0.0.2", secretPort: 3128}

	type summary struct{ Compose, Endpoints, Secret, Failed string }
	sum := func(p plan) summary {
		ids := make([]string, 0, len(p.compose))
		for _, g := range p.compose {
			ids = append(ids, g.id)
		}
		s := summary{Compose: strings.Join(ids, ","), Endpoints: p.endpoints.id, Secret: p.secret.id}
		if p.failed != nil {
			s.Failed = p.failed.ID
		}
		return s
	}
	cases := map[string]struct {
		reason          string
		want, serving   *generation
		failed          *failure
		seen            cutOver
		expect          summary
		expectFailedNow bool
	}{
		"First": {reason: "Without a serving generation the wanted one is the only one.",
			want: booting, expect: summary{Compose: "new", Endpoints: "new", Secret: "new"}},
		"Current": {reason: "The serving generation is the spec's: only it.",
			want: old, serving: old, seen: onOld, expect: summary{Compose: "old", Endpoints: "old", Secret: "old"}},
		"NewBooting": {reason: "A new generation boots beside the old one, which keeps serving.",
			want: booting, serving: old, seen: onOld, expect: summary{Compose: "old,new", Endpoints: "old", Secret: "old"}},
		"NewReady": {reason: "Once Ready the new generation takes the EndpointSlice; the Secret waits.",
			want: ready, serving: old, seen: onOld, expect: summary{Compose: "old,new", Endpoints: "new", Secret: "old"}},
		"EndpointsOnNew": {reason: "Once the EndpointSlice is seen on the new one, the Secret follows.",
			want: ready, serving: old, seen: epNew, expect: summary{Compose: "old,new", Endpoints: "new", Secret: "new"}},
		"OldGone": {reason: "Once the Secret is seen on the new one, the old one drops out.",
			want: ready, serving: old, seen: allNew, expect: summary{Compose: "new", Endpoints: "new", Secret: "new"}},
		"PastTheBound": {reason: "A new generation not Ready within the bound is dropped and remembered.",
			want: late, serving: old, seen: onOld, expect: summary{Compose: "old", Endpoints: "old", Secret: "old", Failed: "new"}, expectFailedNow: true},
		"NotRetried": {reason: "A failed generation is not composed again while the spec asks for it.",
			want: &generation{id: "new", def: Def{UserData: "b"}}, serving: old, seen: onOld, failed: &failure{ID: "new", Message: "m"},
			expect: summary{Compose: "old", Endpoints: "old", Secret: "old", Failed: "new"}},
		"NeverServed": {reason: "A serving generation that never had an address serves nobody: replaced at once.",
			want: booting, serving: &generation{id: "old", exists: true, def: Def{Port: 3128, UserData: "a"}, phase: PhaseError, message: "no room"},
			expect: summary{Compose: "new", Endpoints: "new", Secret: "new"}},
		"AnotherEditStartsOver": {reason: "A failure of another generation does not hold a new edit.",
			want: booting, serving: old, seen: onOld, failed: &failure{ID: "older", Message: "m"},
			expect: summary{Compose: "old,new", Endpoints: "old", Secret: "old"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := planRollout(tc.want, tc.serving, tc.failed, tc.seen, now, 15*time.Minute)
			if diff := cmp.Diff(tc.expect, sum(p)); diff != "" {
				t.Errorf("%s\nplanRollout (-want +got):\n%s", tc.reason, diff)
			}
			if p.failedNow != tc.expectFailedNow {
				t.Errorf("%s\nfailedNow = %v, want %v", tc.reason, p.failedNow, tc.expectFailedNow)
			}
		})
	}
}

// asObserved turns desired resources into observed ones (JSON is YAML), with status merged
// into the ones named.
func asObserved(t *testing.T, d map[string]map[string]any, status map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, o := range d {
		c := map[string]any{}
		for k, v := range o {
			c[k] = v
		}
		if s, ok := status[name]; ok {
			for k, v := range obj(t, s) {
				c[k] = v
			}
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

const (
	domainReadyAt50 = `
status:
  atProvider: {state: Running, ipv4: 192.168.122.50}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "True"}]
`
	inputReady = `
status:
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "True"}]
`
)

func keysOf(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func conditionOf(rsp *fnv1.RunFunctionResponse, typ string) *fnv1.Condition {
	for _, c := range rsp.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func runAt(t *testing.T, req *fnv1.RunFunctionRequest, now time.Time) *fnv1.RunFunctionResponse {
	t.Helper()
	rsp, err := New(logging.NewNopLogger(), WithClock(func() time.Time { return now })).RunFunction(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	mustNoFatal(t, rsp)
	return rsp
}

// withStatus puts status (YAML) into the XR.
func withStatus(xr, status string) string { return xr + "status:\n" + status }

// TestRollout walks a Proxy through an edit: the first generation Ready and serving (composed
// without an id, as Proxies before generations were, and kept as it is), then allowedCIDRs
// edited: the new generation booting, Ready, the EndpointSlice then the Secret on it, the old
// one gone.
func TestRollout(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := desired(runAt(t, newRequest(t, minimalXR, nil), now))
	// The legacy (first) generation Ready, with its Service, EndpointSlice and Secret.
	first[ResourceEndpoints] = endpointSliceObj(t, "team-a", "web-proxy", "192.168.122.50", 3128, true)
	first[ResourceSecret] = secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.50", "3128")
	obs := asObserved(t, first, map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady})

	t.Run("LegacyKept", func(t *testing.T) {
		rsp := runAt(t, newRequest(t, minimalXR, obs), now)
		got := desired(rsp)
		if diff := cmp.Diff([]string{ResourceDomain, ResourceEndpoints, ResourceSecret, ResourceSeed, ResourceService}, keysOf(got)); diff != "" {
			t.Errorf("an unchanged Proxy composed by names without an id is not kept as it is (-want +got):\n%s", diff)
		}
		if c := conditionOf(rsp, ConditionUpToDate); c == nil || c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE {
			t.Errorf("UpToDate = %v, want True", c)
		}
		if s := xrStatusAll(rsp); s["phase"] != PhaseReady {
			t.Errorf("phase = %v, want Ready", s["phase"])
		}
	})

	edited := strings.Replace(minimalXR, "spec:\n", "spec:\n  allowedCIDRs: [10.0.0.0/8]\n", 1)
	rsp := runAt(t, newRequest(t, edited, obs), now)
	got := desired(rsp)
	var newID string
	for k := range got {
		if id, ok := strings.CutPrefix(k, ResourceDomain+"-"); ok {
			newID = id
		}
	}
	t.Run("NewComposedBeside", func(t *testing.T) {
		want := []string{ResourceDomain, ResourceDomain + "-" + newID, ResourceEndpoints, ResourceSecret, ResourceSeed, ResourceSeed + "-" + newID, ResourceService}
		if newID == "" || cmp.Diff(want, keysOf(got)) != "" {
			t.Fatalf("an edit does not compose a new generation beside the old: %v", keysOf(got))
		}
		name := got[ResourceDomain+"-"+newID]["metadata"].(map[string]any)["name"]
		if name != "web-"+newID {
			t.Errorf("new KVMDomain named %v, want web-%s", name, newID)
		}
		if ref := got[ResourceDomain+"-"+newID]["spec"].(map[string]any)["forProvider"].(map[string]any)["seedVolumeRef"]; cmp.Diff(map[string]any{"name": "web-" + newID + "-seed"}, ref) != "" {
			t.Errorf("new KVMDomain's seedVolumeRef = %v", ref)
		}
		if hn := got[ResourceSeed+"-"+newID]["spec"].(map[string]any)["forProvider"].(map[string]any)["hostname"]; hn != "web" {
			t.Errorf("new generation's guest host name = %v, want web (the Proxy's)", hn)
		}
		// The old generation is composed as it was, its user-data unchanged.
		if cmp.Diff(first[ResourceSeed], got[ResourceSeed]) != "" || cmp.Diff(first[ResourceDomain], got[ResourceDomain]) != "" {
			t.Errorf("the serving generation is not kept as it was")
		}
		if d := cmp.Diff(first[ResourceEndpoints], got[ResourceEndpoints]); d != "" {
			t.Errorf("EndpointSlice left the old generation before the new one is Ready:\n%s", d)
		}
		if d := cmp.Diff(first[ResourceSecret], got[ResourceSecret]); d != "" {
			t.Errorf("Secret left the old generation before the new one is Ready:\n%s", d)
		}
		s := xrStatusAll(rsp)
		if s["phase"] != PhaseUpdating || s["generation"] == newID || s["ip"] != "192.168.122.50" {
			t.Errorf("status = %v, want Updating, serving the old generation at .50", s)
		}
		if gs, _ := s["generations"].([]any); len(gs) != 2 {
			t.Errorf("status.generations = %v, want both", s["generations"])
		}
		c := conditionOf(rsp, ConditionUpToDate)
		if c == nil || c.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE || !strings.Contains(c.GetMessage(), "squid configuration") {
			t.Errorf("UpToDate = %v, want False naming the squid configuration", c)
		}
		// The new generation does not hold the Proxy's readiness.
		if r := rsp.GetDesired().GetResources()[ResourceDomain+"-"+newID].GetReady(); r != fnv1.Ready_READY_TRUE {
			t.Errorf("new KVMDomain ready = %v, want READY_TRUE (the old one serves)", r)
		}
	})

	// The new generation observed booting, then Ready at .60.
	step := func(d map[string]map[string]any, st map[string]string, xr string) (*fnv1.RunFunctionResponse, map[string]map[string]any) {
		rsp := runAt(t, newRequest(t, xr, asObserved(t, d, st)), now)
		return rsp, desired(rsp)
	}
	statusOld := map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady, ResourceSeed + "-" + newID: inputReady,
		ResourceDomain + "-" + newID: `
metadata: {creationTimestamp: "2026-01-01T11:59:00Z"}
status:
  atProvider: {state: Running}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "False", message: "running; waiting for the guest's IPv4 address"}]
`}
	xrServing := withStatus(edited, "  generation: "+xrStatusAll(rsp)["generation"].(string)+"\n")
	_, booting := step(got, statusOld, xrServing)
	if d := cmp.Diff(first[ResourceEndpoints], booting[ResourceEndpoints]); d != "" {
		t.Errorf("EndpointSlice switched to a booting generation:\n%s", d)
	}
	statusOld[ResourceDomain+"-"+newID] = `
metadata: {creationTimestamp: "2026-01-01T11:59:00Z"}
status:
  atProvider: {state: Running, ipv4: 192.168.122.60}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "True"}]
`
	_, readyNew := step(booting, statusOld, xrServing)
	if d := cmp.Diff(endpointSliceObj(t, "team-a", "web-proxy", "192.168.122.60", 3128, true), readyNew[ResourceEndpoints]); d != "" {
		t.Errorf("EndpointSlice does not switch to the Ready new generation:\n%s", d)
	}
	if d := cmp.Diff(first[ResourceSecret], readyNew[ResourceSecret]); d != "" {
		t.Errorf("Secret switched before the EndpointSlice was seen on the new generation:\n%s", d)
	}
	_, secNew := step(readyNew, statusOld, xrServing)
	wantSecret := secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.60", "3128")
	if d := cmp.Diff(wantSecret, secNew[ResourceSecret]); d != "" {
		t.Errorf("Secret does not follow the EndpointSlice:\n%s", d)
	}
	if _, ok := secNew[ResourceDomain]; !ok {
		t.Errorf("old generation dropped before the Secret was seen on the new one")
	}
	rspDone, done := step(secNew, statusOld, xrServing)
	if diff := cmp.Diff([]string{ResourceDomain + "-" + newID, ResourceEndpoints, ResourceSecret, ResourceSeed + "-" + newID, ResourceService}, keysOf(done)); diff != "" {
		t.Errorf("old generation not dropped once the Secret serves the new one (-want +got):\n%s", diff)
	}
	if s := xrStatusAll(rspDone); s["generation"] != newID || s["phase"] != PhaseReady || s["ip"] != "192.168.122.60" {
		t.Errorf("status once replaced = %v", s)
	}
}

// TestRolloutFailsPastTheBound: a new generation not Ready within the policy's bound is
// dropped, the old one keeps serving, the Proxy says why, and it is not composed again.
func TestRolloutFailsPastTheBound(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := desired(runAt(t, newRequest(t, minimalXR, nil), now))
	first[ResourceSecret] = secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.50", "3128")
	edited := strings.Replace(minimalXR, "spec:\n", "spec:\n  vcpu: 2\n", 1)
	rsp := runAt(t, newRequest(t, edited, asObserved(t, first, map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady})), now)
	got := desired(rsp)
	var newID string
	for k := range got {
		if id, ok := strings.CutPrefix(k, ResourceDomain+"-"); ok {
			newID = id
		}
	}
	if newID == "" {
		t.Fatalf("no new generation: %v", keysOf(got))
	}
	st := map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady, ResourceSeed + "-" + newID: inputReady,
		ResourceDomain + "-" + newID: `
metadata: {creationTimestamp: "2026-01-01T11:40:00Z"}
status:
  atProvider: {state: Running, ipv4: 192.168.122.60}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "False", message: "readiness probe failing: connection refused"}]
`}
	xr := withStatus(edited, "  generation: "+xrStatusAll(rsp)["generation"].(string)+"\n")
	failRsp := runAt(t, newRequest(t, xr, asObserved(t, got, st)), now)
	after := desired(failRsp)
	if _, ok := after[ResourceDomain+"-"+newID]; ok {
		t.Errorf("a new generation past the bound is still composed")
	}
	if _, ok := after[ResourceDomain]; !ok {
		t.Errorf("the old generation was dropped with the failed one")
	}
	s := xrStatusAll(failRsp)
	fg, _ := s["failedGeneration"].(map[string]any)
	if fg["id"] != newID || !strings.Contains(fg["message"].(string), "readiness probe failing: connection refused") || !strings.Contains(fg["message"].(string), "vcpu") {
		t.Errorf("status.failedGeneration = %v, want the new id, the KVMDomain's message and the field", fg)
	}
	if s["ip"] != "192.168.122.50" || s["phase"] != PhaseReady {
		t.Errorf("status after the failure = %v, want the old generation serving", s)
	}
	if c := conditionOf(failRsp, ConditionUpToDate); c == nil || c.GetReason() != ReasonReplacementFailed {
		t.Errorf("UpToDate = %v, want ReplacementFailed", c)
	}
	warned := false
	for _, r := range failRsp.GetResults() {
		warned = warned || r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING
	}
	if !warned {
		t.Errorf("no warning for the failed generation")
	}

	// Next call: the failed generation is remembered and not composed again.
	xr2 := withStatus(edited, "  generation: "+s["generation"].(string)+"\n  failedGeneration: {id: "+newID+", message: m}\n")
	again := runAt(t, newRequest(t, xr2, asObserved(t, after, map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady})), now.Add(time.Hour))
	if _, ok := desired(again)[ResourceDomain+"-"+newID]; ok {
		t.Errorf("a failed generation was composed again without a spec change")
	}
	if xrStatusAll(again)["failedGeneration"] == nil {
		t.Errorf("the failure is forgotten while the spec still asks for it")
	}
	// A further edit starts over.
	edited2 := strings.Replace(edited, "vcpu: 2", "vcpu: 3", 1)
	xr3 := withStatus(edited2, "  generation: "+s["generation"].(string)+"\n  failedGeneration: {id: "+newID+", message: m}\n")
	over := desired(runAt(t, newRequest(t, xr3, asObserved(t, after, map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady})), now))
	if len(over) != len(after)+2 {
		t.Errorf("a further edit does not compose a new generation: %v", keysOf(over))
	}
}

// TestRolloutPortChange: while a new generation on another port takes over, the Service keeps
// the old port (to the new guest) so the Secret's old url keeps answering until it switches.
func TestRolloutPortChange(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := desired(runAt(t, newRequest(t, minimalXR, nil), now))
	first[ResourceSecret] = secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.50", "3128")
	first[ResourceEndpoints] = endpointSliceObj(t, "team-a", "web-proxy", "192.168.122.50", 3128, true)
	edited := strings.Replace(minimalXR, "spec:\n", "spec:\n  port: 8080\n", 1)
	rsp := runAt(t, newRequest(t, edited, asObserved(t, first, map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady})), now)
	got := desired(rsp)
	if d := cmp.Diff(serviceObj(t, "team-a", "web-proxy", 3128), got[ResourceService]); d != "" {
		t.Errorf("Service left the old port before the new generation is Ready:\n%s", d)
	}
	if d := cmp.Diff(first[ResourceSecret], got[ResourceSecret]); d != "" {
		t.Errorf("Secret names the new port before the new generation serves:\n%s", d)
	}
	var newID string
	for k := range got {
		if id, ok := strings.CutPrefix(k, ResourceDomain+"-"); ok {
			newID = id
		}
	}
	if c := conditionOf(rsp, ConditionUpToDate); c == nil || !strings.Contains(c.GetMessage(), "port") {
		t.Errorf("UpToDate = %v, want it to name the port", c)
	}
	st := map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady, ResourceSeed + "-" + newID: inputReady,
		ResourceDomain + "-" + newID: `
status:
  atProvider: {state: Running, ipv4: 192.168.122.60}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "True"}]
`}
	xr := withStatus(edited, "  generation: "+xrStatusAll(rsp)["generation"].(string)+"\n")
	sw := desired(runAt(t, newRequest(t, xr, asObserved(t, got, st)), now))
	svc := sw[ResourceService]["spec"].(map[string]any)["ports"].([]any)
	want := []any{
		map[string]any{"name": "http-proxy", "protocol": "TCP", "port": float64(8080), "targetPort": float64(8080)},
		map[string]any{"name": "http-proxy-prev", "protocol": "TCP", "port": float64(3128), "targetPort": float64(8080)},
	}
	if d := cmp.Diff(want, svc); d != "" {
		t.Errorf("Service ports during the cut-over (-want +got):\n%s", d)
	}
}

// TestRolloutBoundFromPolicy: the bound is the ProxyPolicy's replacement.readyWithin.
func TestRolloutBoundFromPolicy(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := desired(runAt(t, newRequest(t, minimalXR, nil), now))
	first[ResourceSecret] = secretObj(t, "team-a", "web-proxy", "http://web-proxy.team-a.svc:3128", "web-proxy.team-a.svc", "192.168.122.50", "3128")
	edited := strings.Replace(minimalXR, "spec:\n", "spec:\n  memoryMiB: 1024\n", 1)
	obs := map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady}
	got := desired(runAt(t, newRequest(t, edited, asObserved(t, first, obs)), now))
	var newID string
	for k := range got {
		if id, ok := strings.CutPrefix(k, ResourceDomain+"-"); ok {
			newID = id
		}
	}
	obs[ResourceDomain+"-"+newID] = `
metadata: {creationTimestamp: "2026-01-01T11:58:00Z"}
status:
  atProvider: {state: Running}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "False", message: "running; waiting for the guest's IPv4 address"}]
`
	cases := map[string]struct {
		reason string
		policy string
		failed bool
	}{
		"Default":   {reason: "Two minutes are within the default 15m.", policy: testPolicy},
		"OneMinute": {reason: "Two minutes are past a policy's 1m.", policy: testPolicy + "replacement: {readyWithin: 1m}\n", failed: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, edited, asObserved(t, got, obs))
			req.Input = st(t, tc.policy)
			d := desired(runAt(t, req, now))
			if _, composed := d[ResourceDomain+"-"+newID]; composed == tc.failed {
				t.Errorf("%s\nnew generation composed = %v, want %v", tc.reason, composed, !tc.failed)
			}
		})
	}
}

// TestRolloutOwnImage: a Proxy that caches its own image keeps sharing it with a new
// generation that changes something else, and composes a new BaseImage for a new image.
func TestRolloutOwnImage(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := desired(runAt(t, newRequest(t, fullXR, nil), now))
	first[ResourceSecret] = secretObj(t, "team-b", "egress-proxy", "http://egress-proxy.team-b.svc:8080", "egress-proxy.team-b.svc", "192.168.122.50", "8080")
	obs := asObserved(t, first, map[string]string{ResourceDomain: domainReadyAt50, ResourceSeed: inputReady, ResourceBaseImage: inputReady})
	cases := map[string]struct {
		reason    string
		edit      func(string) string
		wantImage []string // the BaseImages composed: resource name/metadata.name
	}{
		"VCPU": {reason: "A vCPU change shares the image with the serving generation.",
			edit:      func(xr string) string { return strings.Replace(xr, "vcpu: 2", "vcpu: 3", 1) },
			wantImage: []string{"base-image/egress-image"}},
		"Image": {reason: "A new image is a new BaseImage beside the serving one's.",
			edit: func(xr string) string {
				return strings.Replace(xr, "sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "sha256: "+strings.Repeat("ab", 32), 1)
			},
			wantImage: []string{"base-image/egress-image", "base-image-*/egress-image-*"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := desired(runAt(t, newRequest(t, tc.edit(fullXR), obs), now))
			if len(got) != len(first)+2+len(tc.wantImage) { // the new generation, the EndpointSlice, any new image
				t.Fatalf("%s\nthe edit does not compose one new generation beside the serving one: %v", tc.reason, keysOf(got))
			}
			var images []string
			for _, k := range keysOf(got) {
				if !strings.HasPrefix(k, ResourceBaseImage) {
					continue
				}
				n := got[k]["metadata"].(map[string]any)["name"].(string)
				if id, ok := strings.CutPrefix(k, ResourceBaseImage+"-"); ok {
					if n != "egress-image-"+id {
						t.Errorf("BaseImage %s is named %s, want egress-image-%s", k, n, id)
					}
					k, n = ResourceBaseImage+"-*", "egress-image-*"
				}
				images = append(images, k+"/"+n)
			}
			if d := cmp.Diff(tc.wantImage, images); d != "" {
				t.Errorf("%s\nBaseImages (-want +got):\n%s", tc.reason, d)
			}
			for k, o := range got {
				if strings.HasPrefix(k, ResourceDomain+"-") {
					ref := o["spec"].(map[string]any)["forProvider"].(map[string]any)["baseImageRef"].(map[string]any)["name"].(string)
					if name == "VCPU" && ref != "egress-image" {
						t.Errorf("new generation boots %s, want the shared egress-image", ref)
					}
					if name == "Image" && ref == "egress-image" {
						t.Errorf("new generation boots the old image")
					}
				}
			}
		})
	}
}
