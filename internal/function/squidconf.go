package function

import (
	"fmt"
	"html"
	"net/netip"
	"strings"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// Guest paths of the squid configuration's pieces. Tests that run squid outside a guest
// replace them (see internal/function/squid_test.go).
const (
	// SquidErrorPagesDir is where squid looks for an error page no language directory has:
	// the proxy's denial pages (deny_info) go there. On Debian /usr/share/squid/errors is
	// squid-langpack's directory.
	SquidErrorPagesDir = "/usr/share/squid/errors/templates"
	// SquidAccessLog is squid's access log, written through Debian's log daemon.
	SquidAccessLog = "daemon:/var/log/squid/access.log"
	// SquidWouldDenyLog holds the requests a destination rule in Report mode let through.
	SquidWouldDenyLog = "stdio:/var/log/squid/would-deny.log"
)

// ACL names of the proxy's rules. Teams may not define acls named proxy_* (checkDirective).
const (
	aclClients    = "proxy_clients"
	aclDomains    = "proxy_domains"
	aclDstAllowed = "proxy_dst_allowed"
	logFormat     = "proxy_kvm"
)

// squidRule is one destination rule: its acl, the page squid answers a denial with, and the
// sentence that page and the docs say.
type squidRule struct {
	acl, page, why string
}

func domainRule() squidRule {
	return squidRule{acl: aclDomains, page: "ERR_PROXY_DOMAIN_NOT_ALLOWED",
		why: "its host is not in the Proxy's allowedDomains"}
}

// rangeRule is the rule of a denied range class: acl proxy_dst_private, page
// ERR_PROXY_DST_PRIVATE.
func rangeRule(c ppv1.RangeClass) squidRule {
	s := strings.ReplaceAll(string(c), "-", "_")
	what := ""
	for _, k := range rangeClasses {
		if k.class == c {
			what = k.what
		}
	}
	return squidRule{acl: "proxy_dst_" + s, page: "ERR_PROXY_DST_" + strings.ToUpper(s),
		why: fmt.Sprintf("squid resolved its host to %s, which the platform denies (ProxyPolicy destinations.deniedRanges: %s)", what, c)}
}

// destinationRules are the proxy's destination rules in the order squid checks them.
func destinationRules(p Proxy) []squidRule {
	var out []squidRule
	if len(p.AllowedDomains) > 0 {
		out = append(out, domainRule())
	}
	for _, c := range p.Destinations.Denied {
		out = append(out, rangeRule(c))
	}
	return out
}

// SquidConf renders the squid configuration of a proxy, /etc/squid/conf.d/proxy.conf, which
// Debian's squid.conf includes after its own safety rules (Safe_ports, CONNECT, manager) and
// before its final "http_access deny all". In order:
//
//  1. the port, the host name, the acls: clients (allowedCIDRs), domains (allowedDomains),
//     the platform's allowed ranges and each denied range class;
//  2. deny_info: each destination rule's own 403 page, naming the rule;
//  3. the access log, whose last field is the denial page (so it says which rule denied);
//  4. the deny rules: clients outside allowedCIDRs, then (Enforce) each destination rule, or
//     (Report) one would-deny log line per destination rule instead;
//  5. the team's squidDirectives;
//  6. http_access allow proxy_clients.
//
// squid takes the first http_access line that matches, so a team's directive (5) comes after
// every deny (4): "http_access allow all" there lets through only what the proxy's own allow
// (6) would. Its acls cannot add to the proxy's: checkDirective refuses "acl proxy_*".
func SquidConf(p Proxy, hostname string) string {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("# Written by provider-kvm's function-kvm-proxy. Changes are lost on re-provisioning.")
	line("http_port %d", p.Port)
	line("visible_hostname %s", hostname)
	for _, c := range p.AllowedCIDRs {
		line("acl %s src %s", aclClients, squidNet(c))
	}
	if len(p.AllowedDomains) > 0 {
		// -n: an IP address in the URL is matched as written, never looked up in reverse DNS.
		line("acl %s dstdomain -n %s", aclDomains, strings.Join(p.AllowedDomains, " "))
	}
	dst := p.Destinations
	if len(dst.Denied) > 0 {
		for _, a := range dst.Allowed {
			line("acl %s dst %s # %s", aclDstAllowed, squidNet(a.Prefix), a.Name)
		}
	}
	for _, c := range dst.Denied {
		for _, k := range rangeClasses {
			if k.class == c {
				line("acl %s dst %s", rangeRule(c).acl, strings.Join(k.prefix, " "))
			}
		}
	}
	rules := destinationRules(p)
	for _, r := range SquidErrorPages(p) {
		line("deny_info %s %s", r.Name, r.acl)
	}
	line("logformat %s %%ts.%%03tu %%6tr %%>a %%Ss/%%03>Hs %%<st %%rm %%ru %%[un %%Sh/%%<a %%mt %%err_code", logFormat)
	line("access_log %s logformat=%s", SquidAccessLog, logFormat)

	line("http_access deny !%s", aclClients)
	for _, r := range rules {
		match := r.acl
		if r.acl == aclDomains {
			match = "!" + aclDomains
		} else if len(dst.Allowed) > 0 {
			// The rule's own acl last: deny_info answers with the page of the last acl checked.
			match = "!" + aclDstAllowed + " " + r.acl
		}
		if dst.Report {
			line("logformat %s_%s %%ts.%%03tu %%>a %%rm %%ru would-deny %s", logFormat, r.acl, r.acl)
			line("access_log %s logformat=%s_%s %s", SquidWouldDenyLog, logFormat, r.acl, match)
			continue
		}
		line("http_access deny %s", match)
	}
	if len(p.SquidDirectives) > 0 {
		line("# The Proxy's squidDirectives: after the platform's deny rules, so they can only narrow access.")
		for _, d := range p.SquidDirectives {
			line("%s", d)
		}
	}
	line("http_access allow %s", aclClients)
	return b.String()
}

// squidNet is a network as squid's src and dst acls take it. Squid refuses a /0 ("needs to be
// replaced by the term 'all'", which would take both address families), so a /0 is its two
// halves.
func squidNet(p netip.Prefix) string {
	if p.Bits() != 0 {
		return p.String()
	}
	if p.Addr().Is4() {
		return "0.0.0.0/1 128.0.0.0/1"
	}
	return "::/1 8000::/1"
}

// SquidErrorPage is a denial page squid answers with (deny_info), an error page template.
type SquidErrorPage struct {
	Name, Content string
	acl           string // the rule's acl
}

// SquidErrorPages are the 403 pages of the proxy's destination rules, each naming its rule.
// In Report mode nothing is denied and there are none.
func SquidErrorPages(p Proxy) []SquidErrorPage {
	if p.Destinations.Report {
		return nil
	}
	var out []SquidErrorPage
	for _, r := range destinationRules(p) {
		// Squid fills in %U (the URL) and %h (this proxy's name); "%%" is a literal "%".
		why := strings.ReplaceAll(html.EscapeString(r.why), "%", "%%")
		out = append(out, SquidErrorPage{Name: r.page, acl: r.acl, Content: "<!DOCTYPE html>\n" +
			"<html><head><title>ERROR: denied by rule " + r.acl + "</title></head><body>\n" +
			"<h1>Access denied by rule " + r.acl + "</h1>\n" +
			"<p>This proxy refused %U: " + why + ".</p>\n" +
			"<p>Ask your platform team if this destination should be reachable.</p>\n" +
			"<hr><address>" + r.page + " from %h</address>\n</body></html>\n"})
	}
	return out
}

// squidDomains is a dstdomain list without duplicates or names a wildcard already covers
// (squid warns about them), in the order given.
func squidDomains(in []string) []string {
	out := []string{}
	for _, d := range in {
		covered := false
		for _, o := range in {
			if o != d && strings.HasPrefix(o, ".") && (d == o[1:] || strings.HasSuffix(d, o)) {
				covered = true
			}
		}
		if !covered && !contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}
