//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// What make bench-latency holds the provider to (median of the runs). They measure what the
// provider adds to a guest's boot, not the boot, which TCG makes vary by ±20 s.
const (
	targetSetup     = 3 * time.Second // Proxy created -> its domain started (image cached)
	targetReadiness = 2 * time.Second // first 204 through the guest's squid -> Proxy Ready
	targetDeletion  = 5 * time.Second // guest powered off -> KVMDomain and Proxy gone
	targetBoot      = 3 * time.Second // domain started -> first 204, over the plain-virsh boot
)

// latency is one Proxy's run; a zero duration is a step that was not seen.
type latency struct {
	setup, boot, readiness, deletion, baseline time.Duration
}

// TestBenchLatency is make bench-latency (cluster/e2e/run.sh bench): with the
// provider at its default flags, it caches the image once (BaseImage team-a/debian-12), then
// e.cfg.BenchRuns times boots the plain-virsh baseline and creates and deletes Proxy team-a/proxy-a,
// one guest at a time. Each step is timed from outside the provider: the domain's start and
// power-off from libvirt's lifecycle events on the test's own connection, and the guest's
// readiness by an independent prober that sends a request through the guest's squid every
// 0.5 s. It prints a table and fails when a median misses its target.
func TestBenchLatency(t *testing.T) {
	e := requireEnv(t, ModeBench)
	ctx := context.Background()
	keep, err := e.hosts.BaseVolumes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.finish(t, e2eNamespaces, keep) })
	if err := e.waitServers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.install(ctx); err != nil {
		t.Fatal(err)
	}
	ev, err := watchLifecycle(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.close()
	vals := e.values()
	if err := e.apply(ctx, "team-a.yaml", vals); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, "BaseImage team-a/debian-12 Ready", time.Second, 600*time.Second, func(ctx context.Context) error {
		bi := &v1alpha1.BaseImage{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "debian-12"}, bi); err != nil {
			return err
		}
		return conditionTrue("BaseImage", "team-a/debian-12", bi.GetCondition(xpv2.TypeReady))
	}); err != nil {
		t.Fatal(err)
	}
	// The controllers start as their CRDs are established, seconds apart: the first run must
	// not time a controller's start-up.
	if err := waitFor(ctx, "the provider's managed resource controllers started", time.Second, 120*time.Second, e.controllersStarted); err != nil {
		t.Fatal(err)
	}
	logf("bench-latency: image cached; %d runs of plain virsh then a Proxy, one guest at a time (provider --poll=%s)", e.cfg.BenchRuns, e.cfg.Poll)

	var runs []latency
	for i := 1; i <= e.cfg.BenchRuns; i++ {
		var l latency
		if !e.cfg.SkipBaseline {
			if err := e.lanBaseline(ctx); err != nil {
				t.Fatal(err)
			}
			l.baseline = seconds(e.tl.baseline)
		}
		if err := e.benchProxy(ctx, ev, vals, &l); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		logf("run %d: setup %s, boot %s (baseline %s), readiness latency %s, deletion latency %s", i,
			secs(l.setup), secs(l.boot), secs(l.baseline), secs(l.readiness), secs(l.deletion))
		runs = append(runs, l)
	}
	if missed := printLatencies(os.Stdout, runs); len(missed) > 0 {
		t.Errorf("targets missed: %v", missed)
	}
}

