package function

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

var writeRolloutFixtures = flag.Bool("write-rollout-fixtures", false, "rewrite test/crossplane/testdata/observed-rollout-*.yaml and proxy-edited.yaml from what the function composes now")

const fixturesDir = "../../test/crossplane/testdata"

// TestRolloutFixtures writes the observed states test/crossplane renders a roll-out from (with
// -write-rollout-fixtures), composed by this function with the shipped Composition's policy for
// internal/function/testdata/proxy-minimal.yaml, and edited (allowedCIDRs) for the roll-out. It
// always checks that the files on disk are what it would write, so they never go stale.
func TestRolloutFixtures(t *testing.T) {
	xrYAML, err := os.ReadFile("testdata/proxy-minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	xr := string(xrYAML)
	edited := strings.Replace(xr, "spec:\n", "spec:\n  allowedCIDRs: [10.0.0.0/8]\n", 1)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	compose := func(xr string, observed map[string]string) *fnv1.RunFunctionResponse {
		req := newRequest(t, xr, observed)
		req.Input = compositionInput(t, "composition.yaml")
		return runAt(t, req, now)
	}
	first := compose(xr, nil)
	legacyID, _ := xrStatusAll(first)["generation"].(string)
	objs := desired(first)
	objs[ResourceEndpoints] = endpointSliceObj(t, "team-a", "egress-proxy", "192.168.122.57", 3128, true)
	objs[ResourceSecret] = secretObj(t, "team-a", "egress-proxy", "http://egress-proxy.team-a.svc:3128", "egress-proxy.team-a.svc", "192.168.122.57", "3128")
	st := map[string]string{ResourceDomain: domainReady("192.168.122.57"), ResourceSeed: inputReady}

	editedXR := strings.TrimRight(edited, "\n") + "\nstatus:\n  generation: " + legacyID + "\n"
	next := desired(compose(editedXR, asObserved(t, objs, st)))
	var id string
	for k := range next {
		if s, ok := strings.CutPrefix(k, ResourceDomain+"-"); ok {
			id = s
		}
	}
	if id == "" {
		t.Fatalf("the edit composed no new generation: %v", keysOf(next))
	}
	dk, sk := ResourceDomain+"-"+id, ResourceSeed+"-"+id
	withNew := func(domainStatus string, ep, secret string) string {
		o := map[string]map[string]any{}
		for k, v := range next {
			o[k] = v
		}
		s := map[string]string{ResourceDomain: domainReady("192.168.122.57"), ResourceSeed: inputReady, sk: inputReady, dk: domainStatus}
		if ep != "" {
			o[ResourceEndpoints] = endpointSliceObj(t, "team-a", "egress-proxy", ep, 3128, true)
		}
		if secret != "" {
			o[ResourceSecret] = secretObj(t, "team-a", "egress-proxy", "http://egress-proxy.team-a.svc:3128", "egress-proxy.team-a.svc", secret, "3128")
		}
		return fixture(t, asObserved(t, o, s))
	}
	files := map[string]string{
		"proxy-edited.yaml":               "# proxy-minimal.yaml with allowedCIDRs edited, serving its first generation (written by\n# internal/function's TestRolloutFixtures).\n" + editedXR,
		"observed-legacy-ready.yaml":      fixture(t, asObserved(t, objs, st)),
		"observed-rollout-booting.yaml":   withNew("status:\n  atProvider: {state: Running}\n  conditions: [{type: Synced, status: \"True\"}, {type: Ready, status: \"False\", reason: Unavailable, message: \"running; waiting for the guest's IPv4 address\"}]\n", "", ""),
		"observed-rollout-ready.yaml":     withNew(domainReady("192.168.122.58"), "", ""),
		"observed-rollout-endpoints.yaml": withNew(domainReady("192.168.122.58"), "192.168.122.58", ""),
		"observed-rollout-switched.yaml":  withNew(domainReady("192.168.122.58"), "192.168.122.58", "192.168.122.58"),
		"observed-rollout-failing.yaml":   withNew("metadata: {creationTimestamp: \"2026-01-01T00:00:00Z\"}\nstatus:\n  atProvider: {state: Running, ipv4: 192.168.122.58}\n  conditions: [{type: Synced, status: \"True\"}, {type: Ready, status: \"False\", reason: Unavailable, message: \"readiness probe failing: HTTP 403 through 192.168.122.58:3128\"}]\n", "", ""),
	}
	for name, want := range files {
		path := filepath.Join(fixturesDir, name)
		if *writeRolloutFixtures {
			if err := os.WriteFile(path, []byte(want), 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is stale (or missing: %v): run go test ./internal/function -run TestRolloutFixtures -write-rollout-fixtures", path, err)
		}
	}
}

func domainReady(ip string) string {
	return "status:\n  atProvider: {state: Running, ipv4: " + ip + ", ipSource: lease}\n  conditions: [{type: Synced, status: \"True\", reason: ReconcileSuccess}, {type: Ready, status: \"True\", reason: Available}]\n"
}

// fixture is a YAML stream of observed objects, each annotated with its composition resource
// name, ordered by it.
func fixture(t *testing.T, observed map[string]string) string {
	t.Helper()
	names := make([]string, 0, len(observed))
	for n := range observed {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# Written by internal/function's TestRolloutFixtures: do not edit.\n")
	for _, n := range names {
		o := obj(t, observed[n])
		md, _ := o["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
		}
		md["annotations"] = map[string]any{"crossplane.io/composition-resource-name": n}
		if md["namespace"] == nil {
			md["namespace"] = "team-a"
		}
		o["metadata"] = md
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String()
}
