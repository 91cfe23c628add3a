package function

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// The names a KVMDomain's network and bridge may have (apis/v1alpha1 KVMDomain's patterns).
var (
	reNetworkName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)
	reBridgeName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
)

const (
	maxNetworkNameLen = 64
	maxBridgeNameLen  = 15 // IFNAMSIZ - 1
)

// resolveAttachment checks the platform's default attachment (ProxyPolicy defaultAttachment):
// the zero Attachment when there is none (the host config's default applies), else exactly
// one of a network and a bridge with a name the KVMDomain API takes. A bad one names the
// input's field, as ResolveRules does.
func resolveAttachment(a *ppv1.Attachment) (ppv1.Attachment, error) {
	if a == nil {
		return ppv1.Attachment{}, nil
	}
	const field = "function input (ProxyPolicy) defaultAttachment"
	var errs []string
	switch {
	case a.Network == "" && a.Bridge == "":
		errs = append(errs, field+": set exactly one of network and bridge, got neither")
	case a.Network != "" && a.Bridge != "":
		errs = append(errs, field+": set exactly one of network and bridge, got both")
	}
	if a.Network != "" && (len(a.Network) > maxNetworkNameLen || !reNetworkName.MatchString(a.Network)) {
		errs = append(errs, fmt.Sprintf("%s.network: %q is not a libvirt network name (letters, digits and _.+-, at most %d)", field, a.Network, maxNetworkNameLen))
	}
	if a.Bridge != "" && (len(a.Bridge) > maxBridgeNameLen || !reBridgeName.MatchString(a.Bridge)) {
		errs = append(errs, fmt.Sprintf("%s.bridge: %q is not a bridge device name (letters, digits and _.-, at most %d)", field, a.Bridge, maxBridgeNameLen))
	}
	if len(errs) > 0 {
		return ppv1.Attachment{}, errors.New(strings.Join(errs, "; "))
	}
	return *a, nil
}

// attachmentName is "network NAME" or "bridge NAME", as hostgrants' messages say it; "" for
// the host's default.
func attachmentName(network, bridge string) string {
	switch {
	case bridge != "":
		return "bridge " + bridge
	case network != "":
		return "network " + network
	}
	return ""
}
