// Package sourcepolicy decides whether a BaseImage may download from a destination: the
// imageSources policy of a ProviderConfig or ClusterProviderConfig applied to a URL, the IP
// address actually dialed and its port. It does no I/O; internal/imagecache calls it for the
// request URL, for every redirect, and for every address a host name resolves to, right
// before connecting.
//
// The order, as documented on v1alpha1.ImageSourcePolicy:
//
//  1. A matching deny rule refuses.
//  2. A matching allow rule admits, except that only an allow rule whose cidr names a
//     loopback, link-local, unspecified or multicast address (lies inside that built-in
//     range) lifts the built-in denial, and for the addresses it names only. An allow rule
//     that matches by host or urlPrefix alone does not: a name that resolves to 127.0.0.1
//     or 169.254.169.254 stays refused.
//  3. The built-in denial refuses loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16
//     with the cloud metadata address 169.254.169.254, fe80::/10), unspecified (0.0.0.0, ::)
//     and multicast (224.0.0.0/4, ff00::/8) addresses.
//  4. When allow rules exist, what none of them matches is refused.
//
// IPv4-mapped IPv6 addresses (::ffff:127.0.0.1) are treated as the IPv4 address they map.
package sourcepolicy

import (
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// Defaults of the limits, as the CRD defaults them. They apply to objects stored before the
// fields existed, whose zero values admission never defaulted.
const (
	DefaultMaxImageSizeMiB      = 20480
	DefaultHeaderTimeoutSeconds = 30
	DefaultStallTimeoutSeconds  = 60
)

// Rule names in decisions.
const (
	// NotAllowed is the rule of a destination refused because allow rules exist and none
	// matched it.
	NotAllowed = "not matched by any allow rule"
	// BuiltIn starts the rule of a destination refused by the built-in denial.
	BuiltIn = "built-in: "
)

const (
	errCIDR      = "%s: cidr %q is not an IP prefix such as 10.0.0.0/8"
	errURLPrefix = "%s: urlPrefix %q is not an http or https URL"
	errEmpty     = "%s: a rule sets at least one of cidr, host or urlPrefix"
	errPort      = "%s: port %d is not between 1 and 65535"
)

// builtins are the ranges refused unless an allow rule names an address in them.
var builtins = []struct {
	what   string
	prefix netip.Prefix
}{
	{"loopback", netip.MustParsePrefix("127.0.0.0/8")},
	{"loopback", netip.MustParsePrefix("::1/128")},
	{"link-local", netip.MustParsePrefix("169.254.0.0/16")},
	{"link-local", netip.MustParsePrefix("fe80::/10")},
	{"unspecified", netip.MustParsePrefix("0.0.0.0/32")},
	{"unspecified", netip.MustParsePrefix("::/128")},
	{"multicast", netip.MustParsePrefix("224.0.0.0/4")},
	{"multicast", netip.MustParsePrefix("ff00::/8")},
}

// metadataAddr is the cloud metadata service of most clouds, inside 169.254.0.0/16.
var metadataAddr = netip.MustParseAddr("169.254.169.254")

// A Target is one destination of a download.
type Target struct {
	// URL requested (the original URL or a redirect's).
	URL *url.URL
	// IP is the address about to be dialed. The zero Addr means not known yet: a check of the
	// URL alone before DNS resolution, which refuses only what every address would be
	// refused for (an IP literal host counts as known).
	IP netip.Addr
	// Port about to be dialed; 0 means the URL's port, or its scheme's default.
	Port int
}

// A Decision is the outcome of a Check.
type Decision struct {
	// Allowed is true when the download may go on.
	Allowed bool
	// Rule names what decided, e.g. "deny[2] (cidr 10.0.0.0/8)", "allow[0] (host
	// mirror.example.org)", "built-in: loopback 127.0.0.0/8" or NotAllowed. It is empty
	// when nothing refused a destination and no allow rules exist.
	Rule string
}

// Policy is a compiled ImageSourcePolicy. The nil *Policy is the policy without rules: only
// the built-in denial applies.
type Policy struct {
	allow, deny []rule
}

type rule struct {
	name string // "allow[0] (cidr 127.0.0.1/32, ports 8080)"

	prefix    netip.Prefix // valid when cidr is set
	host      string       // lower case, without "*."
	wildcard  bool         // host matches subdomains only
	ports     []int
	urlPrefix *prefixURL
}

// prefixURL is a urlPrefix split into what is compared.
type prefixURL struct {
	scheme, host string
	port         int
	// rest is the decoded path, plus "?" and the query when the prefix has one.
	rest     string
	hasQuery bool
}

// New compiles p. It fails on a rule that admission should have refused, naming it.
func New(p v1alpha1.ImageSourcePolicy) (*Policy, error) {
	pol := &Policy{}
	for i, r := range p.Allow {
		cr, err := compile(fmt.Sprintf("allow[%d]", i), r)
		if err != nil {
			return nil, err
		}
		pol.allow = append(pol.allow, cr)
	}
	for i, r := range p.Deny {
		cr, err := compile(fmt.Sprintf("deny[%d]", i), r)
		if err != nil {
			return nil, err
		}
		pol.deny = append(pol.deny, cr)
	}
	return pol, nil
}

func compile(name string, r v1alpha1.ImageSourceRule) (rule, error) { //nolint:gocyclo // one check per field of a rule, in the order of the API type
	var (
		cr    rule
		parts []string
	)
	if r.CIDR == "" && r.Host == "" && r.URLPrefix == "" {
		return cr, errors.Errorf(errEmpty, name)
	}
	if r.CIDR != "" {
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil {
			return cr, errors.Errorf(errCIDR, name, r.CIDR)
		}
		cr.prefix = unmapPrefix(p.Masked())
		parts = append(parts, "cidr "+r.CIDR)
	}
	if r.Host != "" {
		h := strings.TrimSuffix(strings.ToLower(r.Host), ".")
		cr.host, cr.wildcard = strings.CutPrefix(h, "*.")
		parts = append(parts, "host "+r.Host)
	}
	if len(r.Ports) > 0 {
		ps := make([]string, 0, len(r.Ports))
		for _, p := range r.Ports {
			if p < 1 || p > 65535 {
				return cr, errors.Errorf(errPort, name, p)
			}
			cr.ports = append(cr.ports, int(p))
			ps = append(ps, strconv.Itoa(int(p)))
		}
		parts = append(parts, "ports "+strings.Join(ps, ","))
	}
	if r.URLPrefix != "" {
		u, err := url.Parse(r.URLPrefix)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return cr, errors.Errorf(errURLPrefix, name, r.URLPrefix)
		}
		pu := &prefixURL{scheme: strings.ToLower(u.Scheme), host: hostOf(u), port: portOf(u), rest: u.Path}
		if pu.rest == "" {
			pu.rest = "/"
		}
		if u.RawQuery != "" || u.ForceQuery {
			pu.rest, pu.hasQuery = pu.rest+"?"+u.RawQuery, true
		}
		cr.urlPrefix = pu
		parts = append(parts, "urlPrefix "+r.URLPrefix)
	}
	cr.name = name + " (" + strings.Join(parts, ", ") + ")"
	return cr, nil
}

