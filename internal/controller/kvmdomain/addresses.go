package kvmdomain

import (
	"context"
	"fmt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/guestaddr"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// addressCheck decides, for one Observe, which reported addresses of a guest may be used
// (internal/guestaddr). The attachment comes from the domain's own definition; a libvirt
// network's ranges are read from the host only when an address that is not from the lease
// must be checked.
type addressCheck struct {
	e               *external
	network, bridge string
	err             error // the definition could not be read
	att             *guestaddr.Attachment
}

func (e *external) addresses(d libvirt.DomainInfo, mac string) *addressCheck {
	a := &addressCheck{e: e}
	a.network, a.bridge, a.err = domainxml.AttachmentOf(d.XML, mac)
	return a
}

// accept returns nil when ip, reported by source, may be used.
func (a *addressCheck) accept(ctx context.Context, source, ip string) error {
	if a.att == nil && source != libvirt.SourceLease {
		a.att = a.attachment(ctx)
	}
	att := guestaddr.Attachment{}
	if a.att != nil {
		att = *a.att
	}
	return guestaddr.Accept(source, ip, att)
}

func (a *addressCheck) attachment(ctx context.Context) *guestaddr.Attachment {
	switch {
	case a.err != nil:
		return &guestaddr.Attachment{What: "the domain's interface", Hint: errors.Wrap(a.err, errLookup).Error()}
	case a.bridge != "":
		return &guestaddr.Attachment{What: fmt.Sprintf("bridge %q", a.bridge), Ranges: a.e.grant.BridgeRanges(a.bridge),
			Hint: "the platform team states a bridge's ranges in defaults.bridgeCIDRs or spec.attachments[].bridges[].cidrs of " + a.e.source}
	case a.network != "":
		what := fmt.Sprintf("network %q", a.network)
		rs, err := a.e.lv.NetworkRanges(ctx, a.network)
		if err != nil {
			return &guestaddr.Attachment{What: what, Hint: err.Error()}
		}
		return &guestaddr.Attachment{What: what, Ranges: rs, Hint: "the network's definition has no IPv4 <ip> element"}
	}
	return &guestaddr.Attachment{What: "the domain's interface", Hint: "it is attached to neither a libvirt network nor a bridge"}
}
