//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
)

// The rows of the timeline table, in order.
const (
	evBaseImageReady = "BaseImage Ready"
	evSeedReady      = "SeedVolume Ready"
	evStarted        = "KVMDomain defined + started"
	evAddress        = "KVMDomain address known"
	evSecret         = "Secret composed"
	evDomainReady    = "KVMDomain Ready (probe 204 through squid)"
	evProxyReady     = "Proxy Ready"
)

var tableEvents = []string{evBaseImageReady, evSeedReady, evStarted, evAddress, evSecret, evDomainReady, evProxyReady}

// baselineSubject is the column of the plain-virsh boot (cluster/testbed/boot-check.sh).
const baselineSubject = "plain virsh (from start)"

// record is one line of the timeline: seconds after the subject was created (the baseline:
// after virsh start), or a duration of a step ("n/a" when unknown).
type record struct{ Subject, Event, Seconds string }

// timeline collects records; the subjects of the table are its columns.
type timeline struct {
	mu       sync.Mutex
	records  []record
	columns  []string // the baseline and the Proxies, in order of appearance
	baseline string   // the baseline's start -> 204, "" when it did not run
}

func (tl *timeline) add(subject, event, seconds string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.records = append(tl.records, record{subject, event, seconds})
}

// column makes subject a column of the table.
func (tl *timeline) column(subject string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, c := range tl.columns {
		if c == subject {
			return
		}
	}
	tl.columns = append(tl.columns, subject)
}

// print writes the events of the columns as a table, the Proxies' Ready against the baseline,
// and the other records as a list. Team-a's Proxies share a BaseImage: their BaseImage cell
// says so.
func (tl *timeline) print(w io.Writer) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	isColumn := map[string]bool{}
	for _, c := range tl.columns {
		isColumn[c] = true
	}
	cell := map[[2]string]string{}
	var other []record
	for _, r := range tl.records {
		if isColumn[r.Subject] {
			if _, ok := cell[[2]string{r.Subject, r.Event}]; !ok {
				cell[[2]string{r.Subject, r.Event}] = r.Seconds
			}
			continue
		}
		other = append(other, r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "  event")
	for _, c := range tl.columns {
		fmt.Fprint(tw, "\t"+c)
	}
	fmt.Fprintln(tw)
	for _, ev := range tableEvents {
		fmt.Fprint(tw, "  "+ev)
		for _, c := range tl.columns {
			v, ok := cell[[2]string{c, ev}]
			if !ok && ev == evBaseImageReady && strings.HasPrefix(c, "team-a/") {
				v = "shared"
			}
			if v == "" {
				v = "-"
			}
			fmt.Fprint(tw, "\t"+v)
		}
		fmt.Fprintln(tw)
	}
	if base, err := strconv.ParseFloat(tl.baseline, 64); err == nil {
		fmt.Fprintf(tw, "  Proxy Ready minus plain virsh (%s s)", tl.baseline)
		for _, c := range tl.columns {
			v := "-"
			if r, err := strconv.ParseFloat(cell[[2]string{c, evProxyReady}], 64); err == nil && c != baselineSubject {
				v = fmt.Sprintf("%+.1f", r-base)
			}
			fmt.Fprint(tw, "\t"+v)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, r := range other {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Subject, r.Event, r.Seconds)
	}
	_ = tw.Flush()
}

// write saves the records as timeline.tsv (subject, event, seconds).
func (tl *timeline) write(path string) error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var b strings.Builder
	for _, r := range tl.records {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", r.Subject, r.Event, r.Seconds)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

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
	e := &env{cfg: loadConfig(), imageSHA256: strings.Repeat("0", 64), probeURL: "http://192.168.122.1:18204/"}
	e.cfg.Hosts = []hostConfig{{Name: "default", SSHHost: "127.0.0.1", SSHPort: 2222, Pool: "testbed", Network: "default"}}
	e.guestCIDR = "192.168.122.0/24"
	files, err := filepath.Glob(filepath.Join(e.cfg.Manifests, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", e.cfg.Manifests, err)
	}
	vals := hostValues(e.values(), e.cfg.Hosts[0])
	vals["FN_NAME"], vals["FN_IMAGE"] = "fn", "127.0.0.1:15000/fn:v0"
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
	e := &env{cfg: loadConfig(), imageSHA256: strings.Repeat("0", 64), probeURL: "http://10.77.0.10:18204/"}
	e.guestCIDR = "10.77.0.0/24"
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
		for _, addr := range []string{exImageURL, exSHA256, exGuestNet, exProbeURL, "images.example.org"} {
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
