//go:build lan

package lan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// linkStats is one interface of `ip -j -s -d link`.
type linkStats struct {
	Name      string `json:"ifname"`
	NetnsID   *int   `json:"link_netnsid"`
	LinkIndex int    `json:"link_index"`
	Master    string `json:"master"`
	LinkType  string `json:"link_type"`
	Info      struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
	Stats struct {
		RX struct{ Bytes, Packets uint64 } `json:"rx"`
		TX struct{ Bytes, Packets uint64 } `json:"tx"`
	} `json:"stats64"`
}

func links(t testing.TB, netns string) []linkStats {
	t.Helper()
	var ls []linkStats
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", netns, "-j", "-s", "-d", "link", "show")), &ls); err != nil {
		t.Fatalf("ip -n %s -j link: %v", netns, err)
	}
	return ls
}

func find(ls []linkStats, name string) (linkStats, bool) {
	for _, l := range ls {
		if l.Name == name {
			return l, true
		}
	}
	return linkStats{}, false
}

// atStart holds the LAN ports' counters when the package's tests began (nil without a bed).
var atStart map[string]linkStats

func TestMain(m *testing.M) {
	if ns := os.Getenv("LAN_NETNS"); ns != "" && os.Geteuid() == 0 {
		if out, err := exec.Command("ip", "-n", ns, "-j", "-s", "-d", "link", "show").Output(); err == nil {
			var ls []linkStats
			if json.Unmarshal(out, &ls) == nil {
				atStart = map[string]linkStats{}
				for _, l := range ls {
					atStart[l.Name] = l
				}
			}
		}
	}
	os.Exit(m.Run())
}

// rootNetns is the network namespace the tests were started from (make test-lan runs in the
// root one): PID 1's where it can be read, else that of the nearest ancestor process outside
// every namespace of the bed (exec.sh -> ip netns exec -> go test run inside node).
func rootNetns(t testing.TB, ours []string) string {
	t.Helper()
	id := func(path string) (string, bool) {
		var st syscall.Stat_t
		if syscall.Stat(path, &st) != nil {
			return "", false
		}
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino), true
	}
	bed := map[string]bool{}
	for _, ns := range ours {
		if i, ok := id("/run/netns/" + ns); ok {
			bed[i] = true
		}
	}
	if i, ok := id("/proc/1/ns/net"); ok && !bed[i] {
		if f, err := os.Open("/proc/1/ns/net"); err == nil {
			_ = f.Close()
			return "/proc/1/ns/net"
		}
	}
	for pid := os.Getppid(); pid > 1; {
		p := fmt.Sprintf("/proc/%d/ns/net", pid)
		if i, ok := id(p); ok && !bed[i] {
			return p
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 {
			break
		}
		pid, _ = strconv.Atoi(f[1])
	}
	t.Fatal("found no process outside the bed's namespaces to read the root namespace from")
	return ""
}

// inRoot runs a read-only ip command in the root network namespace: a lookup, no packet is sent.
func inRoot(t testing.TB, root string, args ...string) string {
	t.Helper()
	return run(t, "nsenter", append([]string{"--net=" + root, "ip"}, args...)...)
}

