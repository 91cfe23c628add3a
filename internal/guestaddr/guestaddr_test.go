package guestaddr

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
)

func TestAccept(t *testing.T) {
	nat := Attachment{What: `network "default"`, Ranges: []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24")}}
	bare := Attachment{What: `bridge "br0"`, Hint: "state them"}
	cases := map[string]struct {
		reason string
		source string
		ip     string
		att    Attachment
		want   error
	}{
		"LeaseAnywhere": {
			reason: "libvirt's own DHCP lease is trusted without a range",
			source: SourceLease, ip: "10.1.2.3", att: bare,
		},
		"AgentInside": {
			reason: "an agent address inside the network's subnet is used",
			source: SourceAgent, ip: "192.168.122.50", att: nat,
		},
		"ARPInside": {
			reason: "so is an ARP one",
			source: SourceARP, ip: "192.168.122.51", att: nat,
		},
		"AgentOutside": {
			reason: "an agent address outside (another team's network, the management LAN) is ignored",
			source: SourceAgent, ip: "10.0.0.1", att: nat,
			want: errors.Errorf(errOutside, SourceAgent, `network "default"`, "192.168.122.0/24"),
		},
		"AgentNoRanges": {
			reason: "without a known range no guest-reported address is used",
			source: SourceAgent, ip: "192.168.50.7", att: bare,
			want: errors.Errorf(errNoRanges, SourceAgent, `bridge "br0"`, "state them"),
		},
		"Metadata": {
			reason: "link-local (the cloud metadata address) is never used, whatever the source",
			source: SourceLease, ip: "169.254.169.254", att: nat,
			want: errors.Errorf(errSpecial, SourceLease),
		},
		"Loopback": {
			reason: "nor loopback",
			source: SourceAgent, ip: "127.0.0.1", att: Attachment{Ranges: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}},
			want: errors.Errorf(errSpecial, SourceAgent),
		},
		"Mapped": {
			reason: "an IPv4-mapped IPv6 address counts as its IPv4 address",
			source: SourceAgent, ip: "::ffff:192.168.122.9", att: nat,
		},
		"IPv6": {
			reason: "IPv6 is not an IPv4 address",
			source: SourceAgent, ip: "fd00::1", att: nat,
			want: errors.Errorf(errParse, SourceAgent),
		},
		"Garbage": {
			reason: "nor is garbage",
			source: SourceARP, ip: "not-an-ip", att: nat,
			want: errors.Errorf(errParse, SourceARP),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Accept(tc.source, tc.ip, tc.att)
			if diff := cmp.Diff(tc.want, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nAccept(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