// unmapPrefix turns an IPv4-mapped IPv6 prefix such as ::ffff:10.0.0.0/104 into 10.0.0.0/8.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// hostOf is the URL's host name as compared: lower case, without a trailing dot or brackets.
func hostOf(u *url.URL) string {
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
}

// portOf is the URL's port, or its scheme's default; 0 when neither is known.
func portOf(u *url.URL) int {
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0
		}
		return n
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// cleanPath is the URL's decoded path with dot segments resolved, as a server would see it, so
// that /images/../private does not match a prefix /images/. A trailing slash is kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// match is the outcome of matching one rule.
type match int

const (
	no match = iota
	yes
	unknown // every field known matches, but the rule's cidr needs the IP, not known yet
)

// dest is a Target with its parts normalized once.
type dest struct {
	u    *url.URL
	host string
	ip   netip.Addr // unmapped, no zone; invalid when unknown
	port int
	path string // cleanPath, plus "?" and the raw query when there is one
	bare string // cleanPath alone
}

func (r *rule) match(d *dest) match { //nolint:gocyclo // every field of a rule must match; one test per field
	if r.host != "" {
		switch {
		case r.wildcard && !strings.HasSuffix(d.host, "."+r.host):
			return no
		case !r.wildcard && d.host != r.host:
			return no
		}
	}
	if len(r.ports) > 0 && !slices.Contains(r.ports, d.port) {
		return no
	}
	if p := r.urlPrefix; p != nil {
		if d.u == nil || !strings.EqualFold(d.u.Scheme, p.scheme) || d.host != p.host || portOf(d.u) != p.port {
			return no
		}
		rest := d.bare
		if p.hasQuery {
			rest = d.path
		}
		if !strings.HasPrefix(rest, p.rest) {
			return no
		}
	}
	if r.prefix.IsValid() {
		if !d.ip.IsValid() {
			return unknown
		}
		if !r.prefix.Contains(d.ip) {
			return no
		}
	}
	return yes
}

