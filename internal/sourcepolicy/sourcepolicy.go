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
//
// # Namespaced ProviderConfigs
//
// A namespaced ProviderConfig is a team's own, so its imageSources can only narrow what the
// platform allows (Platform, from the provider's flags): Namespaced compiles the platform's
// policy for namespaced configs with more built-in ranges (RFC 1918, CGNAT 100.64.0.0/10, IPv6
// ULA fc00::/7, NAT64 64:ff9b::/96 and 64:ff9b:1::/48) and the team's policy under it. A
// download must pass both: first the platform's (its allow rules may lift the denial of those
// private ranges, for the addresses they name; loopback and link-local stay refused for every
// namespaced config), then the team's deny and allow rules, which never lift anything.
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
	// PlatformRule starts the rule of a destination that the platform's policy for namespaced
	// ProviderConfigs refuses: a namespaced config cannot allow it.
	PlatformRule = "the platform's policy for namespaced ProviderConfigs: "
)

const (
	errCIDR      = "%s: cidr %q is not an IP prefix such as 10.0.0.0/8"
	errURLPrefix = "%s: urlPrefix %q is not an http or https URL"
	errEmpty     = "%s: a rule sets at least one of cidr, host or urlPrefix"
	errPort      = "%s: port %d is not between 1 and 65535"
)

// A builtin is a range refused unless an allow rule names an address in it.
type builtin struct {
	what   string
	prefix netip.Prefix
	// fixed: no allow rule lifts it (loopback and link-local for namespaced configs).
	fixed bool
}

// builtins are the ranges refused for every config unless an allow rule names an address in
// them.
var builtins = []builtin{
	{what: "loopback", prefix: netip.MustParsePrefix("127.0.0.0/8")},
	{what: "loopback", prefix: netip.MustParsePrefix("::1/128")},
	{what: "link-local", prefix: netip.MustParsePrefix("169.254.0.0/16")},
	{what: "link-local", prefix: netip.MustParsePrefix("fe80::/10")},
	{what: "unspecified", prefix: netip.MustParsePrefix("0.0.0.0/32")},
	{what: "unspecified", prefix: netip.MustParsePrefix("::/128")},
	{what: "multicast", prefix: netip.MustParsePrefix("224.0.0.0/4")},
	{what: "multicast", prefix: netip.MustParsePrefix("ff00::/8")},
}

// namespacedBuiltins are the ranges refused for namespaced ProviderConfigs: the built-ins,
// loopback and link-local fixed (the download runs in the provider's pod: its loopback, the
// node's metadata service), and the private ranges, which only the platform's policy lifts.
var namespacedBuiltins = func() []builtin {
	bs := make([]builtin, 0, len(builtins)+7)
	for _, b := range builtins {
		b.fixed = b.what == "loopback" || b.what == "link-local"
		bs = append(bs, b)
	}
	return append(bs,
		builtin{what: "private (RFC 1918)", prefix: netip.MustParsePrefix("10.0.0.0/8")},
		builtin{what: "private (RFC 1918)", prefix: netip.MustParsePrefix("172.16.0.0/12")},
		builtin{what: "private (RFC 1918)", prefix: netip.MustParsePrefix("192.168.0.0/16")},
		builtin{what: "shared address space (CGNAT)", prefix: netip.MustParsePrefix("100.64.0.0/10")},
		builtin{what: "unique local (IPv6 ULA)", prefix: netip.MustParsePrefix("fc00::/7")},
		builtin{what: "NAT64", prefix: netip.MustParsePrefix("64:ff9b::/96")},
		builtin{what: "NAT64 (local use)", prefix: netip.MustParsePrefix("64:ff9b:1::/48")},
	)
}()

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
	// builtins refused; nil means the package's builtins (see New). A policy under a platform
	// policy has none of its own: the platform's decide.
	builtins []builtin
	// platform, when set, decides first (Namespaced); this policy only narrows it.
	platform *Policy
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
	return compilePolicy(p, builtins)
}

