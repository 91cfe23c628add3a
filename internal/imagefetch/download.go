package imagefetch

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// Download parameters that the policy does not set.
const (
	maxRedirects     = 10
	maxHeaderBytes   = 1 << 20
	tcpKeepAlive     = 30 * time.Second
	ruleHTTPSToHTTP  = "a redirect from https to http"
	ruleTooMany      = "more than 10 redirects"
	errNoURL         = "internal error: dialing %s without a request URL"
	errResolve       = "cannot resolve %s"
	errPort          = "invalid port in %s"
	errNoAddress     = "%s has no address to dial"
	errScheme        = "scheme %q is not http or https"
	headerTimeoutMsg = "timeout awaiting response headers" // net/http's ResponseHeaderTimeout error
	tlsTimeoutMsg    = "TLS handshake timeout"             // net/http's TLSHandshakeTimeout error
)

// A Resolver resolves host names to addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Downloads says what a Cache may download and how much: the imageSources policy and limits
// of the (Cluster)ProviderConfig of the host.
type Downloads struct {
	// Config names the config in messages, e.g. "ClusterProviderConfig/default".
	Config string
	// Policy decides which URLs and addresses may be downloaded from; nil applies the
	// built-in denial only.
	Policy *sourcepolicy.Policy
	// Limits bound each download; zero fields take the CRD's defaults.
	Limits sourcepolicy.Limits
	// Resolver resolves host names; nil is net.DefaultResolver. Tests point names at
	// loopback with it.
	Resolver Resolver
}

func (d Downloads) withDefaults() Downloads {
	d.Limits = d.Limits.WithDefaults()
	if d.Resolver == nil {
		d.Resolver = net.DefaultResolver
	}
	return d
}

// guard enforces Downloads on an http.Client: it checks every request URL and redirect, and
// every address right before dialing it, and bounds the wait for response headers.
type guard struct {
	d  Downloads
	rt http.RoundTripper
}

// newHTTPClient returns the client of d. It uses no proxy (a proxy would hide the real
// destination from the checks), no connection reuse (every request, redirects included, dials
// and is checked anew) and no transparent decompression (the digest and the size limit are of
// the bytes the server sends).
func newHTTPClient(d Downloads) *http.Client {
	g := &guard{d: d}
	g.rt = &http.Transport{
		Proxy:                  nil,
		DialContext:            g.dial,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		TLSHandshakeTimeout:    d.Limits.HeaderTimeout,
		ResponseHeaderTimeout:  d.Limits.HeaderTimeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	return &http.Client{Transport: g, CheckRedirect: g.checkRedirect}
}

// refused is the error of a destination the policy refuses.
func (g *guard) refused(u *url.URL, addr, rule, from string) *RefusedError {
	return &RefusedError{URL: Redacted(u), Addr: addr, Config: g.d.Config, Rule: rule, RedirectFrom: from}
}

// checkRedirect refuses a redirect from https to http, more than maxRedirects, and a target
// the policy refuses by its URL alone (before its host is even resolved).
func (g *guard) checkRedirect(req *http.Request, via []*http.Request) error {
	from := via[len(via)-1].URL
	switch {
	case len(via) >= maxRedirects:
		return g.refused(req.URL, "", ruleTooMany, Redacted(from))
	case strings.EqualFold(from.Scheme, "https") && !strings.EqualFold(req.URL.Scheme, "https"):
		return g.refused(req.URL, "", ruleHTTPSToHTTP, Redacted(from))
	}
	if dec := g.d.Policy.Check(sourcepolicy.Target{URL: req.URL}); !dec.Allowed {
		return g.refused(req.URL, "", dec.Rule, Redacted(from))
	}
	return nil
}

// requestURL carries the URL of a request to the dial of its connection.
type requestURL struct{}

// errHeaderTimeout is the cause of a request cancelled for want of response headers.
var errHeaderTimeout = errors.New("no response headers in time")

// RoundTrip checks req's URL, hands it on to the transport with its URL for the dial, and
// fails it with a *LimitError when no response headers arrive within the header timeout
// (connecting included).
func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if s := strings.ToLower(req.URL.Scheme); s != "http" && s != "https" {
		return nil, g.refused(req.URL, "", errors.Errorf(errScheme, req.URL.Scheme).Error(), "")
	}
	if dec := g.d.Policy.Check(sourcepolicy.Target{URL: req.URL}); !dec.Allowed {
		return nil, g.refused(req.URL, "", dec.Rule, "")
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(req.Context(), requestURL{}, req.URL))
	timer := time.AfterFunc(g.d.Limits.HeaderTimeout, func() { cancel(errHeaderTimeout) })
	resp, err := g.rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() && err == nil {
		// The timer fired as the headers came: the body's context is cancelled already.
		_ = resp.Body.Close()
		err = errHeaderTimeout
	}
	if err != nil {
		cause := context.Cause(ctx)
		cancel(nil)
		// The transport's own timeouts (same duration as the timer) may fire first.
		if errors.Is(cause, errHeaderTimeout) || strings.Contains(err.Error(), headerTimeoutMsg) || strings.Contains(err.Error(), tlsTimeoutMsg) {
			return nil, &LimitError{URL: Redacted(req.URL), Config: g.d.Config, Limit: LimitHeaders, Timeout: g.d.Limits.HeaderTimeout}
		}
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

// cancelOnClose releases a request's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
	once   sync.Once
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.cancel)
	return err
}

// dial resolves addr's host itself and dials only the addresses the policy allows for the
// request's URL, one after the other; the address actually connected is checked once more
// by the dialer's Control, so no resolution can slip past the check.
func (g *guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	u, _ := ctx.Value(requestURL{}).(*url.URL)
	if u == nil {
		return nil, errors.Errorf(errNoURL, addr)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, errors.Wrapf(err, errPort, addr)
	}
	var ips []netip.Addr
	if ip, perr := netip.ParseAddr(host); perr == nil {
		ips = []netip.Addr{ip}
	} else {
		lookup := "ip"
		switch network {
		case "tcp4":
			lookup = "ip4"
		case "tcp6":
			lookup = "ip6"
		}
		if ips, err = g.d.Resolver.LookupNetIP(ctx, lookup, host); err != nil {
			return nil, errors.Wrapf(err, errResolve, host)
		}
	}
	var (
		refused *RefusedError
		lastErr error
	)
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip.Unmap(), uint16(port))
		if dec := g.d.Policy.Check(sourcepolicy.Target{URL: u, IP: ip, Port: port}); !dec.Allowed {
			if refused == nil {
				refused = g.refused(u, ap.String(), dec.Rule, "")
				refused.Host = hostIfName(host)
			}
			continue
		}
		d := &net.Dialer{Timeout: g.d.Limits.HeaderTimeout, KeepAlive: tcpKeepAlive, Control: g.control(u)}
		c, err := d.DialContext(ctx, network, ap.String())
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	switch {
	case lastErr != nil:
		return nil, lastErr
	case refused != nil:
		return nil, refused
	default:
		return nil, errors.Errorf(errNoAddress, host)
	}
}

// control checks the address the socket is about to connect to.
func (g *guard) control(u *url.URL) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return g.refused(u, address, "the address dialed is not an IP address and port", "")
		}
		if dec := g.d.Policy.Check(sourcepolicy.Target{URL: u, IP: ap.Addr(), Port: int(ap.Port())}); !dec.Allowed {
			return g.refused(u, address, dec.Rule, "")
		}
		return nil
	}
}

// hostIfName is host when it is a name, "" for an IP literal.
func hostIfName(host string) string {
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	return host
}
