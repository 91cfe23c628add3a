package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var dialer = (&net.Dialer{}).DialContext

// proxy is a minimal forward proxy on loopback: it answers requests for absolute URLs by
// fetching them, as squid does.
func proxy(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		resp, err := http.Get(r.URL.String())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestHTTPProxy(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(origin.Close)
	p := proxy(t)
	addr := strings.TrimPrefix(p.URL, "http://")

	cases := map[string]struct {
		proxy, url string
		want       int
		wantErr    string
	}{
		"Answers204":    {proxy: addr, url: origin.URL + "/204", want: 204},
		"WrongStatus":   {proxy: addr, url: origin.URL + "/missing", want: 204, wantErr: "answered 404 Not Found, want 204"},
		"ProxyNotThere": {proxy: "127.0.0.1:1", url: origin.URL + "/204", want: 204, wantErr: "cannot connect to the proxy"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := HTTPProxy(context.Background(), dialer, tc.proxy, tc.url, tc.want, 5*time.Second)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("HTTPProxy(): %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("HTTPProxy(): want error %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := TCP(context.Background(), dialer, l.Addr().String(), time.Second); err != nil {
		t.Errorf("TCP() to a listener: %v", err)
	}
	if err := TCP(context.Background(), dialer, "127.0.0.1:1", time.Second); err == nil {
		t.Error("TCP() to a closed port succeeded")
	}
}
