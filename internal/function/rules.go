package function

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"k8s.io/apimachinery/pkg/util/validation"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// Defaults of the platform's rules (ProxyPolicy), the same as the kubebuilder defaults in
// apis/proxypolicy/v1alpha1/rules.go: a step's input is not defaulted by any API server, so
// the function applies them.
const (
	DefaultMaxVCPU        = 4
	DefaultMaxMemoryMiB   = 4096
	DefaultMaxDiskSizeGiB = 64
	DefaultMaxReplicas    = 3
)

// DefaultClientCIDRs are the networks a Proxy's allowedCIDRs must lie inside by default: the
// private networks.
var DefaultClientCIDRs = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}

// rangeClasses are the addresses squid refuses by default after resolving a request's host,
// in the order the configuration lists them.
var rangeClasses = []struct {
	class  ppv1.RangeClass
	prefix []string
	what   string // as the 403 page and the docs say it
}{
	{ppv1.RangeLoopback, []string{"127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128"}, "a loopback address"},
	{ppv1.RangeLinkLocal, []string{"169.254.0.0/16", "fe80::/10"}, "a link-local address (169.254.169.254 is the cloud metadata address)"},
	{ppv1.RangePrivate, []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}, "a private network address (RFC 1918)"},
	{ppv1.RangeCGNAT, []string{"100.64.0.0/10"}, "a shared address (RFC 6598, carrier-grade NAT)"},
	{ppv1.RangeUniqueLocal, []string{"fc00::/7"}, "an IPv6 unique-local address"},
}

// Rules are the platform's rules (a ProxyPolicy's), checked and defaulted.
type Rules struct {
	MaxVCPU, MaxMemoryMiB, MaxDiskSizeGiB int64
	MaxReplicas                           int64
	ClientCIDRs                           []netip.Prefix
	AllowSquidDirectives, AllowSSHKeys    bool
	Probe                                 *ppv1.Probe // nil: Proxies without a probe get a TCP probe
	Destinations                          Destinations
	AptSources                            string // the guest's apt sources when it installs packages; "": the image's
}

// Destinations are where a Proxy's clients may go: the squid rules the function writes.
type Destinations struct {
	Report         bool              // log would-be denials, deny nothing
	Denied         []ppv1.RangeClass // in rangeClasses' order
	Allowed        []NamedPrefix     // exceptions to Denied
	DefaultDomains []string          // allowedDomains of a Proxy that sets none
}

// NamedPrefix is a network the platform allows, with its name.
type NamedPrefix struct {
	Name   string
	Prefix netip.Prefix
}

