// Package guestaddr decides whether an address reported for a guest may be used: probed from
// the host, written to status.atProvider.ipv4 and so to a Proxy's EndpointSlice. The DHCP
// lease comes from libvirt's own dnsmasq and is trusted; the guest agent and ARP report what
// the guest says about itself, so their addresses are used only inside the ranges of the
// network the guest is attached to (the libvirt network's <ip> elements, or the ranges the
// host config states for a bridge). Pure.
package guestaddr

import (
	"net/netip"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// Sources of an address, as internal/libvirt names them.
const (
	SourceLease = "lease"
	SourceAgent = "agent"
	SourceARP   = "arp"
)

const (
	errParse    = "%s reported something that is not an IPv4 address"
	errSpecial  = "%s reported a loopback, link-local, unspecified, multicast or broadcast address"
	errNoRanges = "%s reported an address, but no address range is known for %s, so an address the guest reports is not used (%s)"
	errOutside  = "%s reported an address outside the ranges of %s (%s)"
)

// Attachment is what a guest's interface is attached to and the ranges its addresses come
// from.
type Attachment struct {
	// What names it for messages, e.g. `network "default"` or `bridge "br0"`.
	What string
	// Ranges are the IPv4 prefixes addresses on it come from; nil when none is known.
	Ranges []netip.Prefix
	// Hint says where the ranges come from, for messages: how to make an address usable.
	Hint string
}

// Accept returns nil when ip, reported by source for a guest attached to a, may be used, else
// an error saying why it is ignored. The error does not hold the address: it goes into the
// resource's status, where an ignored address never appears.
func Accept(source, ip string, a Attachment) error {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Unmap().Is4() {
		return errors.Errorf(errParse, source)
	}
	addr = addr.Unmap()
	if addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsUnspecified() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return errors.Errorf(errSpecial, source)
	}
	if source == SourceLease {
		return nil
	}
	if len(a.Ranges) == 0 {
		return errors.Errorf(errNoRanges, source, a.What, a.Hint)
	}
	for _, r := range a.Ranges {
		if r.Contains(addr) {
			return nil
		}
	}
	return errors.Errorf(errOutside, source, a.What, prefixes(a.Ranges))
}

func prefixes(rs []netip.Prefix) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += r.String()
	}
	return s
}
