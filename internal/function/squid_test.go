package function

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// squidBinary is Debian's squid (cluster/packages/debian.txt), or $SQUID. A missing squid
// skips the real-squid tests loudly, and fails them under CI=true.
func squidBinary(t *testing.T) string {
	t.Helper()
	if s := os.Getenv("SQUID"); s != "" {
		return s
	}
	for _, s := range []string{"squid", "/usr/sbin/squid"} {
		if p, err := exec.LookPath(s); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("squid is not installed (Debian package squid, cluster/packages/debian.txt): the real-squid tests cannot run")
	}
	t.Skip("SKIPPED: squid is not installed (cluster/packages/install.sh installs it); the generated squid configuration was NOT tried on a real squid")
	return ""
}

// squidMainConf mimics Debian's /etc/squid/squid.conf around its include of conf.d: its safety
// rules before, "allow localhost" and "deny all" after. The rest are test-only lines: files in
// dir, names from dir/hosts, error pages from dir/errors.
const squidTestMainConf = `pid_filename %[1]s/squid.pid
cache_log %[1]s/cache.log
coredump_dir %[1]s
hosts_file %[1]s/hosts
error_directory %[1]s/errors
dns_nameservers 127.0.0.1
shutdown_lifetime 0 seconds
%[2]s
acl SSL_ports port 443
acl Safe_ports port 80
acl Safe_ports port 443
acl Safe_ports port 1025-65535
http_access deny !Safe_ports
http_access deny CONNECT !SSL_ports
http_access allow localhost manager
http_access deny manager
include %[1]s/conf.d/*.conf
http_access allow localhost
http_access deny all
`

// squidUnderTest is a squid started on loopback with a proxy's generated configuration.
type squidUnderTest struct {
	dir  string
	addr string // host:port of the proxy
}

// startSquid writes p's configuration (its guest paths replaced by dir's) and runs squid on
// it until the test ends.
func startSquid(t *testing.T, p Proxy, hosts string) squidUnderTest {
	t.Helper()
	return startSquidConf(t, p, hosts, func(c string) string { return c })
}

