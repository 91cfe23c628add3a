package scale

import (
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// scanOps are the libvirt calls that read a whole host or pool: the host status makes them once
// per host per poll; a per-resource use of one would grow with the resources squared.
var scanOps = map[string]bool{
	"ConnectListAllDomains":      true,
	"ConnectGetAllDomainStats":   true,
	"StoragePoolListAllVolumes":  true,
	"ConnectListAllStoragePools": true,
}

// kinds are the managed resource kinds measured, by the lower-case name in their controller's.
var kinds = []string{"KVMDomain", "SeedVolume", "BaseImage"}

// meter reads one provider process's metrics endpoint and its SSH connections to each host.
type meter struct {
	url   string
	pid   int
	peers []string // each host's sshd address (ip:port), in the bed's order
}

// sample is what one scrape and one ss found.
type sample struct {
	at       time.Time
	rss      float64 // bytes
	heap     float64 // bytes in use
	gor      float64
	cpu      float64            // seconds
	calls    map[string]float64 // by kind
	scans    float64            // calls of scanOps
	xml      float64            // DomainGetXMLDesc calls
	opens    float64            // libvirt connections opened
	opensBy  map[string]float64 // by host (its sshd's ip:port)
	api      float64            // API server requests
	apiBy    map[string]float64 // by method
	recs     map[string]float64 // reconciles by kind
	active   map[string]float64 // reconciles in flight by kind (controller-runtime's active workers)
	buckets  map[float64]float64
	recCount float64
	ssh      []int // established SSH connections, by host
}

// figures are a steady window's.
type figures struct {
	minutes                 float64
	rssMiB, heapMiB         float64
	goroutines              float64
	cpuPerMin               float64
	callsPerMin, scansTotal float64
	newConns                float64
	newConnsBy              map[string]float64 // by host (its sshd's ip:port)
	sshMax                  []int              // the most SSH connections seen in the window, by host
	apiPerMin, recsPerMin   float64
	p50, p99                time.Duration
	callsPerRec             map[string]float64 // libvirt calls per reconcile, by kind
	calls, recs             map[string]float64 // libvirt calls and finished reconciles in the window, by kind
	inFlight                map[string]float64 // reconciles in flight when the window closed, by kind
	apiPerMinBy             map[string]float64 // API server requests per minute, by method
}

// ramp is what a step's creation cost, from its first create until all were Ready.
type ramp struct {
	calls, xml float64 // libvirt calls, DomainGetXMLDesc calls
}

func rampOf(a, b sample) ramp {
	var calls float64
	for k, v := range b.calls {
		calls += v - a.calls[k]
	}
	return ramp{calls: calls, xml: b.xml - a.xml}
}

func (f figures) brief() string {
	return fmt.Sprintf("RSS %.0f MiB, heap %.0f MiB, CPU %.1f s/min, libvirt calls %.0f/min, scans %.0f, new conns %.0f, ssh %s, API %.0f/min, reconciles %.0f/min, p50 %s, p99 %s",
		f.rssMiB, f.heapMiB, f.cpuPerMin, f.callsPerMin, f.scansTotal, f.newConns, perHost(f.sshMax), f.apiPerMin, f.recsPerMin, ms(f.p50), ms(f.p99))
}

// perHost is a count per host, in the bed's order: "1" for one host, "1/1" for two.
func perHost(n []int) string {
	parts := make([]string, len(n))
	for i, v := range n {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, "/")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }

// window measures d: a sample before, during (every 10 s, for the SSH connections), and after;
// during, if set, runs right after the first sample.
func (m *meter) window(t *testing.T, d time.Duration, during func()) figures {
	t.Helper()
	first := m.sample(t)
	if during != nil {
		during()
	}
	sshMax := slices.Clone(first.ssh)
	end := first.at.Add(d)
	for time.Now().Before(end) {
		time.Sleep(min(10*time.Second, time.Until(end)))
		sshMax = maxEach(sshMax, m.ssh(t))
	}
	last := m.sample(t)
	f := between(first, last)
	f.sshMax = maxEach(sshMax, last.ssh)
	return f
}

// maxEach is the larger of a's and b's counts, host by host.
func maxEach(a, b []int) []int {
	out := make([]int, max(len(a), len(b)))
	for i := range out {
		if i < len(a) {
			out[i] = a[i]
		}
		if i < len(b) {
			out[i] = max(out[i], b[i])
		}
	}
	return out
}

// between is the figures of the window from a to b.
func between(a, b sample) figures {
	mins := b.at.Sub(a.at).Minutes()
	f := figures{minutes: mins, rssMiB: b.rss / (1 << 20), heapMiB: b.heap / (1 << 20), goroutines: b.gor,
		cpuPerMin: (b.cpu - a.cpu) / mins, scansTotal: b.scans - a.scans, newConns: b.opens - a.opens,
		apiPerMin: (b.api - a.api) / mins, callsPerRec: map[string]float64{}, apiPerMinBy: map[string]float64{},
		calls: map[string]float64{}, recs: map[string]float64{}, inFlight: map[string]float64{}, newConnsBy: map[string]float64{}}
	for k, v := range b.opensBy {
		if d := v - a.opensBy[k]; d > 0 {
			f.newConnsBy[k] = d
		}
	}
	for k, v := range b.apiBy {
		if d := v - a.apiBy[k]; d > 0 {
			f.apiPerMinBy[k] = d / mins
		}
	}
	var calls, recs float64
	for k, v := range b.calls {
		calls += v - a.calls[k]
	}
	for _, k := range kinds {
		r := b.recs[k] - a.recs[k]
		recs += r
		f.calls[k], f.recs[k], f.inFlight[k] = b.calls[k]-a.calls[k], r, b.active[k]
		if r > 0 {
			f.callsPerRec[k] = (b.calls[k] - a.calls[k]) / r
		}
	}
	f.callsPerMin, f.recsPerMin = calls/mins, recs/mins
	delta := map[float64]float64{}
	for le, c := range b.buckets {
		delta[le] = c - a.buckets[le]
	}
	count := b.recCount - a.recCount
	f.p50, f.p99 = quantile(delta, count, 0.5), quantile(delta, count, 0.99)
	return f
}

// quantile is q of a cumulative histogram (upper bound -> count) holding count observations,
// interpolated linearly within its bucket as Prometheus' histogram_quantile does.
func quantile(buckets map[float64]float64, count, q float64) time.Duration {
	if count <= 0 {
		return 0
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	rank := q * count
	lower, below := 0.0, 0.0
	for _, le := range les {
		c := buckets[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(lower * float64(time.Second))
			}
			frac := 1.0
			if c > below {
				frac = (rank - below) / (c - below)
			}
			return time.Duration((lower + (le-lower)*frac) * float64(time.Second))
		}
		lower, below = le, c
	}
	return time.Duration(lower * float64(time.Second))
}

// sample scrapes the metrics endpoint and counts the SSH connections.
func (m *meter) sample(t *testing.T) sample {
	t.Helper()
	resp, err := http.Get(m.url)
	if err != nil {
		t.Fatalf("reading the provider's metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the provider's metrics: %v", err)
	}
	s := sample{at: time.Now(), calls: map[string]float64{}, recs: map[string]float64{}, active: map[string]float64{}, apiBy: map[string]float64{},
		opensBy: map[string]float64{}, buckets: map[float64]float64{}, ssh: m.ssh(t)}
	for name, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			switch name {
			case "process_resident_memory_bytes":
				s.rss = mt.GetGauge().GetValue()
			case "go_memstats_heap_inuse_bytes":
				s.heap = mt.GetGauge().GetValue()
			case "go_goroutines":
				s.gor = mt.GetGauge().GetValue()
			case "process_cpu_seconds_total":
				s.cpu = mt.GetCounter().GetValue()
			case metrics.CallsName:
				v := mt.GetCounter().GetValue()
				s.calls[label(mt, "kind")] += v
				if scanOps[label(mt, "op")] {
					s.scans += v
				}
				if label(mt, "op") == "DomainGetXMLDesc" {
					s.xml += v
				}
			case metrics.ConnectionsName:
				s.opens += mt.GetCounter().GetValue()
				s.opensBy[label(mt, "host")] += mt.GetCounter().GetValue()
			case "rest_client_requests_total":
				s.api += mt.GetCounter().GetValue()
				s.apiBy[label(mt, "method")] += mt.GetCounter().GetValue()
			case "controller_runtime_reconcile_total":
				if k := kindOf(label(mt, "controller")); k != "" {
					s.recs[k] += mt.GetCounter().GetValue()
				}
			case "controller_runtime_active_workers":
				if k := kindOf(label(mt, "controller")); k != "" {
					s.active[k] += mt.GetGauge().GetValue()
				}
			case "controller_runtime_reconcile_time_seconds":
				if kindOf(label(mt, "controller")) == "" {
					continue
				}
				h := mt.GetHistogram()
				s.recCount += float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					s.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
				s.buckets[math.Inf(1)] += float64(h.GetSampleCount())
			}
		}
	}
	return s
}

