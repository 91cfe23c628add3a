package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeProxy answers as squid does: 204 for the origin, its 403 page for anything else, a Via
// header on both. It records the request URIs it was asked for.
func fakeProxy(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	var seen []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.RequestURI)
		w.Header().Set("Via", "1.1 fake (squid/5.7)")
		if r.URL.Host == "origin.test" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("X-Squid-Error", "ERR_PROXY_DST_PRIVATE 0")
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(s.Close)
	return s, &seen
}

func TestRun(t *testing.T) {
	proxy, seen := fakeProxy(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	deadAddr := closed.Listener.Addr().String()
	closed.Close()
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(proxy.URL, "http://"))

	cases := map[string]struct {
		reason   string
		urls     []string
		env      map[string]string
		want     int
		wantOut  string
		wantErr  string
		wantSeen []string
	}{
		"ThroughProxy": {
			reason: "Each URL is asked of the proxy as an absolute URI; the status, Via and squid's error are printed.",
			urls:   []string{"http://origin.test/", "http://172.16.0.1:8080/"},
			env:    map[string]string{"HTTP_PROXY": proxy.URL},
			want:   0,
			wantOut: "proxy " + proxy.URL + " resolves to " + host + "\n" +
				`204 http://origin.test/ via="1.1 fake (squid/5.7)"` + "\n" +
				`403 http://172.16.0.1:8080/ via="1.1 fake (squid/5.7)" squid-error="ERR_PROXY_DST_PRIVATE 0"` + "\n",
			wantSeen: []string{"http://origin.test/", "http://172.16.0.1:8080/"},
		},
		"LowerCase": {
			reason:   "http_proxy is read when HTTP_PROXY is not set.",
			urls:     []string{"http://origin.test/"},
			env:      map[string]string{"http_proxy": proxy.URL},
			want:     0,
			wantOut:  "proxy " + proxy.URL + " resolves to " + host + "\n" + `204 http://origin.test/ via="1.1 fake (squid/5.7)"` + "\n",
			wantSeen: []string{"http://origin.test/"},
		},
		"NoProxy": {
			reason:  "Without a proxy it refuses to run: a direct request could answer 204 too.",
			urls:    []string{"http://origin.test/"},
			env:     map[string]string{},
			want:    2,
			wantErr: "httpget: neither HTTP_PROXY nor http_proxy is set: set it to the Proxy Secret's url\n",
		},
		"ProxyDown": {
			reason:  "A request that gets no answer is an ERROR line and exit status 1.",
			urls:    []string{"http://origin.test/"},
			env:     map[string]string{"HTTP_PROXY": "http://" + deadAddr},
			want:    1,
			wantOut: "proxy http://" + deadAddr + " resolves to " + host + "\nERROR http://origin.test/",
		},
		"BadEvery": {
			reason:  "An interval that is no duration, or under 100ms, is refused before any request.",
			urls:    []string{"http://origin.test/"},
			env:     map[string]string{"HTTP_PROXY": proxy.URL, "HTTPGET_EVERY": "5"},
			want:    2,
			wantErr: "httpget: HTTPGET_EVERY \"5\" is not a duration of at least 100ms\n",
		},
		"NoURL": {
			reason:  "Without a URL it says how to use it.",
			env:     map[string]string{"HTTP_PROXY": proxy.URL},
			want:    2,
			wantErr: "usage: httpget URL... (through the proxy HTTP_PROXY or http_proxy names)\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			*seen = nil
			var out, errOut bytes.Buffer
			got := run(context.Background(), tc.urls, func(k string) string { return tc.env[k] }, &out, &errOut)
			if got != tc.want {
				t.Errorf("%s\nrun(...): exit %d, want %d (stderr %q)", tc.reason, got, tc.want, errOut.String())
			}
			gotOut := out.String()
			if name == "ProxyDown" && strings.HasPrefix(gotOut, tc.wantOut) {
				gotOut = tc.wantOut // the dial error's text is the system's
			}
			if diff := cmp.Diff(tc.wantOut, gotOut); diff != "" {
				t.Errorf("%s\nstdout: -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantErr, errOut.String()); diff != "" {
				t.Errorf("%s\nstderr: -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantSeen, *seen); diff != "" {
				t.Errorf("%s\nrequests the proxy saw: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestEvery(t *testing.T) {
	proxy, _ := fakeProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 550*time.Millisecond)
	defer cancel()
	var out, errOut bytes.Buffer
	env := map[string]string{"HTTP_PROXY": proxy.URL, "HTTPGET_EVERY": "100ms"}
	if got := run(ctx, []string{"http://origin.test/"}, func(k string) string { return env[k] }, &out, &errOut); got != 0 {
		t.Fatalf("run(...) until stopped: exit %d, want 0 (stderr %q)", got, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 { // the proxy line and at least two rounds
		t.Fatalf("want the proxy line and at least two rounds in 550ms at 100ms, got:\n%s", out.String())
	}
	round := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d 204 http://origin\.test/ via="1\.1 fake \(squid/5\.7\)"$`)
	for _, l := range lines[1:] {
		if !round.MatchString(l) {
			t.Errorf("line %q: want the round's time, then the answer", l)
		}
	}
}
