package function

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

func TestResolveAttachment(t *testing.T) {
	const field = "function input (ProxyPolicy) defaultAttachment"
	cases := map[string]struct {
		reason string
		in     *ppv1.Attachment
		want   ppv1.Attachment
		err    error
	}{
		"None": {
			reason: "Without a defaultAttachment the host config's default applies: nothing is set.",
		},
		"Network": {
			reason: "A libvirt network is taken as given.",
			in:     &ppv1.Attachment{Network: "egress"},
			want:   ppv1.Attachment{Network: "egress"},
		},
		"Bridge": {
			reason: "A bridge is taken as given.",
			in:     &ppv1.Attachment{Bridge: "br0"},
			want:   ppv1.Attachment{Bridge: "br0"},
		},
		"Neither": {
			reason: "An empty defaultAttachment is refused (Crossplane does not validate a step's input).",
			in:     &ppv1.Attachment{},
			err:    errors.New(field + ": set exactly one of network and bridge, got neither"),
		},
		"Both": {
			reason: "A network and a bridge together are refused.",
			in:     &ppv1.Attachment{Network: "default", Bridge: "br0"},
			err:    errors.New(field + ": set exactly one of network and bridge, got both"),
		},
		"BadNames": {
			reason: "Names the KVMDomain API would refuse are refused here, naming the field.",
			in:     &ppv1.Attachment{Bridge: "a-bridge-name-too-long"},
			err:    errors.New(field + `.bridge: "a-bridge-name-too-long" is not a bridge device name (letters, digits and _.-, at most 15)`),
		},
		"BadNetwork": {
			reason: "A network name with a space is refused.",
			in:     &ppv1.Attachment{Network: "my net"},
			err:    errors.New(field + `.network: "my net" is not a libvirt network name (letters, digits and _.+-, at most 64)`),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolveAttachment(tc.in)
			if diff := cmp.Diff(tc.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nresolveAttachment(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nresolveAttachment(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRunFunctionDefaultAttachment: the platform's defaultAttachment is the composed
// KVMDomain's network or bridge; without one the KVMDomain names neither (the host config's
// default); a bad one is a fatal result naming the field, and nothing is composed.
func TestRunFunctionDefaultAttachment(t *testing.T) {
	const xr = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-a, uid: 1b2c}
spec:
  host: default
  image: {baseImageName: debian-12}
`
	cases := map[string]struct {
		reason              string
		attachment          string // the input's defaultAttachment line; "": none
		wantNetwork, wantBr string
		wantFatal           string
	}{
		"None":    {reason: "No defaultAttachment: the KVMDomain names no network or bridge, the host config's default applies."},
		"Bridge":  {reason: "A bridge is the KVMDomain's bridge.", attachment: "defaultAttachment: {bridge: br0}", wantBr: "br0"},
		"Network": {reason: "A network is the KVMDomain's network.", attachment: "defaultAttachment: {network: egress}", wantNetwork: "egress"},
		"Bad": {reason: "A defaultAttachment with both is refused, composing nothing.", attachment: "defaultAttachment: {network: egress, bridge: br0}",
			wantFatal: "function input (ProxyPolicy) defaultAttachment: set exactly one of network and bridge, got both"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, xr, nil)
			if tc.attachment != "" {
				req.Input = st(t, testPolicy+tc.attachment+"\n")
			}
			rsp := run(t, req)
			if tc.wantFatal != "" {
				if f := fatals(rsp); len(f) != 1 || !strings.Contains(f[0], tc.wantFatal) {
					t.Errorf("%s\nfatal results %q, want one with %q", tc.reason, f, tc.wantFatal)
				}
				if n := len(rsp.GetDesired().GetResources()); n != 0 {
					t.Errorf("%s\n%d resources composed, want none", tc.reason, n)
				}
				return
			}
			mustNoFatal(t, rsp)
			fp, _ := desired(rsp)[ResourceDomain]["spec"].(map[string]any)["forProvider"].(map[string]any)
			got := [2]any{fp["network"], fp["bridge"]}
			want := [2]any{nil, nil}
			if tc.wantNetwork != "" {
				want[0] = tc.wantNetwork
			}
			if tc.wantBr != "" {
				want[1] = tc.wantBr
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s\nthe KVMDomain's [network, bridge]: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
