// Package stockimage boots, on the test bed, a Debian 12 image without squid and
// qemu-guest-agent (as a stock cloud image has neither) with the Proxy's real user-data, and
// shows both installed in that boot from a local apt repository on the bed's network, and squid
// answering. Its own package, so that the suite runs it beside the others (one guest boot and
// an apt install under TCG take minutes, mostly waiting).
package stockimage

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/function"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// guestReport runs in the guest through its agent once squid answered: what dpkg says of the
// two packages, what this boot's dpkg log installed, cloud-init's status and its per-module
// timings, and the apt sources the guest used.
const guestReport = `dpkg-query -W -f='pkg ${Package} ${Status}\n' squid qemu-guest-agent
grep -E ' install (squid|qemu-guest-agent):' /var/log/dpkg.log | sed 's/^/dpkg.log /'
cloud-init status --wait --long | sed 's/^/status /'
cloud-init analyze blame -i /var/log/cloud-init.log | sed 's/^/blame /'
sed 's/^/aptconf /' ` + function.AptSourcesConf + `
sed 's/^/aptsrc /' ` + function.AptSourcesList + `
ls /etc/apt/sources.list.d/ ` + function.AptSourcesParts + ` | sed 's/^/ls /'
`

// Paths of the stock image and its repository (cluster/testbed/stock-image.sh).
func stockImage(t *testing.T) (image, repo string) {
	t.Helper()
	image = os.Getenv("TESTBED_STOCK_IMAGE")
	if image == "" {
		image = os.Getenv("HOME") + "/.cache/provider-kvm/images/debian-12-stock.qcow2"
	}
	repo = strings.TrimSuffix(image, ".qcow2") + ".repo"
	for _, p := range []string{image, filepath.Join(repo, "Packages")} {
		if _, err := os.Stat(p); err != nil {
			notRun(t, fmt.Sprintf("no %s (build the stock image and its repository with make image-stock; make test does)", p))
		}
	}
	return image, repo
}

func notRun(t *testing.T, why string) {
	t.Helper()
	msg := "INTEGRATION TEST NOT RUN: " + why
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// bridgeIP is the address of the bed's NAT network on the host, which guests reach.
func bridgeIP(t *testing.T, network string) string {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", "qemu:///system", "net-dumpxml", network).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh net-dumpxml %s: %v\n%s", network, err, out)
	}
	m := regexp.MustCompile(`<ip address='([0-9.]+)'`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("network %s has no IPv4 address:\n%s", network, out)
	}
	return string(m[1])
}

// repoServer serves dir over HTTP on addr:0 and counts the .deb files guests fetched.
type repoServer struct {
	URL  string
	mu   sync.Mutex
	debs map[string]int
}

func serveRepo(t *testing.T, addr, dir string) *repoServer {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatalf("listen for the apt repository: %v", err)
	}
	r := &repoServer{URL: "http://" + l.Addr().String() + "/", debs: map[string]int{}}
	fs := http.FileServer(http.Dir(dir))
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, ".deb") {
			r.mu.Lock()
			r.debs[filepath.Base(req.URL.Path)]++
			r.mu.Unlock()
		}
		fs.ServeHTTP(w, req)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return r
}

func (r *repoServer) fetched(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n := range r.debs {
		if strings.HasPrefix(n, prefix+"_") {
			return true
		}
	}
	return false
}

