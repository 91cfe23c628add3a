package libvirt

import (
	"context"
	"net/netip"

	"libvirt.org/go/libvirtxml"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

const (
	errNetworkXML   = "cannot read the definition of network %q on %s"
	errParseNetwork = "cannot parse the definition of a libvirt network"
)

// NetworkRanges returns the IPv4 prefixes of a libvirt network's <ip> elements: the subnets
// its guests take addresses from (two RPCs). A network without any (e.g. one that forwards to
// a host bridge) has none.
func (c *Client) NetworkRanges(ctx context.Context, name string) ([]netip.Prefix, error) {
	var doc string
	err := c.do(ctx, func(l rpc) error {
		n, err := l.NetworkLookupByName(name)
		if err != nil {
			return err
		}
		doc, err = l.NetworkGetXMLDesc(n, 0)
		return err
	})
	if err != nil {
		return nil, errors.Wrapf(err, errNetworkXML, name, c.conn.Address())
	}
	return ParseNetworkRanges(doc)
}

// ParseNetworkRanges returns the IPv4 prefixes of a network XML's <ip> elements, from their
// prefix or netmask attribute.
func ParseNetworkRanges(doc string) ([]netip.Prefix, error) {
	var n libvirtxml.Network
	if err := n.Unmarshal(doc); err != nil {
		return nil, errors.Wrap(err, errParseNetwork)
	}
	var out []netip.Prefix
	for _, ip := range n.IPs {
		if ip.Family != "" && ip.Family != "ipv4" {
			continue
		}
		a, err := netip.ParseAddr(ip.Address)
		if err != nil || !a.Is4() {
			continue
		}
		bits := int(ip.Prefix)
		if ip.Prefix == 0 && ip.Netmask != "" {
			m, err := netip.ParseAddr(ip.Netmask)
			if err != nil || !m.Is4() {
				continue
			}
			bits = maskBits(m.As4())
		}
		if bits <= 0 || bits > 32 {
			continue
		}
		out = append(out, netip.PrefixFrom(a, bits).Masked())
	}
	return out, nil
}

// maskBits counts the leading ones of a netmask (-1 when the mask is not contiguous).
func maskBits(m [4]byte) int {
	v := uint32(m[0])<<24 | uint32(m[1])<<16 | uint32(m[2])<<8 | uint32(m[3])
	n := 0
	for v&0x80000000 != 0 {
		n++
		v <<= 1
	}
	if v != 0 {
		return -1
	}
	return n
}
