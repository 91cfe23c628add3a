// Package probe checks that a guest serves what it should. The dial function decides where
// the probe starts from: the provider dials through the host's SSH connection, so guests on a
// host-only network are reachable without any route from the cluster.
package probe

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// DialFunc opens a connection, e.g. host.Conn.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// TCP succeeds when a TCP connection to addr opens within timeout.
func TCP(ctx context.Context, dial DialFunc, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return errors.Wrapf(err, "cannot connect to %s", addr)
	}
	return c.Close()
}

// HTTPProxy sends GET url through the HTTP proxy at proxyAddr and succeeds when the answer
// has status want.
func HTTPProxy(ctx context.Context, dial DialFunc, proxyAddr, url string, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := dial(ctx, "tcp", proxyAddr)
	if err != nil {
		return errors.Wrapf(err, "cannot connect to the proxy at %s", proxyAddr)
	}
	defer c.Close() //nolint:errcheck // Only read from.
	// Closing the connection when ctx ends is what bounds the exchange: a connection tunnelled
	// through SSH has no deadlines, and a guest destroyed mid-probe never answers or resets.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return errors.Wrapf(err, "invalid probe URL %q", url)
	}
	req.Header.Set("User-Agent", "provider-kvm-probe")
	req.Close = true
	// WriteProxy writes the absolute URL in the request line, as a proxy expects.
	if err := req.WriteProxy(c); err != nil {
		return errors.Wrapf(err, "cannot send the probe request to %s", proxyAddr)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return errors.Wrapf(err, "no answer from the proxy at %s", proxyAddr)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		return errors.Errorf("GET %s through %s answered %s, want %d", url, proxyAddr, resp.Status, want)
	}
	return nil
}

// Addr joins an IP and a port.
func Addr(ip string, port int32) string { return net.JoinHostPort(ip, strconv.Itoa(int(port))) }