// freePort is a TCP port on addr that nothing listens on now (boot-check.sh's 204 server's).
func freePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// proxyUserData renders a Proxy's user-data with the function's own code: the policy admits
// the bed's network as clients and as a destination (the 204 origin is on the bridge), and,
// when aptSources is set, names them as the guest's apt sources.
func proxyUserData(t *testing.T, bridge, aptSources string) string {
	t.Helper()
	cidr := bridge[:strings.LastIndex(bridge, ".")] + ".0/24"
	p, err := function.ProxySpec{Image: function.ImageSpec{BaseImageName: "stock"}, AllowedCIDRs: []string{cidr}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	pol := ppv1.Rules{Destinations: &ppv1.Destinations{AllowedRanges: []ppv1.NamedRange{{Name: "testbed", CIDR: cidr}}}}
	if aptSources != "" {
		pol.Packages = &ppv1.Packages{AptSources: aptSources}
	}
	r, err := function.ResolveRules(pol)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(&p); err != nil {
		t.Fatal(err)
	}
	ud, err := function.UserData(p, "stock-proxy")
	if err != nil {
		t.Fatal(err)
	}
	return ud
}

// bootCheck runs cluster/testbed/boot-check.sh with env and returns its output. The host's
// load before and after goes to the log: under TCG it decides how long a boot takes.
func bootCheck(t *testing.T, env ...string) string {
	t.Helper()
	load := func() string {
		b, _ := os.ReadFile("/proc/loadavg")
		return strings.TrimSpace(string(b))
	}
	t.Logf("host load before the boot: %s", load())
	defer func() { t.Logf("host load after the boot: %s", load()) }()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(wd, "..", "..", "cluster", "testbed", "boot-check.sh")
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("boot-check.sh (%s):\n%s", strings.Join(env, " "), out.String())
	if err != nil {
		t.Fatalf("boot-check.sh: %v (output above)", err)
	}
	return out.String()
}

// seconds is the number after `label = ` or `label=` in boot-check's output, such as
// "start->204 = 79.5s".
func seconds(out, label string) float64 {
	m := regexp.MustCompile(regexp.QuoteMeta(label) + ` ?= ?([0-9.]+)s`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

// blame is the duration cloud-init's analyze blame gives a module, such as
// "config-package-update-upgrade-install" (listed as "modules-final/config-..."); -1 when it is
// not listed.
func blame(out, module string) float64 {
	m := regexp.MustCompile(`guest\| blame +([0-9.]+)s \((?:[a-z-]+/)?` + regexp.QuoteMeta(module) + `\)`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

// TestStockImageInstallsSquid boots the stock image (no squid, no guest agent) with the
// Proxy's user-data, the platform's apt sources naming the bed's local repository
// ([trusted=yes]: unsigned, test bed only). It must: install both packages in that boot from
// that repository (the server saw their .deb files fetched; dpkg's log of the guest says
// installed now), answer 204 through squid on the Proxy's port (boot-check.sh), and have the
// guest agent answer (GUEST_EXEC goes through it). The guest network has no way out of the
// bed's namespace, so nothing can come from elsewhere.
func TestStockImageInstallsSquid(t *testing.T) {
	e := testbed.Require(t)
	image, repo := stockImage(t)
	net := e.Net
	if net == "" {
		net = "default"
	}
	bridge := bridgeIP(t, net)
	srv := serveRepo(t, bridge, repo)
	sources := "deb [trusted=yes] " + srv.URL + " ./"
	ud := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(ud, []byte(proxyUserData(t, bridge, sources)), 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	out := bootCheck(t, "IMAGE="+image, "USER_DATA="+ud, "VENDOR_DATA=none", "TIMEOUT=900",
		"PORT="+strconv.Itoa(freePort(t, bridge)), "GUEST_EXEC="+guestReport)

	for _, want := range []string{
		"guest| pkg squid install ok installed",
		"guest| pkg qemu-guest-agent install ok installed",
		"guest| status status: done",
		"guest| aptsrc " + sources,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the guest's report lacks %q", want)
		}
	}
	for _, p := range function.GuestPackages {
		if !regexp.MustCompile(`guest\| dpkg\.log \S+ \S+ install ` + p + `:`).MatchString(out) {
			t.Errorf("dpkg's log in the guest does not show %s installed at this boot", p)
		}
		if !srv.fetched(p) {
			t.Errorf("the guest did not fetch %s's .deb from the bed's repository %s", p, srv.URL)
		}
	}
	t.Logf("TIMING stock image: start->204 %.1fs (boot-check), package module %.1fs, bootcmd %.2fs (cloud-init analyze blame), test %.0fs",
		seconds(out, "start->204"), blame(out, "config-package-update-upgrade-install"), blame(out, "config-bootcmd"), time.Since(start).Seconds())
}