// reDomain is squid's dstdomain grammar as the function accepts it: a lower-case DNS name,
// optionally with one leading dot (the name and every name under it). The last label starts
// with a letter, so an IP address is not a domain; an IPv4 address is accepted apart
// (reIPv4), matched as the URL writes it. The XRDs carry the same patterns.
var reDomain = regexp.MustCompile(`^\.?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// reIPv4 is an IPv4 address as a URL's host: squid's dstdomain -n matches it as written.
var reIPv4 = regexp.MustCompile(`^[0-9]{1,3}(\.[0-9]{1,3}){3}$`)

const maxDomainLen = 254

// checkDomain says what is wrong with an allowedDomains entry, or "" when it is fine.
func checkDomain(d string) string {
	switch {
	case len(d) > maxDomainLen:
		return fmt.Sprintf("must be at most %d characters", maxDomainLen)
	case strings.Contains(d, "*"):
		return fmt.Sprintf("%q has a '*': squid's dstdomain has no such wildcard; write .example.com for example.com and every name under it", d)
	case reIPv4.MatchString(d):
		if a, err := netip.ParseAddr(d); err != nil || !a.Is4() {
			return fmt.Sprintf("%q is not an IPv4 address", d)
		}
	case !reDomain.MatchString(d):
		return fmt.Sprintf("%q is not a lower-case domain name such as example.com or .example.com (the leading dot takes every name under it), nor an IPv4 address", d)
	}
	return ""
}

// reAptSource is one line of apt's one-line sources format as the policy accepts it: deb or
// deb-src, optional [options], a URI with a scheme, a suite, and any components.
var reAptSource = regexp.MustCompile(`^deb(-src)?[ \t]+(\[[^]\[]*\][ \t]+)?[a-z][a-z0-9+.-]*:[^ \t]+([ \t]+[^ \t]+)+$`)

const maxAptSourcesLen = 4096

// checkAptSources says what is wrong with the policy's apt sources, or "" when they are fine
// (or empty: the image's own sources).
func checkAptSources(s string) string {
	if len(s) > maxAptSourcesLen {
		return fmt.Sprintf("must be at most %d characters", maxAptSourcesLen)
	}
	debs := 0
	for i, l := range strings.Split(s, "\n") {
		if strings.ContainsFunc(l, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return fmt.Sprintf("line %d has a control character", i+1)
		}
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case !reAptSource.MatchString(l):
			return fmt.Sprintf("line %d %q is not an apt source such as \"deb http://mirror.example.internal/debian bookworm main\" (one-line style: deb [OPTIONS] URI SUITE [COMPONENT...])", i+1, l)
		default:
			debs++
		}
	}
	if s != "" && debs == 0 {
		return "has no deb line: leave the field out to keep the image's own sources"
	}
	return ""
}

// ResolveRules checks the platform's rules and applies their defaults. A bad policy names the
// input's field: it is the platform team's to fix, and no Proxy is composed meanwhile.
func ResolveRules(in ppv1.Rules) (Rules, error) { //nolint:gocyclo // a flat list of independent field checks
	var errs []string
	bad := func(field, format string, a ...any) {
		errs = append(errs, "function input (ProxyPolicy) "+field+": "+fmt.Sprintf(format, a...))
	}
	r := Rules{MaxVCPU: DefaultMaxVCPU, MaxMemoryMiB: DefaultMaxMemoryMiB, MaxDiskSizeGiB: DefaultMaxDiskSizeGiB, MaxReplicas: DefaultMaxReplicas,
		AllowSquidDirectives: true, AllowSSHKeys: true}
	if l := in.Limits; l != nil {
		r.MaxVCPU = intOr(l.MaxVCPU, DefaultMaxVCPU)
		r.MaxMemoryMiB = intOr(l.MaxMemoryMiB, DefaultMaxMemoryMiB)
		r.MaxDiskSizeGiB = intOr(l.MaxDiskSizeGiB, DefaultMaxDiskSizeGiB)
		r.MaxReplicas = intOr(l.MaxReplicas, DefaultMaxReplicas)
	}
	if r.MaxReplicas < 1 || r.MaxReplicas > maxReplicas {
		bad("limits.maxReplicas", "must be between 1 and %d, got %d", maxReplicas, r.MaxReplicas)
	}
	if r.MaxVCPU < 1 {
		bad("limits.maxVCPU", "must be at least 1, got %d", r.MaxVCPU)
	}
	if r.MaxMemoryMiB < minMemoryMiB {
		bad("limits.maxMemoryMiB", "must be at least %d, got %d", minMemoryMiB, r.MaxMemoryMiB)
	}
	if r.MaxDiskSizeGiB < 1 {
		bad("limits.maxDiskSizeGiB", "must be at least 1, got %d", r.MaxDiskSizeGiB)
	}
	cidrs := in.ClientCIDRs
	if cidrs == nil {
		cidrs = DefaultClientCIDRs
	}
	for i, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			bad(fmt.Sprintf("clientCIDRs[%d]", i), "%q is not a CIDR such as 10.0.0.0/8", c)
			continue
		}
		r.ClientCIDRs = append(r.ClientCIDRs, p.Masked())
	}
	if in.AllowSquidDirectives != nil {
		r.AllowSquidDirectives = *in.AllowSquidDirectives
	}
	if in.AllowSSHKeys != nil {
		r.AllowSSHKeys = *in.AllowSSHKeys
	}
	if pr := in.Probe; pr != nil {
		st := intOr(pr.ExpectedStatus, DefaultExpectedStatus)
		if len(pr.URL) > maxURLLen || !reProbeURL.MatchString(pr.URL) {
			bad("probe.url", "%q is not an http:// URL", shownURL(pr.URL))
		}
		if st < minExpectedCode || st > maxExpectedCode {
			bad("probe.expectedStatus", "must be an HTTP status between %d and %d, got %d", minExpectedCode, maxExpectedCode, st)
		}
		r.Probe = &ppv1.Probe{URL: pr.URL, ExpectedStatus: &st}
	}

	d := ppv1.Destinations{}
	if in.Destinations != nil {
		d = *in.Destinations
	}
	switch d.Mode {
	case "", ppv1.DestinationEnforce:
	case ppv1.DestinationReport:
		r.Destinations.Report = true
	default:
		bad("destinations.mode", "must be Enforce or Report, got %q", d.Mode)
	}
	denied := map[ppv1.RangeClass]bool{}
	if d.DeniedRanges == nil {
		for _, c := range rangeClasses {
			denied[c.class] = true
		}
	}
	for i, c := range d.DeniedRanges {
		known := false
		for _, k := range rangeClasses {
			known = known || k.class == c
		}
		if !known {
			bad(fmt.Sprintf("destinations.deniedRanges[%d]", i), "%q is not one of loopback, link-local, private, cgnat, unique-local", c)
		}
		denied[c] = true
	}
	for _, c := range rangeClasses {
		if denied[c.class] {
			r.Destinations.Denied = append(r.Destinations.Denied, c.class)
		}
	}
	names := map[string]bool{}
	for i, a := range d.AllowedRanges {
		field := fmt.Sprintf("destinations.allowedRanges[%d]", i)
		if !reRangeName.MatchString(a.Name) || names[a.Name] {
			bad(field+".name", "%q must be a unique lower-case name such as lab-lan", a.Name)
		}
		names[a.Name] = true
		p, err := netip.ParsePrefix(strings.TrimSpace(a.CIDR))
		if err != nil {
			bad(field+".cidr", "%q is not a CIDR such as 10.77.0.0/24", a.CIDR)
			continue
		}
		r.Destinations.Allowed = append(r.Destinations.Allowed, NamedPrefix{Name: a.Name, Prefix: p.Masked()})
	}
	for i, dom := range d.DefaultAllowedDomains {
		if m := checkDomain(dom); m != "" {
			bad(fmt.Sprintf("destinations.defaultAllowedDomains[%d]", i), "%s", m)
		}
	}
	r.Destinations.DefaultDomains = d.DefaultAllowedDomains
	checkBudgets(in.Budgets, bad)
	if pk := in.Packages; pk != nil {
		if m := checkAptSources(pk.AptSources); m != "" {
			bad("packages.aptSources", "%s", m)
		}
		r.AptSources = strings.TrimSpace(pk.AptSources)
	}

	if len(errs) > 0 {
		return Rules{}, errors.New(strings.Join(errs, "; "))
	}
	return r, nil
}

// applyRules checks the Proxy p against the platform's rules and completes it with their
// defaults. what names the Proxy in the message.
func applyRules(in ppv1.Rules, p *Proxy, what string) error {
	r, err := ResolveRules(in)
	if err != nil {
		return err
	}
	return errors.Wrapf(r.Apply(p), "%s breaks the platform's policy", what)
}

// checkBudgets reports negative budgets and namespaces listed twice or misspelt.
func checkBudgets(b *ppv1.Budgets, bad func(field, format string, a ...any)) {
	if b == nil {
		return
	}
	check := func(field string, v ppv1.Budget) {
		for _, f := range []struct {
			name string
			v    *int64
		}{{"maxVCPU", v.MaxVCPU}, {"maxMemoryMiB", v.MaxMemoryMiB}, {"maxProxies", v.MaxProxies}} {
			if f.v != nil && *f.v < 0 {
				bad(field+"."+f.name, "must not be negative, got %d", *f.v)
			}
		}
	}
	if b.Default != nil {
		check("budgets.default", *b.Default)
	}
	seen := map[string]bool{}
	for i, n := range b.Namespaces {
		field := fmt.Sprintf("budgets.namespaces[%d]", i)
		if len(validation.IsDNS1123Label(n.Namespace)) > 0 || seen[n.Namespace] {
			bad(field+".namespace", "%q must be a namespace name listed once", n.Namespace)
		}
		seen[n.Namespace] = true
		check(field, n.Budget)
	}
}

var reRangeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$`)