// benchProxy creates Proxy team-a/proxy-a, times it to Ready, deletes it and times that.
func (e *env) benchProxy(ctx context.Context, ev *lifecycle, vals map[string]string, l *latency) error {
	const ns, name, domain = "team-a", "proxy-a", "team-a_proxy-a"
	ev.reset(domain)
	t0 := time.Now()
	if err := e.apply(ctx, "proxy-a.yaml", vals); err != nil {
		return err
	}
	started, err := ev.wait(ctx, domain, libvirt.DomainEventStarted, e.cfg.GuestTimeout)
	if err != nil {
		return err
	}
	l.setup = started.Sub(t0)

	// The independent prober: the guest's address from libvirt's DHCP leases, then a request
	// through its squid every 0.5 s, as curl -x would send it.
	first204 := make(chan time.Time, 1)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go e.probeUntil204(pctx, domain, vals["PROBE_URL"], first204)

	var ready time.Time
	xr := newUnstructured(gvkProxy, ns, name)
	if err := waitFor(ctx, "Proxy team-a/proxy-a Ready", 200*time.Millisecond, e.cfg.GuestTimeout, func(ctx context.Context) error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
			return err
		}
		if err := conditionTrue("Proxy", "team-a/proxy-a", unstructuredCondition(xr, xpv2.TypeReady)); err != nil {
			return err
		}
		ready = time.Now()
		return nil
	}); err != nil {
		return err
	}
	select {
	case f := <-first204:
		l.boot, l.readiness = f.Sub(started), ready.Sub(f)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the Proxy is Ready but the independent prober saw no 204 through its squid")
	}

	if err := e.c.Delete(ctx, xr); err != nil {
		return err
	}
	off, err := ev.wait(ctx, domain, libvirt.DomainEventStopped, e.cfg.DeleteTimeout)
	if err != nil {
		return err
	}
	var gone time.Time
	if err := waitFor(ctx, "KVMDomain and Proxy team-a/proxy-a gone", 200*time.Millisecond, e.cfg.DeleteTimeout, func(ctx context.Context) error {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.KVMDomain{}); !kerrors.IsNotFound(err) {
			return fmt.Errorf("KVMDomain still there (%v)", err)
		}
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), newUnstructured(gvkProxy, ns, name)); !kerrors.IsNotFound(err) {
			return fmt.Errorf("Proxy still there (%v)", err)
		}
		gone = time.Now()
		return nil
	}); err != nil {
		return err
	}
	l.deletion = gone.Sub(off)
	// The SeedVolume goes after the domain; the next run starts on a clean namespace.
	return waitFor(ctx, "SeedVolumes of team-a gone", time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
		svs := &v1alpha1.SeedVolumeList{}
		if err := e.c.List(ctx, svs, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(svs.Items) > 0 {
			return fmt.Errorf("%d left", len(svs.Items))
		}
		return nil
	})
}

// lanLeaseIP is the address the LAN's DHCP server (cluster/lan's dnsmasq) leased to the
// domain's first interface, read from the domain's MAC and the lease file: known to the test
// without the provider; "" while there is none.
func (e *env) lanLeaseIP(domain string) string {
	dom, err := e.hosts.First().DomainXML(domain)
	if err != nil || dom.Devices == nil || len(dom.Devices.Interfaces) == 0 || dom.Devices.Interfaces[0].MAC == nil {
		return ""
	}
	mac := strings.ToLower(dom.Devices.Interfaces[0].MAC.Address)
	b, err := os.ReadFile(e.cfg.DHCPLeases)
	if err != nil {
		return ""
	}
	// dnsmasq's lease file: EXPIRY MAC IP HOSTNAME CLIENT-ID, one lease a line.
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && strings.EqualFold(f[1], mac) {
			return f[2]
		}
	}
	return ""
}

// probeUntil204 sends GET probeURL through the squid of domain every 0.5 s and reports the
// time of the first 204.
func (e *env) probeUntil204(ctx context.Context, domain, probeURL string, first chan<- time.Time) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	ip := ""
	for {
		if ip == "" {
			ip = e.lanLeaseIP(domain)
		}
		if ip != "" {
			proxy := &url.URL{Scheme: "http", Host: ip + ":3128"}
			c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}}
			if resp, err := c.Get(probeURL); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusNoContent {
					first <- time.Now()
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// lifecycle records the time of each domain lifecycle event, from a connection of its own.
type lifecycle struct {
	l      *libvirt.Libvirt
	cancel context.CancelFunc
	mu     sync.Mutex
	seen   map[string]map[libvirt.DomainEventType]time.Time
}

func watchLifecycle(cfg config) (*lifecycle, error) {
	if len(cfg.Hosts) == 0 {
		return nil, fmt.Errorf("no libvirt host configured")
	}
	sock := cfg.Hosts[0].Socket
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(10*time.Second)))
	if err := l.ConnectToURI(libvirt.ConnectURI(cfg.LibvirtURI)); err != nil {
		return nil, fmt.Errorf("libvirt at %s: %w", sock, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := l.LifecycleEvents(ctx)
	if err != nil {
		cancel()
		_ = l.Disconnect()
		return nil, fmt.Errorf("subscribing to lifecycle events: %w", err)
	}
	lc := &lifecycle{l: l, cancel: cancel, seen: map[string]map[libvirt.DomainEventType]time.Time{}}
	go func() {
		for ev := range ch {
			at := time.Now()
			lc.mu.Lock()
			m := lc.seen[ev.Dom.Name]
			if m == nil {
				m = map[libvirt.DomainEventType]time.Time{}
				lc.seen[ev.Dom.Name] = m
			}
			if _, ok := m[libvirt.DomainEventType(ev.Event)]; !ok {
				m[libvirt.DomainEventType(ev.Event)] = at
			}
			lc.mu.Unlock()
		}
	}()
	return lc, nil
}

func (lc *lifecycle) close() {
	lc.cancel()
	_ = lc.l.Disconnect()
}

// reset forgets what was seen of domain.
func (lc *lifecycle) reset(domain string) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	delete(lc.seen, domain)
}