// Namespaced compiles the policy of a namespaced ProviderConfig (own) under the platform's
// policy for namespaced configs (platform, see Platform): a destination must pass the
// platform's policy, with the namespaced built-in ranges, then own's deny and allow rules.
// Own's allow rules lift no built-in denial.
func Namespaced(platform, own v1alpha1.ImageSourcePolicy) (*Policy, error) {
	pp, err := compilePolicy(platform, namespacedBuiltins)
	if err != nil {
		return nil, errors.Wrap(err, "the platform's policy for namespaced ProviderConfigs")
	}
	op, err := compilePolicy(own, []builtin{})
	if err != nil {
		return nil, err
	}
	op.platform = pp
	return op, nil
}

func compilePolicy(p v1alpha1.ImageSourcePolicy, bs []builtin) (*Policy, error) {
	pol := &Policy{builtins: bs}
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
func (p *Policy) Check(t Target) Decision {
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
	if p.platform != nil {
		if dec := p.platform.decide(d); !dec.Allowed {
			dec.Rule = PlatformRule + dec.Rule
			return dec
		}
	}
	return p.decide(d)
}

// decide applies p's own rules and built-ins to d (Check's order).
func (p *Policy) decide(d *dest) Decision { //nolint:gocyclo // the precedence of the policy (deny, allow, built-in, allow-list) read top to bottom, as its doc comment states it
	bs := p.builtins
	if bs == nil {
		bs = builtins
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
		for _, b := range bs {
			if !b.prefix.Contains(d.ip) {
				continue
			}
			for _, r := range matched {
				if !b.fixed && r.lifts(d.ip, b.prefix) {
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
			switch {
			case b.fixed:
				why += ", which no rule lifts for a namespaced ProviderConfig"
			case len(matched) > 0:
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
	// MaxVirtualBytes bounds the virtual size a qcow2 image's header may give (0: no limit);
	// it comes from the config's limits.maxVirtualSizeGiB, not from imageSources.
	MaxVirtualBytes int64
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

// Platform is what the platform team sets for every host config, with the provider's flags
// (cmd/provider): a namespaced ProviderConfig belongs to a team, so it cannot widen them.
type Platform struct {
	// Namespaced is the policy under which every namespaced ProviderConfig's imageSources
	// apply (see Namespaced). Its limits bound theirs. The zero value allows what the
	// namespaced built-in denial does not refuse.
	Namespaced v1alpha1.ImageSourcePolicy
	// RequireSHA256 refuses every BaseImage that does not pin source.sha256.
	RequireSHA256 bool
}

// Flag names of the platform's knobs, as rules name them.
const (
	FlagNamespaced    = "--namespaced-image-sources"
	FlagRequireSHA256 = "--require-image-sha256"
)

// Compile returns the policy and limits under which BaseImages of a config download: a
// ClusterProviderConfig's own imageSources; a namespaced ProviderConfig's under
// pl.Namespaced, each limit the smaller of the two.
func (pl Platform) Compile(own v1alpha1.ImageSourcePolicy, namespaced bool) (*Policy, Limits, error) {
	if !namespaced {
		p, err := New(own)
		return p, LimitsOf(own), err
	}
	p, err := Namespaced(pl.Namespaced, own)
	if err != nil {
		return nil, Limits{}, err
	}
	a, b := LimitsOf(own), LimitsOf(pl.Namespaced)
	return p, Limits{
		MaxBytes:      min(a.MaxBytes, b.MaxBytes),
		HeaderTimeout: min(a.HeaderTimeout, b.HeaderTimeout),
		StallTimeout:  min(a.StallTimeout, b.StallTimeout),
	}, nil
}

// SHA256Rule names the rule that requires the BaseImages of config to pin source.sha256, or
// "" when none does: the provider's flag, the platform's policy for namespaced configs, or the
// config's own imageSources.requireSHA256.
func (pl Platform) SHA256Rule(own v1alpha1.ImageSourcePolicy, namespaced bool, config string) string {
	switch {
	case pl.RequireSHA256:
		return "the provider's flag " + FlagRequireSHA256
	case namespaced && pl.Namespaced.RequireSHA256:
		return "requireSHA256 of the platform's policy for namespaced ProviderConfigs (" + FlagNamespaced + ")"
	case own.RequireSHA256:
		return "imageSources.requireSHA256 of " + config
	}
	return ""
}