// Apply checks a validated Proxy against the platform's rules and completes it with the
// platform's defaults (probe, allowed domains, destination rules). A Proxy that breaks a rule
// gets one message per rule, each naming the Proxy's field, what it asked for and the limit.
func (r Rules) Apply(p *Proxy) error { //nolint:gocyclo // a flat list of independent rule checks
	var errs []string
	bad := func(field, format string, a ...any) {
		errs = append(errs, "spec."+field+": "+fmt.Sprintf(format, a...))
	}
	if int64(p.VCPU) > r.MaxVCPU {
		bad("vcpu", "%d is more than the platform allows per Proxy (%d, policy limits.maxVCPU)", p.VCPU, r.MaxVCPU)
	}
	if int64(p.MemoryMiB) > r.MaxMemoryMiB {
		bad("memoryMiB", "%d is more than the platform allows per Proxy (%d, policy limits.maxMemoryMiB)", p.MemoryMiB, r.MaxMemoryMiB)
	}
	if p.DiskSizeGiB != nil && int64(*p.DiskSizeGiB) > r.MaxDiskSizeGiB {
		bad("diskSizeGiB", "%d is more than the platform allows per Proxy (%d, policy limits.maxDiskSizeGiB)", *p.DiskSizeGiB, r.MaxDiskSizeGiB)
	}
	if int64(p.Replicas) > r.MaxReplicas {
		bad("replicas", "%d is more than the platform allows per Proxy (%d, policy limits.maxReplicas)", p.Replicas, r.MaxReplicas)
	}
	for i, c := range p.AllowedCIDRs {
		if !insideAny(c, r.ClientCIDRs) {
			bad(fmt.Sprintf("allowedCIDRs[%d]", i), "%s is not inside the client networks the platform allows (%s, policy clientCIDRs)", c, prefixList(r.ClientCIDRs))
		}
	}
	if len(p.SquidDirectives) > 0 && !r.AllowSquidDirectives {
		bad("squidDirectives", "the platform does not allow squid directives (policy allowSquidDirectives: false); remove them")
	}
	for i, d := range p.SquidDirectives {
		if m := checkDirective(d); m != "" {
			bad(fmt.Sprintf("squidDirectives[%d]", i), "%s", m)
		}
	}
	if len(p.SSHAuthorizedKeys) > 0 && !r.AllowSSHKeys {
		bad("sshAuthorizedKeys", "the platform does not allow SSH keys (policy allowSSHKeys: false); remove them")
	}

	if p.ProbeURL == "" && r.Probe != nil {
		p.ProbeURL, p.ProbeStatus = r.Probe.URL, int32(*r.Probe.ExpectedStatus)
	}
	if p.AllowedDomains == nil {
		p.AllowedDomains = r.Destinations.DefaultDomains
	}
	p.Destinations = r.Destinations
	p.AptSources = r.AptSources
	if p.ProbeURL != "" && !p.Destinations.Report {
		if m := r.probeDenied(p); m != "" {
			bad("probe.url", "%s", m)
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// probeDenied says why the proxy would refuse its own readiness probe, which would keep it
// from ever being Ready, or "" when the probe passes the destination rules (as far as the
// URL tells: a host name is resolved only by squid).
func (r Rules) probeDenied(p *Proxy) string {
	u, err := url.Parse(p.ProbeURL)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	if len(p.AllowedDomains) > 0 && !domainMatches(host, p.AllowedDomains) {
		return fmt.Sprintf("the probe's host %q is not in allowedDomains, so the proxy would refuse its own readiness probe", host)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	a = a.Unmap()
	for _, al := range r.Destinations.Allowed {
		if al.Prefix.Contains(a) {
			return ""
		}
	}
	for _, c := range rangeClasses {
		if !contains(r.Destinations.Denied, c.class) {
			continue
		}
		for _, s := range c.prefix {
			if netip.MustParsePrefix(s).Contains(a) {
				return fmt.Sprintf("the probe's address %s is %s, which the platform denies (policy destinations.deniedRanges %s, no allowedRanges entry holds it), so the proxy would refuse its own readiness probe", a, c.what, c.class)
			}
		}
	}
	return ""
}

// domainMatches is squid's dstdomain match of host against the list (without the IP lookup
// squid's -n flag turns off).
func domainMatches(host string, domains []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range domains {
		if strings.HasPrefix(d, ".") {
			if host == d[1:] || strings.HasSuffix(host, d) {
				return true
			}
		} else if host == d {
			return true
		}
	}
	return false
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// insideAny says whether c lies inside one of the networks.
func insideAny(c netip.Prefix, nets []netip.Prefix) bool {
	for _, n := range nets {
		if n.Addr().Is4() == c.Addr().Is4() && n.Bits() <= c.Bits() && n.Contains(c.Addr()) {
			return true
		}
	}
	return false
}

func prefixList(p []netip.Prefix) string {
	if len(p) == 0 {
		return "none"
	}
	s := make([]string, len(p))
	for i, x := range p {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

// reservedACLs are the acl names of squid itself and of Debian's squid.conf. A team's
// directive that defines one of them (or one of the proxy's, proxy_*) would add to it: "acl
// proxy_clients src all" would widen who may use the proxy even after the deny rules.
var reservedACLs = map[string]bool{
	"all": true, "manager": true, "localhost": true, "to_localhost": true, "to_linklocal": true,
	"localnet": true, "SSL_ports": true, "Safe_ports": true, "CONNECT": true,
}

// forbiddenDirectives are squid directives a team may not use, each with why: they would let
// a request past the proxy's access rules (rewrite it after the check, send it through a peer,
// let the client choose its own address), run programs in the guest, or silence the logs
// that say why a request was denied.
var forbiddenDirectives = map[string]string{
	"include":                 "it reads configuration the platform did not check",
	"follow_x_forwarded_for":  "it lets a client choose the address the client rules see",
	"cache_peer":              "a peer is reached without the destination rules",
	"external_acl_type":       "it runs a program in the guest",
	"auth_param":              "it runs a program in the guest",
	"sslcrtd_program":         "it runs a program in the guest",
	"sslcrtvalidator_program": "it runs a program in the guest",
	"logfile_daemon":          "it runs a program in the guest",
	"unlinkd_program":         "it runs a program in the guest",
	"loadable_modules":        "it loads code into squid",
	"access_log":              "the access log says why requests are denied; the platform sets it",
	"error_directory":         "the denial pages name the platform's rules; the platform sets them",
}

// forbiddenPrefixes are directive families a team may not use: request rewriting and
// adaptation happen after http_access, so they could send a request elsewhere.
var forbiddenPrefixes = []string{"url_rewrite_", "store_id_", "icap_", "ecap_", "adaptation_"}

// checkDirective says why a team's squid directive is refused, or "" when it may be used.
func checkDirective(d string) string {
	f := strings.Fields(d)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return ""
	}
	name := strings.ToLower(f[0])
	if why, ok := forbiddenDirectives[name]; ok {
		return fmt.Sprintf("%q is not allowed: %s", f[0], why)
	}
	for _, p := range forbiddenPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Sprintf("%q is not allowed: request rewriting and adaptation happen after the access rules and could send a request where they deny", f[0])
		}
	}
	switch name {
	case "acl":
		if len(f) > 1 && (reservedACLs[f[1]] || strings.HasPrefix(strings.ToLower(f[1]), "proxy_")) {
			return fmt.Sprintf("acl %q is squid's, Debian's or the proxy's own: defining it adds to it and could widen access; name your acl otherwise", f[1])
		}
	case "deny_info", "logformat":
		for _, x := range f[1:] {
			if strings.HasPrefix(strings.ToLower(x), "proxy_") {
				return fmt.Sprintf("%s may not name the proxy's own %q", f[0], x)
			}
		}
	}
	return ""
}
