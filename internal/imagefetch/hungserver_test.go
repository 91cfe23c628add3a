package imagefetch

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// hungServer is a TCP listener on loopback that accepts and then does what serve says with
// each connection (nothing: never answers), like an image server that hangs. It returns the
// port.
func hungServer(t *testing.T, serve func(c net.Conn)) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if serve != nil {
				go serve(c)
			}
		}
	}()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// TestDownloadHungServer checks that a download from a server that never sends response
// headers ends after headerTimeoutSeconds with a retryable *LimitError, however it hangs:
// silent after the TCP handshake, silent in the TLS handshake, or sending its status line a
// byte at a time.
func TestDownloadHungServer(t *testing.T) {
	cases := map[string]struct {
		scheme string
		serve  func(c net.Conn)
	}{
		"silent after accepting":      {scheme: "http"},
		"silent in the TLS handshake": {scheme: "https"},
		"status line a byte every 200 ms": {scheme: "http", serve: func(c net.Conn) {
			for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			port := hungServer(t, tc.serve)
			p := v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{CIDR: "127.0.0.1/32", Ports: []int32{port}}}}
			c := New(downloadsFor(t, p, func(d *Downloads) { d.Limits.HeaderTimeout = time.Second }))
			start := time.Now()
			_, err := fetch(c, tc.scheme+"://127.0.0.1:"+strconv.Itoa(int(port))+"/img")
			took := time.Since(start)
			var le *LimitError
			if !errorsAs(err, &le) || le.Limit != LimitHeaders {
				t.Fatalf("fetch() error = %v, want a *LimitError of headerTimeoutSeconds", err)
			}
			if IsTerminal(err) {
				t.Errorf("IsTerminal(%v) = true, want a retryable error", err)
			}
			if took < 900*time.Millisecond || took > 3*time.Second {
				t.Errorf("fetch() took %v, want about the header timeout (1 s)", took)
			}
		})
	}
}