// kindOf is the managed resource kind of a controller's name (crossplane-runtime names them
// managed/<kind>.<group>), or "" for the provider's other controllers.
func kindOf(controller string) string {
	if !strings.HasPrefix(controller, "managed/") {
		return ""
	}
	for _, k := range kinds {
		if strings.HasPrefix(strings.TrimPrefix(controller, "managed/"), strings.ToLower(k)+".") {
			return k
		}
	}
	return ""
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// ssh counts the provider's established TCP connections to each host's sshd, as ss shows them.
func (m *meter) ssh(t *testing.T) []int {
	t.Helper()
	out, err := exec.Command("ss", "-Htnp", "state", "established").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	return countSSH(string(out), m.pid, m.peers)
}

// countSSH counts, in the output of ss -Htnp state established, the connections of process pid
// to each of peers (ip:port, as ss prints a peer).
func countSSH(ssOut string, pid int, peers []string) []int {
	n := make([]int, len(peers))
	owner := "pid=" + strconv.Itoa(pid) + ","
	for l := range strings.SplitSeq(ssOut, "\n") {
		if !strings.Contains(l, owner) {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		// Recv-Q, Send-Q, local address, peer address, process (no state column: one state asked).
		if i := slices.Index(peers, f[3]); i >= 0 {
			n[i]++
		}
	}
	return n
}

func TestCountSSH(t *testing.T) {
	const ss = `0      0      10.77.0.10:40112 10.77.0.11:22 users:(("provider",pid=4242,fd=9))
0      0      10.77.0.10:40114 10.77.0.12:22 users:(("provider",pid=4242,fd=11))
0      0      10.77.0.10:40116 10.77.0.12:22 users:(("ssh",pid=4243,fd=3))
0      0      127.0.0.1:6443 127.0.0.1:51234 users:(("provider",pid=4242,fd=7))
0      0      10.77.0.10:40118 10.77.0.11:22 users:(("provider",pid=42420,fd=5))
`
	cases := map[string]struct {
		peers []string
		want  []int
	}{
		"OneEach":        {peers: []string{"10.77.0.11:22", "10.77.0.12:22"}, want: []int{1, 1}},
		"OneHost":        {peers: []string{"10.77.0.12:22"}, want: []int{1}},
		"NoneToThisHost": {peers: []string{"127.0.0.1:2222"}, want: []int{0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, countSSH(ss, 4242, tc.peers)); diff != "" {
				t.Errorf("countSSH (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMaxEach(t *testing.T) {
	cases := map[string]struct {
		a, b, want []int
	}{
		"HostByHost": {a: []int{1, 2}, b: []int{2, 1}, want: []int{2, 2}},
		"FirstEmpty": {a: nil, b: []int{1, 1}, want: []int{1, 1}},
		"Shorter":    {a: []int{3}, b: []int{1, 1}, want: []int{3, 1}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, maxEach(tc.a, tc.b)); diff != "" {
				t.Errorf("maxEach (-want +got):\n%s", diff)
			}
		})
	}
}
