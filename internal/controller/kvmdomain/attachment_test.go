package kvmdomain

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// A domain that names neither a network nor a bridge attaches where its host's defaults say.
func TestSpecAttachment(t *testing.T) {
	cases := map[string]struct {
		reason   string
		defaults v1alpha1.HostDefaults
		network  string
		bridge   string
		want     string
	}{
		"NoDefaults":           {reason: "libvirt's network default", want: `<source network="default"`},
		"DefaultNetwork":       {reason: "the host's default network", defaults: v1alpha1.HostDefaults{Network: "lan"}, want: `<source network="lan"`},
		"DefaultBridge":        {reason: "the host's default bridge", defaults: v1alpha1.HostDefaults{Bridge: "br0"}, want: `<source bridge="br0"`},
		"OwnNetworkOverBridge": {reason: "the resource's own network wins over the host's bridge", defaults: v1alpha1.HostDefaults{Bridge: "br0"}, network: "nat", want: `<source network="nat"`},
		"OwnBridgeOverNetwork": {reason: "the resource's own bridge wins over the host's network", defaults: v1alpha1.HostDefaults{Network: "lan"}, bridge: "br1", want: `<source bridge="br1"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newExt(newFakeHost(), false)
			e.defaults = tc.defaults
			e.defaults.Pool, e.defaults.DomainType = pool, "qemu"
			cr := kvm()
			cr.Spec.ForProvider.Network, cr.Spec.ForProvider.Bridge = tc.network, tc.bridge
			base := &v1alpha1.BaseImage{}
			base.Status.AtProvider.VolumeName = "pkvm-base-0123456789ab"
			x, err := e.spec(cr, &inputs{base: base}, "")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(x, tc.want) {
				t.Errorf("%s: domain XML lacks %s:\n%s", tc.reason, tc.want, x)
			}
			if strings.Count(x, "<interface ") != 1 {
				t.Errorf("%s: want one interface:\n%s", tc.reason, x)
			}
		})
	}
}

func TestAddressSources(t *testing.T) {
	cases := map[string]struct {
		last string
		want []string
	}{
		"None":    {"", []string{libvirt.SourceLease, libvirt.SourceAgent, libvirt.SourceARP}},
		"Lease":   {libvirt.SourceLease, []string{libvirt.SourceLease, libvirt.SourceAgent, libvirt.SourceARP}},
		"Agent":   {libvirt.SourceAgent, []string{libvirt.SourceAgent, libvirt.SourceLease, libvirt.SourceARP}},
		"ARP":     {libvirt.SourceARP, []string{libvirt.SourceARP, libvirt.SourceLease, libvirt.SourceAgent}},
		"Unknown": {"dhcp", []string{libvirt.SourceLease, libvirt.SourceAgent, libvirt.SourceARP}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, addressSources(tc.last)); diff != "" {
				t.Errorf("addressSources(%q) (-want +got):\n%s", tc.last, diff)
			}
		})
	}
}