// lifts is true when r names ip inside the built-in range b: its cidr contains ip and lies
// inside b, so cidr 127.0.0.1/32 lifts the denial of 127.0.0.1 while 0.0.0.0/0 lifts nothing.
func (r *rule) lifts(ip netip.Addr, b netip.Prefix) bool {
	return r.prefix.IsValid() && r.prefix.Contains(ip) && r.prefix.Bits() >= b.Bits() && b.Contains(r.prefix.Addr())
}

// Check decides whether the download may go to t.
func (p *Policy) Check(t Target) Decision { //nolint:gocyclo // the precedence of the policy (deny, allow, built-in, allow-list) read top to bottom, as its doc comment states it
	d := &dest{u: t.URL, ip: t.IP, port: t.Port}
	if t.URL != nil {
		d.host = hostOf(t.URL)
		d.bare = cleanPath(t.URL.Path)
		d.path = d.bare
		if t.URL.RawQuery != "" || t.URL.ForceQuery {
			d.path += "?" + t.URL.RawQuery
		}
		if !d.ip.IsValid() {
			if a, err := netip.ParseAddr(t.URL.Hostname()); err == nil {
				d.ip = a
			}
		}
		if d.port == 0 {
			d.port = portOf(t.URL)
		}
	}
	if d.ip.IsValid() {
		d.ip = d.ip.Unmap().WithZone("")
	}
	if p == nil {
		p = &Policy{}
	}

	for i := range p.deny {
		if p.deny[i].match(d) == yes {
			return Decision{Rule: p.deny[i].name}
		}
	}
	var matched []*rule
	possible := false
	for i := range p.allow {
		switch p.allow[i].match(d) {
		case yes:
			matched = append(matched, &p.allow[i])
		case unknown:
			possible = true
		case no:
		}
	}
	if d.ip.IsValid() {
		for _, b := range builtins {
			if !b.prefix.Contains(d.ip) {
				continue
			}
			for _, r := range matched {
				if r.lifts(d.ip, b.prefix) {
					return Decision{Allowed: true, Rule: r.name}
				}
			}
			why := BuiltIn + b.what + " " + b.prefix.String()
			if b.prefix.Bits() == b.prefix.Addr().BitLen() {
				why = BuiltIn + b.what + " " + b.prefix.Addr().String()
			}
			if d.ip == metadataAddr {
				why += " (the cloud metadata address)"
			}
			if len(matched) > 0 {
				why += "; " + matched[0].name + " matches but only an allow rule whose cidr names this address lifts the built-in denial"
			}
			return Decision{Rule: why}
		}
	}
	switch {
	case len(matched) > 0:
		return Decision{Allowed: true, Rule: matched[0].name}
	case len(p.allow) == 0, possible:
		return Decision{Allowed: true}
	default:
		return Decision{Rule: NotAllowed}
	}
}

// Limits bound one download.
type Limits struct {
	// MaxBytes is the largest image accepted, counted on the stream.
	MaxBytes int64
	// HeaderTimeout bounds the wait for response headers, connecting included.
	HeaderTimeout time.Duration
	// StallTimeout bounds how long the download may receive no byte.
	StallTimeout time.Duration
}

// LimitsOf returns the limits of p, with the CRD's defaults for fields that are zero.
func LimitsOf(p v1alpha1.ImageSourcePolicy) Limits {
	l := Limits{
		MaxBytes:      p.MaxImageSizeMiB << 20,
		HeaderTimeout: time.Duration(p.HeaderTimeoutSeconds) * time.Second,
		StallTimeout:  time.Duration(p.StallTimeoutSeconds) * time.Second,
	}
	return l.WithDefaults()
}

// WithDefaults returns l with the CRD's defaults for fields that are zero or negative.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxImageSizeMiB << 20
	}
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = DefaultHeaderTimeoutSeconds * time.Second
	}
	if l.StallTimeout <= 0 {
		l.StallTimeout = DefaultStallTimeoutSeconds * time.Second
	}
	return l
}
