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
