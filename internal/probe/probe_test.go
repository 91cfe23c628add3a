package probe

import (
	"context"
	"errors"
	"io"
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

// noDeadlineConn is a connection like one tunnelled through SSH: deadlines are refused.
type noDeadlineConn struct{ net.Conn }

func (noDeadlineConn) SetDeadline(time.Time) error      { return errors.New("deadline not supported") }
func (noDeadlineConn) SetReadDeadline(time.Time) error  { return errors.New("deadline not supported") }
func (noDeadlineConn) SetWriteDeadline(time.Time) error { return errors.New("deadline not supported") }

// A guest destroyed in the middle of a probe never answers and never resets the connection;
// the probe must still end at its timeout, or the reconcile that runs it hangs for good.
func TestHTTPProxySilentPeerWithoutDeadlines(t *testing.T) {
	client, server := net.Pipe()
	t.Cleanup(func() { _ = server.Close() })
	go func() { _, _ = io.Copy(io.Discard, server) }() // reads the request, never answers
	dial := func(context.Context, string, string) (net.Conn, error) { return noDeadlineConn{client}, nil }

	done := make(chan error, 1)
	go func() {
		done <- HTTPProxy(context.Background(), dial, "192.0.2.1:3128", "http://192.0.2.2/", 204, 200*time.Millisecond)
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("HTTPProxy() to a silent peer succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("HTTPProxy() to a silent peer over a connection without deadlines did not return")
	}
}
