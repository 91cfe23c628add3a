package scale

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
)

// row is one line of the table.
type row struct {
	step    string
	ready   time.Duration
	created int  // KVMDomains (and seeds) the step created
	ramp    ramp // what creating them cost
	fig     figures
}

// maxCallsPerReconcile are the libvirt calls a steady reconcile of each kind may make, from
// docs/architecture.md's "Observe cost per poll" (a shut-off KVMDomain: state, persistent
// XML, autostart).
var maxCallsPerReconcile = map[string]float64{"KVMDomain": 3, "SeedVolume": 2, "BaseImage": 3}

// check asserts what does not depend on the machine's speed: one SSH connection to each of the
// hosts, no new libvirt connection in a steady window, each kind's calls per reconcile within the
// architecture page's table, and whole-host or whole-pool scans bounded by the host status's
// polls of each host, not by the resources.
func check(t *testing.T, f figures, n int, s settings, hosts int) {
	t.Helper()
	if want := slices.Repeat([]int{1}, hosts); !slices.Equal(f.sshMax, want) {
		t.Errorf("with %d KVMDomains: the provider held %s SSH connections to the hosts, want one to each (%s)", n, perHost(f.sshMax), perHost(want))
	}
	if f.newConns != 0 {
		t.Errorf("with %d KVMDomains: %.0f libvirt connections opened in a steady window, want 0", n, f.newConns)
	}
	for _, k := range kinds {
		got, ok := f.callsPerRec[k]
		if !ok {
			t.Errorf("with %d KVMDomains: no %s was reconciled in the %s window: nothing was measured", n, k, s.window)
			continue
		}
		if !withinCallBound(f.calls[k], f.recs[k], f.inFlight[k], maxCallsPerReconcile[k]) {
			t.Errorf("with %d KVMDomains: %.2f libvirt calls per %s reconcile (%.0f calls, %.0f reconciles finished, %.0f in flight at the end), the architecture page says at most %.0f",
				n, got, k, f.calls[k], f.recs[k], f.inFlight[k], maxCallsPerReconcile[k])
		}
	}
	poll, err := time.ParseDuration(s.poll)
	if err != nil {
		t.Fatalf("the short run's poll %q: %v", s.poll, err)
	}
	// The host status reads each host once per poll: at most four scans a read.
	bound := scanBound(f.minutes, poll, hosts)
	if f.scansTotal > bound {
		t.Errorf("with %d KVMDomains: %.0f whole-host or whole-pool scans in %.1f min, want at most %.0f (4 per host status read): something scans per resource",
			n, f.scansTotal, f.minutes, bound)
	}
}

// scanBound is how many whole-host or whole-pool scans a window of minutes may hold: the host
// status reads each host once per poll, four scans a read, with two reads of slack for the
// window's edges.
func scanBound(minutes float64, poll time.Duration, hosts int) float64 {
	return 4 * float64(hosts) * (math.Ceil(minutes*float64(time.Minute)/float64(poll)) + 2)
}

// withinCallBound says whether calls made in a window fit max per reconcile. The window counts a
// reconcile when it finishes and its calls as they are made, so the reconciles still in flight when
// the window closed (controller-runtime's active workers; at least one, for a reconcile finishing
// between the counters' reads in one scrape) made calls the window holds without their reconcile.
func withinCallBound(calls, finished, inFlight, max float64) bool {
	return calls <= max*(finished+math.Max(inFlight, 1))
}

