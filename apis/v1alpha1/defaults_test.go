package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHostDefaultsAttachment(t *testing.T) {
	cases := map[string]struct {
		d                   HostDefaults
		wantNet, wantBridge string
	}{
		"Neither":    {wantNet: DefaultNetwork},
		"Network":    {d: HostDefaults{Network: "lan"}, wantNet: "lan"},
		"Bridge":     {d: HostDefaults{Bridge: "br0"}, wantBridge: "br0"},
		"BridgeWins": {d: HostDefaults{Network: "lan", Bridge: "br0"}, wantBridge: "br0"}, // refused at admission; the bridge is the explicit choice
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, b := tc.d.Attachment()
			if d := cmp.Diff([2]string{tc.wantNet, tc.wantBridge}, [2]string{n, b}); d != "" {
				t.Errorf("Attachment() (-want +got):\n%s", d)
			}
		})
	}
}
