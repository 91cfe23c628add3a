package imagefetch

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// FormatError says the image bytes do not match the declared format, or are
// a kind of image that cannot be a base. It is terminal.
type FormatError struct {
	URL    string
	Reason string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("the image at %s cannot be used: %s; nothing was published", e.URL, e.Reason)
}

// IsFormatError is true when err is a *FormatError.
func IsFormatError(err error) bool {
	var e *FormatError
	return errors.As(err, &e)
}

// HTTPStatusError says the image server answered with an error status.
type HTTPStatusError struct {
	URL        string
	StatusCode int
	Status     string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("cannot download the image: GET %s answered %s", e.URL, e.Status)
}

// RefusedError says the imageSources policy of the host's config refuses a download: its URL,
// a redirect, or the address its host name resolved to. It is terminal for that source and
// policy: nothing was downloaded.
type RefusedError struct {
	// URL refused, without its password.
	URL string
	// Addr is the address that was about to be dialed, when the refusal is about it.
	Addr string
	// Host is the host name that resolved to Addr, when the URL names one.
	Host string
	// RedirectFrom is the URL that redirected to URL, for a refused redirect.
	RedirectFrom string
	// Config names the config whose policy refused, e.g. ClusterProviderConfig/default.
	Config string
	// Rule names what refused, e.g. "deny[2] (cidr 10.0.0.0/8)" or "built-in: loopback
	// 127.0.0.0/8" (see internal/sourcepolicy).
	Rule string
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString("the image source policy (imageSources")
	if e.Config != "" {
		b.WriteString(" of " + e.Config)
	}
	b.WriteString(") refused ")
	if e.RedirectFrom != "" {
		b.WriteString("the redirect from " + e.RedirectFrom + " to ")
	}
	b.WriteString(e.URL)
	switch {
	case e.Host != "" && e.Addr != "":
		b.WriteString(" (" + e.Host + " resolves to " + e.Addr + ")")
	case e.Addr != "":
		b.WriteString(" (address " + e.Addr + ")")
	}
	b.WriteString(": " + e.Rule + "; nothing was downloaded")
	if h := e.hint(); h != "" {
		b.WriteString(". " + h)
	}
	return b.String()
}

// hint says how to allow what was refused, when allowing it is a matter of policy.
func (e *RefusedError) hint() string {
	switch {
	case strings.HasPrefix(e.Rule, sourcepolicy.PlatformRule):
		return "A namespaced ProviderConfig cannot allow it: its imageSources only narrow the platform's policy (the provider's " + sourcepolicy.FlagNamespaced + "); ask the platform team, or use a ClusterProviderConfig that allows it"
	case strings.HasPrefix(e.Rule, sourcepolicy.BuiltIn):
		ap, err := netip.ParseAddrPort(e.Addr)
		if err != nil {
			ap, err = literalAddrPort(e.URL)
		}
		if err != nil {
			return "To allow a server at such an address, add an imageSources.allow rule whose cidr names exactly that address and whose ports name its port"
		}
		return fmt.Sprintf("To allow exactly this server, add {cidr: %s, ports: [%d]} to imageSources.allow", netip.PrefixFrom(ap.Addr(), ap.Addr().BitLen()), ap.Port())
	case e.Rule == sourcepolicy.NotAllowed:
		return "Add an imageSources.allow rule (urlPrefix, host or cidr) that matches it, or use an allowed mirror"
	case e.Rule == ruleHTTPSToHTTP:
		return "Point source.url at an https URL that does not redirect to http"
	}
	return ""
}

// literalAddrPort is the address and port of a URL whose host is an IP literal.
func literalAddrPort(raw string) (netip.AddrPort, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return netip.AddrPort{}, err
	}
	port := 80
	switch {
	case u.Port() != "":
		if port, err = strconv.Atoi(u.Port()); err != nil {
			return netip.AddrPort{}, err
		}
	case u.Scheme == "https":
		port = 443
	}
	return netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(port)), nil
}

// IsRefused is true when err is a *RefusedError.
func IsRefused(err error) bool {
	var e *RefusedError
	return errors.As(err, &e)
}

// A Limit is a bound of imageSources, named as its field.
type Limit string

// Limits.
const (
	LimitSize    Limit = "maxImageSizeMiB"
	LimitHeaders Limit = "headerTimeoutSeconds"
	LimitStall   Limit = "stallTimeoutSeconds"
	// LimitVirtualSize is the config's limits.maxVirtualSizeGiB: the disk size a qcow2 header
	// may give.
	LimitVirtualSize Limit = "maxVirtualSizeGiB"
)

// LimitError says a download hit a bound of imageSources. A size over the limit is terminal
// for that source and policy; a timeout is worth retrying later.
type LimitError struct {
	// URL downloaded, without its password.
	URL string
	// Config names the config whose limit was hit, e.g. ClusterProviderConfig/default.
	Config string
	Limit  Limit
	// Timeout is the value of a time limit.
	Timeout time.Duration
	// MaxBytes is the size limit; Announced the Content-Length over it, 0 when the bytes
	// that arrived went over it. For LimitVirtualSize: the limit and the header's virtual
	// size, in bytes.
	MaxBytes, Announced int64
}

func (e *LimitError) Error() string {
	of := ""
	if e.Config != "" {
		of = " of " + e.Config
	}
	switch e.Limit {
	case LimitSize:
		what := fmt.Sprintf("more than %d bytes arrived", e.MaxBytes)
		if e.Announced > 0 {
			what = fmt.Sprintf("the server announced %d bytes", e.Announced)
		}
		return fmt.Sprintf("the image at %s exceeds maxImageSizeMiB %s%s: %s; nothing was published. Raise imageSources.maxImageSizeMiB if an image this large is expected",
			e.URL, mib(e.MaxBytes), of, what)
	case LimitVirtualSize:
		return fmt.Sprintf("the image at %s has a virtual size of %d GiB (its qcow2 header), over limits.maxVirtualSizeGiB %d%s; nothing was published. Use a smaller image, or ask the platform team to raise the limit",
			e.URL, (e.Announced+(1<<30)-1)>>30, e.MaxBytes>>30, of)
	case LimitHeaders:
		return fmt.Sprintf("cannot download the image from %s: no response headers within %s (imageSources.headerTimeoutSeconds%s); nothing was published", e.URL, seconds(e.Timeout), of)
	default:
		return fmt.Sprintf("cannot download the image from %s: download stalled: no data for %s (imageSources.stallTimeoutSeconds%s); nothing was published", e.URL, seconds(e.Timeout), of)
	}
}

// mib formats a byte count in MiB, as maxImageSizeMiB is set.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10)
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64)
}

// seconds formats a timeout as the API sets it: "30 s".
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + " s"
	}
	return d.String()
}

// IsLimit is true when err is a *LimitError.
func IsLimit(err error) bool {
	var e *LimitError
	return errors.As(err, &e)
}

// IsTerminal is true for download errors that retrying with the same source (and the same
// policy) cannot fix: an unusable format, a destination the policy refuses, an image over the
// size limit, or an HTTP 4xx other than 408 and 429.
func IsTerminal(err error) bool {
	if IsFormatError(err) || IsRefused(err) {
		return true
	}
	var l *LimitError
	if errors.As(err, &l) {
		return l.Limit == LimitSize || l.Limit == LimitVirtualSize
	}
	var h *HTTPStatusError
	if errors.As(err, &h) {
		return h.StatusCode >= 400 && h.StatusCode < 500 && h.StatusCode != 408 && h.StatusCode != 429
	}
	return false
}
