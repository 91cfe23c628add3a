// Command httpget is the application pod of the Proxy's end-to-end test and of make demo
// (test/e2e): a program that honours HTTP_PROXY, as curl, apt and Go's own clients do. It
// GETs each URL given as an argument through the proxy HTTP_PROXY (or http_proxy) names, the
// Proxy Secret's url (http://<service>.<namespace>.svc:<port>), and prints what it learnt:
//
//	proxy http://egress-a-proxy.team-a.svc:3128 resolves to 10.96.0.57
//	204 http://10.77.0.10:18204/ via="1.1 egress-a (squid/5.7)"
//	403 http://172.16.0.1:8080/ via="1.1 egress-a (squid/5.7)" squid-error="ERR_PROXY_DST_PRIVATE 0"
//
// The proxy's host name is looked up through the pod's resolver (cluster DNS) first and
// printed, so the output shows the Service's cluster IP the requests went to. It refuses to
// run without a proxy (a direct request could answer 204 as well), and exits 1 when a request
// got no HTTP answer at all; a 403 is an answer.
//
// With HTTPGET_EVERY set to a duration, it asks again every that long until it is stopped
// (SIGTERM, as a pod's deletion sends), each line prefixed with the time the round began, and
// each request bounded by the interval's tenfold (at most the 20 s above): the prober a
// test watches a Proxy through while its replicas come and go.
//
//	12:04:05.5 204 http://10.77.0.10:18204/ via="1.1 egress-a (squid/5.7)"
//	12:04:06.0 ERROR http://10.77.0.10:18204/ context deadline exceeded
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// timeout bounds each request, and the proxy's name lookup.
const timeout = 20 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run does the work of main with its arguments, environment and outputs; it returns the exit
// status.
func run(ctx context.Context, urls []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(urls) == 0 {
		say(stderr, "usage: httpget URL... (through the proxy HTTP_PROXY or http_proxy names)\n")
		return 2
	}
	proxy, err := proxyURL(getenv)
	if err != nil {
		say(stderr, "httpget: %v\n", err)
		return 2
	}
	every, err := interval(getenv("HTTPGET_EVERY"))
	if err != nil {
		say(stderr, "httpget: %v\n", err)
		return 2
	}
	addrs, err := lookup(ctx, proxy.Hostname())
	if err != nil {
		say(stderr, "httpget: cannot resolve the proxy %s: %v\n", proxy.Redacted(), err)
		return 1
	}
	say(stdout, "proxy %s resolves to %s\n", proxy.Redacted(), strings.Join(addrs, " "))
	cfg := &httpproxy.Config{HTTPProxy: proxy.String(), NoProxy: firstEnv(getenv, "NO_PROXY", "no_proxy")}
	pf := cfg.ProxyFunc()
	tr := &http.Transport{
		Proxy:             func(r *http.Request) (*url.URL, error) { return pf(r.URL) },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: timeout,
		// A redirect is the answer: its status is printed, not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if every == 0 {
		return round(ctx, c, urls, "", stdout)
	}
	c.Timeout = min(timeout, 10*every)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case at := <-tick.C:
			round(ctx, c, urls, at.UTC().Format("15:04:05.0")+" ", stdout)
		}
	}
}

// round GETs each of urls once and prints a line per answer, each after prefix; it returns
// 1 when a request got no HTTP answer.
func round(ctx context.Context, c *http.Client, urls []string, prefix string, stdout io.Writer) int {
	status := 0
	for _, u := range urls {
		line, err := get(ctx, c, u)
		if ctx.Err() != nil && prefix != "" {
			return status // stopped in the middle of a request: no answer to report
		}
		if err != nil {
			say(stdout, "%sERROR %s %v\n", prefix, u, err)
			status = 1
			continue
		}
		say(stdout, "%s%s\n", prefix, line)
	}
	return status
}

// interval is HTTPGET_EVERY's duration: 0 when unset (one round), at least 100ms.
func interval(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 100*time.Millisecond {
		return 0, fmt.Errorf("HTTPGET_EVERY %q is not a duration of at least 100ms", v)
	}
	return d, nil
}

// say prints to w; a pod's log that cannot be written to has nobody to tell.
func say(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }

// proxyURL is the proxy HTTP_PROXY or http_proxy names (the first set), as Go's
// http.ProxyFromEnvironment reads them; a bare host:port means http://host:port.
func proxyURL(getenv func(string) string) (*url.URL, error) {
	v := firstEnv(getenv, "HTTP_PROXY", "http_proxy")
	if v == "" {
		return nil, fmt.Errorf("neither HTTP_PROXY nor http_proxy is set: set it to the Proxy Secret's url")
	}
	if !strings.Contains(v, "://") {
		v = "http://" + v
	}
	u, err := url.Parse(v)
	if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("HTTP_PROXY %q is not an http:// URL with a host", v)
	}
	return u, nil
}

func firstEnv(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// lookup resolves host as the transport will (an address is itself).
func lookup(ctx context.Context, host string) ([]string, error) {
	if net.ParseIP(host) != nil {
		return []string{host}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return net.DefaultResolver.LookupHost(ctx, host)
}

// get GETs u and describes the answer: its status, URL, the Via header squid adds and squid's
// X-Squid-Error (which names the rule of a denial page).
func get(ctx context.Context, c *http.Client, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil) //nolint:gosec // G704: the URLs are the pod's arguments, fetched through the proxy on purpose
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req) //nolint:gosec // G704: as above
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	line := fmt.Sprintf("%d %s via=%q", resp.StatusCode, u, resp.Header.Get("Via"))
	if e := resp.Header.Get("X-Squid-Error"); e != "" {
		line += fmt.Sprintf(" squid-error=%q", e)
	}
	return line, nil
}
