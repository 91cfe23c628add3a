//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTimelineTable checks the table's layout; it needs no control plane.
func TestTimelineTable(t *testing.T) {
	tl := &timeline{baseline: "80.2"}
	tl.column(baselineSubject)
	tl.column("team-a/proxy-a")
	tl.column("team-b/proxy-c (claim)")
	tl.add(baselineSubject, evStarted, "0.0")
	tl.add(baselineSubject, evProxyReady, "80.2")
	tl.add("team-a/proxy-a", evSeedReady, "3.2")
	tl.add("team-a/proxy-a", evProxyReady, "95.7")
	tl.add("team-a/proxy-a", evProxyReady, "99.0") // a later duplicate does not count
	tl.add("team-b/proxy-c (claim)", evBaseImageReady, "8.3")
	tl.add("bring-up", "control plane + Crossplane + packages installed", "24.2")
	var b strings.Builder
	tl.print(&b)
	got := b.String()
	t.Log("\n" + got)
	for _, want := range []string{
		"  event                                       plain virsh (from start)   team-a/proxy-a   team-b/proxy-c (claim)",
		"  BaseImage Ready                             -                          shared           8.3",
		"  Proxy Ready                                 80.2                       95.7             -",
		"  Proxy Ready minus plain virsh (80.2 s)      -                          +15.5            -",
		"  bring-up   control plane + Crossplane + packages installed   24.2",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("timeline lacks the line\n%q\ngot:\n%s", want, got)
		}
	}
}

// TestManifests renders and decodes every manifest with the values the tests use; it needs no
// control plane.
func TestManifests(t *testing.T) {
	e := &env{cfg: defaultConfig(), imageSHA256: strings.Repeat("0", 64), probeURL: "http://10.77.0.10:18204/"}
	e.cfg.Hosts = []hostConfig{{Name: "default", SSHHost: "10.77.0.11", SSHPort: 22, Pool: "pool-host-a", Bridge: "br0"}}
	e.guestCIDR, e.cfg.ImageHost = "10.77.0.0/24", "10.77.0.10"
	files, err := filepath.Glob(filepath.Join(e.cfg.Manifests, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", e.cfg.Manifests, err)
	}
	vals := hostValues(e.values(), e.cfg.Hosts[0])
	for _, f := range files {
		objs, err := e.objects(filepath.Base(f), vals)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetName() == "" {
				t.Errorf("%s: an object without kind or name: %v", f, o.Object)
			}
		}
	}
	if _, err := render("a: @NOPE@", vals); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("render of an unknown placeholder: %v, want an error naming it", err)
	}
}

// TestProxyExamples applies nothing: it checks that every file of examples/proxy is one the
// e2e boots, that each still holds the values the e2e replaces, and that what it applies
// decodes with the test bed's values in place (no example address left).
func TestProxyExamples(t *testing.T) {
	e := &env{cfg: defaultConfig(), imageSHA256: strings.Repeat("a", 64), probeURL: "http://10.77.0.10:18204/"}
	e.guestCIDR, e.cfg.ImageHost = "10.77.0.0/24", "10.77.0.10"
	files, err := filepath.Glob(filepath.Join(e.cfg.Repo, "examples", "proxy", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in %s (%v)", filepath.Join(e.cfg.Repo, "examples", "proxy"), err)
	}
	booted := map[string]bool{}
	vals := e.values()
	for _, ex := range proxyExamples("host-b") {
		booted[filepath.Join(e.cfg.Repo, ex.File)] = true
		b, err := os.ReadFile(filepath.Join(e.cfg.Repo, ex.File))
		if err != nil {
			t.Fatal(err)
		}
		text, err := ex.substitute(string(b), vals)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, addr := range []string{exImageURL, exSHA256, exGuestNet, exProbeURL} {
			if strings.Contains(text, addr) {
				t.Errorf("%s: %q is still there after the substitutions", ex.File, addr)
			}
		}
		objs, err := decode(ex.File, text)
		if err != nil || len(objs) == 0 {
			t.Errorf("%s: %d objects, %v", ex.File, len(objs), err)
		}
	}
	for _, f := range files {
		if !booted[f] {
			t.Errorf("%s is not booted by make e2e: add it to proxyExamples", f)
		}
	}
}