// wait returns when domain's first event of type typ since the last reset came.
func (lc *lifecycle) wait(ctx context.Context, domain string, typ libvirt.DomainEventType, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := waitFor(ctx, fmt.Sprintf("libvirt event %d of %s", typ, domain), 100*time.Millisecond, timeout, func(context.Context) error {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		t, ok := lc.seen[domain][typ]
		if !ok {
			return fmt.Errorf("not seen")
		}
		at = t
		return nil
	})
	return at, err
}

// printLatencies prints each run and the medians against the targets, and returns the
// targets the medians miss.
func printLatencies(w *os.File, runs []latency) []string {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tsetup (s)\treadiness latency (s)\tdeletion latency (s)\tguest boot (s)\tplain-virsh boot (s)\tboot over baseline (s)\t")
	pick := func(f func(latency) time.Duration) []time.Duration {
		var ds []time.Duration
		for _, r := range runs {
			ds = append(ds, f(r))
		}
		return ds
	}
	over := func(r latency) time.Duration {
		if r.baseline == 0 {
			return 0
		}
		return r.boot - r.baseline
	}
	for i, r := range runs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", i+1, secs(r.setup), secs(r.readiness), secs(r.deletion), secs(r.boot), secs(r.baseline), secs(over(r)))
	}
	med := latency{setup: median(pick(func(r latency) time.Duration { return r.setup })),
		readiness: median(pick(func(r latency) time.Duration { return r.readiness })),
		deletion:  median(pick(func(r latency) time.Duration { return r.deletion })),
		boot:      median(pick(func(r latency) time.Duration { return r.boot })),
		baseline:  median(pick(func(r latency) time.Duration { return r.baseline }))}
	medOver := median(pick(over))
	fmt.Fprintf(tw, "median\t%s\t%s\t%s\t%s\t%s\t%s\t\n", secs(med.setup), secs(med.readiness), secs(med.deletion), secs(med.boot), secs(med.baseline), secs(medOver))
	fmt.Fprintf(tw, "target\t<= %s\t<= %s\t<= %s\t\t\t<= %s\t\n", secs(targetSetup), secs(targetReadiness), secs(targetDeletion), secs(targetBoot))
	_ = tw.Flush()
	var missed []string
	check := func(what string, got, limit time.Duration) {
		if got > limit {
			missed = append(missed, fmt.Sprintf("%s %ss > %ss", what, secs(got), secs(limit)))
		}
	}
	check("setup", med.setup, targetSetup)
	check("readiness latency", med.readiness, targetReadiness)
	check("deletion latency", med.deletion, targetDeletion)
	if med.baseline > 0 {
		check("guest boot over the baseline", medOver, targetBoot)
	}
	return missed
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// seconds parses "79.5" (seconds), 0 when it is not a number.
func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// controllersStarted: the provider's metrics (its pod's :8080, reached from node over the pods'
// bridge) show a work queue for each managed resource controller (controller-runtime creates
// it when the controller starts).
func (e *env) controllersStarted(ctx context.Context) error {
	pod, err := e.providerPod(ctx)
	if err != nil {
		return err
	}
	body, err := httpBody(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, "8080")+"/metrics", 5*time.Second)
	if err != nil {
		return err
	}
	for _, kind := range []string{"baseimage", "seedvolume", "kvmdomain"} {
		if !strings.Contains(body, `workqueue_adds_total{controller="managed/`+kind+`.kvm.crossplane.io"`) {
			return fmt.Errorf("no work queue of controller managed/%s.kvm.crossplane.io yet", kind)
		}
	}
	return nil
}

// httpBody is the body of a GET answered 200.
func httpBody(ctx context.Context, u string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return string(b), nil
}