// startSquidConf is startSquid with the configuration changed by edit first.
func startSquidConf(t *testing.T, p Proxy, hosts string, edit func(string) string) squidUnderTest {
	t.Helper()
	bin := squidBinary(t)
	// Not t.TempDir(): its parent is private to root, and squid drops root for nobody.
	dir, err := os.MkdirTemp("", "squid-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	p.Port = int32(port)
	conf := edit(SquidConf(p, "proxy-test"))
	conf = strings.ReplaceAll(conf, SquidAccessLog, "stdio:"+dir+"/access.log")
	conf = strings.ReplaceAll(conf, SquidWouldDenyLog, "stdio:"+dir+"/would-deny.log")
	conf = strings.Replace(conf, fmt.Sprintf("http_port %d\n", port), fmt.Sprintf("http_port 127.0.0.1:%d\n", port), 1)
	user := ""
	if os.Geteuid() == 0 {
		user = "cache_effective_user nobody"
	}
	files := map[string]string{
		"squid.conf":          fmt.Sprintf(squidTestMainConf, dir, user),
		"conf.d/proxy.conf":   conf,
		"hosts":               hosts,
		"errors/.placeholder": "",
	}
	for _, pg := range SquidErrorPages(p) {
		files["errors/"+pg.Name] = pg.Content
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("proxy.conf:\n%s", conf)

	squidParse(t, bin, filepath.Join(dir, "squid.conf"))
	cmd := exec.Command(bin, "-N", "-d", "1", "-f", filepath.Join(dir, "squid.conf"))
	log, err := os.Create(filepath.Join(dir, "squid.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = log.Close()
		if t.Failed() {
			for _, f := range []string{"squid.out", "cache.log", "access.log", "would-deny.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				t.Logf("%s:\n%s", f, b)
			}
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Wait for squid to listen (not a timed assertion: it fails only when squid never starts).
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(filepath.Join(dir, "squid.out"))
			t.Fatalf("squid exited (%v) before it listened on %s:\n%s", err, addr, b)
		case <-time.After(100 * time.Millisecond):
		}
		if i == 300 {
			b, _ := os.ReadFile(filepath.Join(dir, "squid.out"))
			t.Fatalf("squid does not listen on %s:\n%s", addr, b)
		}
	}
	return squidUnderTest{dir: dir, addr: addr}
}

// squidParse fails the test unless `squid -k parse` reads the configuration without an error
// or a warning (but the one about error pages a test directory lacks).
func squidParse(t *testing.T, bin, conf string) {
	t.Helper()
	out, err := exec.Command(bin, "-k", "parse", "-f", conf).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if (strings.Contains(l, "ERROR") || strings.Contains(l, "WARNING")) && !strings.Contains(l, "error text file") && !strings.Contains(l, "error language files") {
			t.Errorf("squid -k parse: %s", l)
		}
	}
	if err != nil || t.Failed() {
		t.Fatalf("squid -k parse: %v\n%s", err, out)
	}
}

// TestRealSquidParsesTheGoldenFiles: every configuration in testdata/squid is one squid reads
// without an error or a warning.
func TestRealSquidParsesTheGoldenFiles(t *testing.T) {
	bin := squidBinary(t)
	files, err := filepath.Glob(filepath.Join("testdata", "squid", "*.conf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			conf, _, _ := strings.Cut(string(b), "\n# ---- ")
			dir := t.TempDir()
			conf = strings.ReplaceAll(conf, SquidAccessLog, "stdio:"+dir+"/access.log")
			conf = strings.ReplaceAll(conf, SquidWouldDenyLog, "stdio:"+dir+"/would-deny.log")
			for name, content := range map[string]string{
				"squid.conf":        fmt.Sprintf(squidTestMainConf, dir, ""),
				"conf.d/proxy.conf": conf,
				"hosts":             "",
			} {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			squidParse(t, bin, filepath.Join(dir, "squid.conf"))
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// origin204 is an origin server on addr (host:0) answering 204 to everything.
func origin204(t *testing.T, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// get fetches u through the proxy and returns the status, squid's X-Squid-Error and the body.
func (s squidUnderTest) get(t *testing.T, u string) (int, string, string) {
	t.Helper()
	pu, _ := url.Parse("http://" + s.addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 30 * time.Second}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s through squid: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Squid-Error"), string(b)
}

// logLine waits for squid's line about u in the log file and returns it (squid writes a
// request's line once it is done; the wait only ends early).
func (s squidUnderTest) logLine(t *testing.T, file, u string) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		if f, err := os.Open(filepath.Join(s.dir, file)); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.Contains(sc.Text(), " "+u+" ") {
					_ = f.Close()
					return sc.Text()
				}
			}
			_ = f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%s has no line for %s", file, u)
	return ""
}

// realSquidProxy is the Proxy the real-squid tests run: clients on loopback, the defaults of
// the platform's destination rules, the origin's address allowed by name.
func realSquidProxy(t *testing.T, mode ppv1.DestinationMode, domains, directives []string) Proxy {
	t.Helper()
	r, err := ResolveRules(ppv1.Rules{Destinations: &ppv1.Destinations{
		Mode:          mode,
		AllowedRanges: []ppv1.NamedRange{{Name: "origin", CIDR: "127.0.0.2/32"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := ProxySpec{Image: ImageSpec{BaseImageName: "debian-12"}, AllowedCIDRs: []string{"127.0.0.0/8"}, AllowedDomains: domains, SquidDirectives: directives}
	p, err := s.Validate()
	if err != nil {
		t.Fatal(err)
	}
	r.ClientCIDRs = nil // the test's clients are on loopback, which no platform would allow
	if err := r.Apply(&p); err != nil && !strings.Contains(err.Error(), "allowedCIDRs") {
		t.Fatal(err)
	}
	return p
}

// TestRealSquidDestinationRules feeds the generated configuration to Debian's squid: an
// allowed domain reaches the origin, a domain outside allowedDomains and addresses in the
// denied ranges (as written, or as squid resolves a name) get squid's 403 naming the rule,
// and the access log names it too; the platform's allowed range passes; and a team's
// "http_access allow all" changes none of it.
func TestRealSquidDestinationRules(t *testing.T) {
	allowed := origin204(t, "127.0.0.2")
	loopback := origin204(t, "127.0.0.1")
	hosts := "127.0.0.2 www.allowed.test denied.test\n10.9.9.9 private.allowed.test\n127.0.0.1 loopback.allowed.test\n"

	type want struct {
		status     int
		page, rule string // X-Squid-Error's page, and the rule the page names
	}
	ok := want{status: http.StatusNoContent}
	denied := func(page, rule string) want { return want{http.StatusForbidden, page, rule} }
	check := func(t *testing.T, s squidUnderTest, u string, w want) {
		t.Helper()
		status, xerr, body := s.get(t, u)
		if status != w.status {
			t.Errorf("GET %s: status %d (%s), want %d", u, status, xerr, w.status)
		}
		if w.page == "" {
			return
		}
		if !strings.HasPrefix(xerr, w.page+" ") {
			t.Errorf("GET %s: X-Squid-Error %q, want %s", u, xerr, w.page)
		}
		if !strings.Contains(body, "Access denied by rule "+w.rule+"<") {
			t.Errorf("GET %s: the 403 page does not name rule %s:\n%s", u, w.rule, body)
		}
		if l := s.logLine(t, "access.log", u); !strings.HasSuffix(l, " "+w.page) {
			t.Errorf("GET %s: access.log line %q does not end with %s", u, l, w.page)
		}
	}

	for name, directives := range map[string][]string{
		"PlatformRulesOnly":          nil,
		"TeamAppendsHTTPAccessAllow": {"http_access allow all"},
	} {
		t.Run(name+"/AllowedDomains", func(t *testing.T) {
			s := startSquid(t, realSquidProxy(t, ppv1.DestinationEnforce, []string{".allowed.test"}, directives), hosts)
			check(t, s, "http://www.allowed.test:"+allowed+"/", ok)
			check(t, s, "http://denied.test:"+allowed+"/", denied("ERR_PROXY_DOMAIN_NOT_ALLOWED", "proxy_domains"))
			check(t, s, "http://private.allowed.test/", denied("ERR_PROXY_DST_PRIVATE", "proxy_dst_private"))
			check(t, s, "http://loopback.allowed.test:"+loopback+"/", denied("ERR_PROXY_DST_LOOPBACK", "proxy_dst_loopback"))
		})
		t.Run(name+"/AnyDomain", func(t *testing.T) {
			s := startSquid(t, realSquidProxy(t, ppv1.DestinationEnforce, nil, directives), hosts)
			check(t, s, "http://127.0.0.2:"+allowed+"/", ok) // the platform's allowed range "origin"
			check(t, s, "http://127.0.0.1:"+loopback+"/", denied("ERR_PROXY_DST_LOOPBACK", "proxy_dst_loopback"))
			check(t, s, "http://[::1]:"+loopback+"/", denied("ERR_PROXY_DST_LOOPBACK", "proxy_dst_loopback"))
			check(t, s, "http://10.1.2.3/", denied("ERR_PROXY_DST_PRIVATE", "proxy_dst_private"))
			check(t, s, "http://192.168.1.1:8080/", denied("ERR_PROXY_DST_PRIVATE", "proxy_dst_private"))
			check(t, s, "http://169.254.169.254/latest/meta-data/", denied("ERR_PROXY_DST_LINK_LOCAL", "proxy_dst_link_local"))
			check(t, s, "http://100.64.0.1/", denied("ERR_PROXY_DST_CGNAT", "proxy_dst_cgnat"))
			check(t, s, "http://[fd00::1]/", denied("ERR_PROXY_DST_UNIQUE_LOCAL", "proxy_dst_unique_local"))
			check(t, s, "http://[fe80::1]/", denied("ERR_PROXY_DST_LINK_LOCAL", "proxy_dst_link_local"))
		})
	}

	// The control: the same team line placed before the platform's denies (where the function
	// never puts it) lets the loopback origin through, so the cases above would see it.
	t.Run("ControlTeamLineBeforeDenies", func(t *testing.T) {
		p := realSquidProxy(t, ppv1.DestinationEnforce, nil, []string{"http_access allow all"})
		s := startSquidConf(t, p, hosts, func(c string) string {
			c = strings.Replace(c, "http_access allow all\n", "", 1)
			return strings.Replace(c, "http_access deny !proxy_clients\n", "http_access allow all\nhttp_access deny !proxy_clients\n", 1)
		})
		check(t, s, "http://127.0.0.1:"+loopback+"/", ok)
	})

	// Report: nothing is denied, and each would-be denial is logged with its rule.
	t.Run("Report", func(t *testing.T) {
		s := startSquid(t, realSquidProxy(t, ppv1.DestinationReport, []string{".allowed.test"}, nil), hosts)
		check(t, s, "http://www.allowed.test:"+allowed+"/", ok)
		u := "http://loopback.allowed.test:" + loopback + "/"
		check(t, s, u, ok)
		if l := s.logLine(t, "would-deny.log", u); !strings.HasSuffix(l, " would-deny proxy_dst_loopback") {
			t.Errorf("would-deny.log line %q does not name proxy_dst_loopback", l)
		}
		u = "http://denied.test:" + allowed + "/"
		check(t, s, u, ok)
		if l := s.logLine(t, "would-deny.log", u); !strings.HasSuffix(l, " would-deny proxy_domains") {
			t.Errorf("would-deny.log line %q does not name proxy_domains", l)
		}
	})
}
