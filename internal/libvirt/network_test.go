package libvirt

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseNetworkRanges(t *testing.T) {
	cases := map[string]struct {
		doc  string
		want []netip.Prefix
	}{
		"Netmask": {
			doc:  `<network><name>default</name><forward mode='nat'/><bridge name='virbr0'/><ip address='192.168.122.1' netmask='255.255.255.0'><dhcp><range start='192.168.122.2' end='192.168.122.254'/></dhcp></ip></network>`,
			want: []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24")},
		},
		"PrefixAndIPv6": {
			doc:  `<network><name>lab</name><ip address='10.20.0.1' prefix='16'/><ip family='ipv6' address='fd00::1' prefix='64'/></network>`,
			want: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
		},
		"NoIP": {
			doc: `<network><name>passthrough</name><forward mode='bridge'/><bridge name='br0'/></network>`,
		},
		"BadMask": {
			doc: `<network><name>odd</name><ip address='10.0.0.1' netmask='255.0.255.0'/></network>`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseNetworkRanges(tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ParseNetworkRanges(): -want, +got:\n%s", diff)
			}
		})
	}
}
