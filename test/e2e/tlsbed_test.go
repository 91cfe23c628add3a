//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPKI: each HTTPS image server's certificate verifies for the node's address against its
// own CA and against no other, as a client (the provider) that trusts only one of them sees it.
func TestPKI(t *testing.T) {
	dir := t.TempDir()
	if err := writePKI(dir, net.ParseIP("127.0.0.1"), time.Now()); err != nil {
		t.Fatal(err)
	}
	servers := map[string]*httptest.Server{}
	for _, name := range []string{tlsTrusted, tlsUntrusted} {
		cfg, err := serverTLS(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		s.TLS = cfg
		s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
		s.StartTLS()
		t.Cleanup(s.Close)
		servers[name] = s
	}
	cases := map[string]struct {
		trust, server string
		want          string
	}{
		"trusted CA, its server":     {trust: tlsTrusted, server: tlsTrusted, want: "204"},
		"trusted CA, other server":   {trust: tlsTrusted, server: tlsUntrusted, want: "unknown authority"},
		"untrusted CA, its server":   {trust: tlsUntrusted, server: tlsUntrusted, want: "204"},
		"untrusted CA, other server": {trust: tlsUntrusted, server: tlsTrusted, want: "unknown authority"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pool, err := caPool(dir, tc.trust)
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
			got := ""
			resp, err := c.Get(servers[tc.server].URL)
			var ua x509.UnknownAuthorityError
			switch {
			case errors.As(err, &ua):
				got = "unknown authority"
			case err != nil:
				got = err.Error()
			default:
				_ = resp.Body.Close()
				got = http.StatusText(resp.StatusCode)
				if resp.StatusCode == http.StatusNoContent {
					got = "204"
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GET through a client trusting the %s CA: -want +got:\n%s", tc.trust, diff)
			}
		})
	}
	if err := writePKI(dir, nil, time.Now()); err == nil {
		t.Error("writePKI without an IP address: no error")
	}
}