// TestTrafficStaysInside: the LAN is closed. The root namespace has no address, route or
// interface of it; every namespace of the bed routes only the LAN's subnet (no default route,
// so nothing can be sent elsewhere); every interface is loopback, a bridge, a guest's tap or a
// veth whose peer is in another namespace of the bed (the only ways out of a namespace); each
// veth pair's counters match (what one end sent, the other received), and the LAN's ports
// carried this package's traffic. dnsmasq listens for DHCP on the LAN bridge only, no DNS.
func TestTrafficStaysInside(t *testing.T) {
	b := requireLAN(t)
	_, subnet, err := net.ParseCIDR(b.subnet)
	if err != nil {
		t.Fatal(err)
	}
	ours := append([]string{b.lanNetns, b.nodeNetns}, func() (n []string) {
		for _, h := range b.hosts {
			n = append(n, h.netns)
		}
		return n
	}()...)

	// --- the root namespace knows nothing of the LAN
	root := rootNetns(t, ours)
	t.Logf("root namespace read through %s", root)
	for _, f := range strings.Fields(inRoot(t, root, "-4", "-o", "addr", "show")) {
		if ip, _, err := net.ParseCIDR(f); err == nil && subnet.Contains(ip) {
			t.Errorf("the root namespace has address %s in %s", f, subnet)
		}
	}
	if r := strings.TrimSpace(inRoot(t, root, "-4", "route", "show", "table", "all", "root", b.subnet)); r != "" {
		t.Errorf("the root namespace routes into %s: %s", subnet, r)
	}
	for _, f := range strings.Fields(inRoot(t, root, "-o", "link", "show")) {
		name := strings.TrimSuffix(strings.SplitN(f, "@", 2)[0], ":")
		if name == os.Getenv("LAN_BRIDGE") || strings.HasPrefix(name, "p-") || name == "lan0" {
			t.Errorf("the root namespace has an interface of the LAN: %s", name)
		}
	}

	// --- every namespace of the bed: only the LAN's routes, only interfaces into the bed
	nsName := regexp.MustCompile(`nsid (\d+) \(iproute2 netns name: ([^)]+)\)`)
	for _, ns := range ours {
		var routes []struct {
			Dst   string `json:"dst"`
			Table string `json:"table"`
		}
		if err := json.Unmarshal([]byte(run(t, "ip", "-n", ns, "-4", "-j", "route", "show")), &routes); err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if r.Dst != subnet.String() {
				t.Errorf("netns %s has route %q beyond %s", ns, r.Dst, subnet)
			}
		}
		if r := strings.TrimSpace(run(t, "ip", "-n", ns, "-6", "route", "show", "default")); r != "" {
			t.Errorf("netns %s has an IPv6 default route: %s", ns, r)
		}
		ids := map[int]string{}
		for _, m := range nsName.FindAllStringSubmatch(run(t, "ip", "-n", ns, "netns", "list-id"), -1) {
			var id int
			_, _ = fmt.Sscan(m[1], &id)
			ids[id] = m[2]
		}
		var seen []string
		for _, l := range links(t, ns) {
			switch {
			case l.LinkType == "loopback", l.Info.Kind == "bridge":
			case l.Info.Kind == "tun" && strings.HasPrefix(l.Name, "vnet"): // a guest's tap, made by this host's libvirtd
				if l.Master == "" {
					t.Errorf("netns %s: tap %s is on no bridge", ns, l.Name)
				}
			case l.Info.Kind == "veth":
				if l.NetnsID == nil || !slices.Contains(ours, ids[*l.NetnsID]) {
					t.Errorf("netns %s: veth %s has its peer outside the bed (netnsid %v, ids %v)", ns, l.Name, l.NetnsID, ids)
				}
			default:
				t.Errorf("netns %s: unexpected interface %s (kind %q, type %q)", ns, l.Name, l.Info.Kind, l.LinkType)
			}
			seen = append(seen, l.Name+"/"+l.Info.Kind)
		}
		t.Logf("netns %s: routes %v, interfaces %v", ns, routes, seen)
	}

	// --- 1 MB from each host to node over SSH: it shows up on the hosts' LAN ports and node's
	before := map[string]linkStats{}
	for _, l := range links(t, b.lanNetns) {
		before[l.Name] = l
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const mb = 1 << 20
	for _, h := range b.hosts {
		out, err := b.ssh(ctx, h, nil, fmt.Sprintf("head -c %d /dev/zero", mb))
		if err != nil || len(out) != mb {
			t.Fatalf("1 MB from %s: got %d B, %v", h.name, len(out), err)
		}
	}
	after := map[string]linkStats{}
	for _, l := range links(t, b.lanNetns) {
		after[l.Name] = l
	}
	delta := func(port string, rx bool) uint64 {
		if rx {
			return after[port].Stats.RX.Bytes - before[port].Stats.RX.Bytes
		}
		return after[port].Stats.TX.Bytes - before[port].Stats.TX.Bytes
	}
	for _, h := range b.hosts {
		if d := delta("p-"+h.netns, true); d < mb {
			t.Errorf("1 MB from %s: the LAN received only %d B from it", h.name, d)
		}
	}
	if d := delta("p-"+b.nodeNetns, false); d < uint64(len(b.hosts))*mb {
		t.Errorf("the LAN delivered only %d B to node, want >= %d", d, len(b.hosts)*mb)
	}
	t.Logf("1 MB from each host over SSH: LAN received %d B from host-a, %d B from host-b, delivered %d B to node",
		delta("p-"+b.hosts[0].netns, true), delta("p-"+b.hosts[1].netns, true), delta("p-"+b.nodeNetns, false))

	// --- veth pairs: counters of both ends agree (what one end sent, the other received)
	for _, peer := range ours[1:] {
		port := "p-" + peer
		var a, p linkStats
		agree := false
		for range 50 { // background packets (ARP, IPv6) may be in flight: read both ends again
			la, lp := links(t, peer), links(t, b.lanNetns)
			var okA, okP bool
			a, okA = find(la, "lan0")
			p, okP = find(lp, port)
			if !okA || !okP {
				t.Fatalf("veth pair %s/lan0 - %s/%s missing", peer, b.lanNetns, port)
			}
			if a.Stats.TX.Packets == p.Stats.RX.Packets && a.Stats.RX.Packets == p.Stats.TX.Packets {
				agree = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !agree {
			t.Errorf("%s/lan0 sent %d, received %d packets; %s/%s received %d, sent %d: something went elsewhere",
				peer, a.Stats.TX.Packets, a.Stats.RX.Packets, b.lanNetns, port, p.Stats.RX.Packets, p.Stats.TX.Packets)
		}
		start := atStart[port]
		t.Logf("%s/lan0 <-> %s/%s: %d/%d packets sent/received, matching; since the package started %d B into the LAN, %d B out of it",
			peer, b.lanNetns, port, a.Stats.TX.Packets, a.Stats.RX.Packets,
			p.Stats.RX.Bytes-start.Stats.RX.Bytes, p.Stats.TX.Bytes-start.Stats.TX.Bytes)
	}

	// --- dnsmasq: DHCP on the LAN bridge only, no DNS port
	out := run(t, "ss", "-N", b.lanNetns, "-Hlnptu")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if !strings.HasSuffix(f[4], "%"+os.Getenv("LAN_BRIDGE")+":67") {
			t.Errorf("netns %s listens beyond DHCP on %s: %s", b.lanNetns, os.Getenv("LAN_BRIDGE"), line)
		}
	}
	t.Logf("netns %s listeners: %s", b.lanNetns, strings.TrimSpace(out))
}