// report prints the table and writes it to SCALE_OUT, or _output/scale/results.txt.
func report(t *testing.T, s settings, bd bed, rows []row, machine string) {
	t.Helper()
	var b strings.Builder
	poll := s.poll
	if poll == "" {
		poll = "1m (default)"
	}
	fmt.Fprintln(&b, intro(bd.names()))
	fmt.Fprintf(&b, "One provider process, default flags (--max-reconcile-rate 10) but --poll %s; steady figures over %s; machine: %s.\n", poll, s.window, machine)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tall Ready after\tRSS MiB\theap MiB\tgoroutines\tCPU s/min\tlibvirt calls/min\tscans\tnew conns\tSSH conns\treconciles/min\tp50\tp99\tAPI req/min\t")
	for _, r := range rows {
		ready := "-"
		if r.ready > 0 {
			ready = r.ready.Round(time.Second).String()
		}
		f := r.fig
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%s\t%.0f\t%s\t%s\t%.0f\t\n",
			r.step, ready, f.rssMiB, f.heapMiB, f.goroutines, f.cpuPerMin, f.callsPerMin, f.scansTotal, f.newConns, perHost(f.sshMax), f.recsPerMin, ms(f.p50), ms(f.p99), f.apiPerMin)
	}
	_ = tw.Flush()
	if len(bd.hosts) > 1 {
		fmt.Fprintf(&b, "Per host (%s): SSH connections (most seen), libvirt connections opened in the window:\n", strings.Join(bd.names(), ", "))
		for _, r := range rows {
			var parts []string
			for i, h := range bd.hosts {
				parts = append(parts, fmt.Sprintf("%s %d SSH, %.0f opened", h.name, r.fig.sshMax[i], r.fig.newConnsBy[h.ssh]))
			}
			fmt.Fprintf(&b, "  %s: %s\n", r.step, strings.Join(parts, "; "))
		}
	}
	fmt.Fprintln(&b, "What each step's creation cost (from its first create until all were Ready):")
	for _, r := range rows {
		if r.created == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s: %d KVMDomains and seeds created, %.0f libvirt calls (%.0f per KVMDomain), %.0f domain definitions read (%.1f per KVMDomain)\n",
			r.step, r.created, r.ramp.calls, r.ramp.calls/float64(r.created), r.ramp.xml, r.ramp.xml/float64(r.created))
	}
	fmt.Fprintln(&b, "libvirt calls per reconcile, by kind:")
	for _, r := range rows {
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, r.fig.callsPerRec[k]))
		}
		fmt.Fprintf(&b, "  %s: %s\n", r.step, strings.Join(parts, ", "))
	}
	fmt.Fprintln(&b, "API server requests per minute, by method:")
	for _, r := range rows {
		var parts []string
		for _, m := range slices.Sorted(maps.Keys(r.fig.apiPerMinBy)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", m, r.fig.apiPerMinBy[m]))
		}
		fmt.Fprintf(&b, "  %s: %s\n", r.step, strings.Join(parts, ", "))
	}
	fmt.Print("\n" + b.String())
	out := s.outFile
	if out == "" {
		out = filepath.Join(controlplane.RepoRoot(), "_output", "scale", "results.txt")
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o600); err != nil {
		t.Errorf("writing the table: %v", err)
	}
}

// intro is the table's first line: what the bench made and on which hosts.
func intro(hosts []string) string {
	if len(hosts) < 2 {
		return fmt.Sprintf("provider-kvm scale bench: KVMDomains defined and shut off, each with its SeedVolume, over %d namespaces sharing one BaseImage's host image.", namespaces)
	}
	return fmt.Sprintf("provider-kvm scale bench: KVMDomains defined and shut off, each with its SeedVolume, over %d namespaces and split evenly over %d hosts (%s); each namespace has a BaseImage per host, sharing one host image on each host.",
		namespaces, len(hosts), strings.Join(hosts, ", "))
}

func TestWithinCallBound(t *testing.T) {
	cases := map[string]struct {
		calls, finished, inFlight float64
		want                      bool
	}{
		"ExactlyMax":                    {calls: 300, finished: 100, want: true},
		"OneReconcileFinishingInScrape": {calls: 303, finished: 100, want: true},
		"TwoInFlightAtTheEnd":           {calls: 306, finished: 100, inFlight: 2, want: true},
		"OneCallPerReconcileTooMany":    {calls: 400, finished: 100, inFlight: 1, want: false},
		"MoreThanTheInFlightCanExplain": {calls: 307, finished: 100, inFlight: 2, want: false},
		"NothingFinishedOneCallTooMany": {calls: 4, finished: 0, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := withinCallBound(tc.calls, tc.finished, tc.inFlight, 3); got != tc.want {
				t.Errorf("withinCallBound(%v, %v, %v, 3) = %v, want %v", tc.calls, tc.finished, tc.inFlight, got, tc.want)
			}
		})
	}
}
