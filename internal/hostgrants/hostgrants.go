// Package hostgrants decides what a namespace may use of a host: whether it may use a
// ClusterProviderConfig at all (spec.allowedNamespaces), and which libvirt networks, host
// bridges and storage pools its resources may name (the config's defaults and
// spec.attachments). Pure: the namespace's labels are handed in.
//
// Refusals name the config and its field, never another namespace or its objects.
package hostgrants

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

const (
	errSelector     = "%s has an invalid namespace selector in %s"
	errNotAdmitted  = "namespace %s may not use %s: it is not among the namespaces its spec.allowedNamespaces selects (ask the platform team for access, or use another host)"
	errNotGranted   = "%s %q is not granted to namespace %s on %s: a namespace may use the config's defaults and what its spec.attachments grant it (%s)"
	errBadCIDR      = "%s states an invalid range %q for bridge %s"
	grantedNone     = "nothing beyond the defaults"
	kindNetwork     = "network"
	kindBridge      = "bridge"
	kindPool        = "pool"
	fieldAllowed    = "spec.allowedNamespaces"
	fieldAttachment = "spec.attachments[%d].namespaces"
)

// Namespace is what the decisions need of a managed resource's namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// NeedsLabels is true when deciding for spec needs the namespace's labels (a selector is set),
// so that a caller reads the Namespace only then.
func NeedsLabels(spec v1alpha1.ProviderConfigSpec) bool {
	if s := spec.AllowedNamespaces; s != nil && s.Selector != nil {
		return true
	}
	for _, g := range spec.Attachments {
		if g.Namespaces != nil && g.Namespaces.Selector != nil {
			return true
		}
	}
	return false
}

// selects is true when sel picks ns: listed by name, or matched by the label selector.
func selects(sel *v1alpha1.NamespaceSelection, ns Namespace) (bool, error) {
	if slices.Contains(sel.Names, ns.Name) {
		return true, nil
	}
	if sel.Selector == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel.Selector)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(ns.Labels)), nil
}

// Admit returns nil when namespace ns may use the ClusterProviderConfig named source whose
// spec.allowedNamespaces is sel (nil: every namespace may), else an error naming the rule.
func Admit(source string, sel *v1alpha1.NamespaceSelection, ns Namespace) error {
	if sel == nil {
		return nil
	}
	ok, err := selects(sel, ns)
	if err != nil {
		return errors.Wrapf(err, errSelector, source, fieldAllowed)
	}
	if !ok {
		return errors.Errorf(errNotAdmitted, ns.Name, source)
	}
	return nil
}

// A Grant is what one namespace may use of one host.
type Grant struct {
	source    string
	namespace string
	networks  map[string]bool
	pools     map[string]bool
	// bridges maps each granted bridge to the address ranges stated for it.
	bridges map[string][]netip.Prefix
	// granted lists, for messages, what spec.attachments add to the defaults.
	granted []string
}

// For returns what namespace ns may use of the host that spec (of the config named source)
// describes: its defaults, and every grant of spec.attachments that selects ns. A namespaced
// ProviderConfig serves its own namespace only: its grants apply whatever they select.
func For(source string, spec v1alpha1.ProviderConfigSpec, ns Namespace, namespaced bool) (Grant, error) {
	g := Grant{source: source, namespace: ns.Name, networks: map[string]bool{}, pools: map[string]bool{}, bridges: map[string][]netip.Prefix{}}
	d := spec.Defaults
	if d.Pool != "" {
		g.pools[d.Pool] = true
	}
	switch net, br := d.Attachment(); {
	case br != "":
		if err := g.addBridge(br, d.BridgeCIDRs); err != nil {
			return Grant{}, err
		}
	default:
		g.networks[net] = true
	}
	for i, a := range spec.Attachments {
		if a.Namespaces != nil && !namespaced {
			ok, err := selects(a.Namespaces, ns)
			if err != nil {
				return Grant{}, errors.Wrapf(err, errSelector, source, fmt.Sprintf(fieldAttachment, i))
			}
			if !ok {
				continue
			}
		}
		for _, n := range a.Networks {
			g.networks[n] = true
			g.granted = append(g.granted, kindNetwork+" "+n)
		}
		for _, b := range a.Bridges {
			if err := g.addBridge(b.Name, b.CIDRs); err != nil {
				return Grant{}, err
			}
			g.granted = append(g.granted, kindBridge+" "+b.Name)
		}
		for _, p := range a.Pools {
			g.pools[p] = true
			g.granted = append(g.granted, kindPool+" "+p)
		}
	}
	sort.Strings(g.granted)
	g.granted = slices.Compact(g.granted)
	return g, nil
}

func (g *Grant) addBridge(name string, cidrs []string) error {
	rs := g.bridges[name]
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() {
			return errors.Errorf(errBadCIDR, g.source, c, name)
		}
		if p = p.Masked(); !slices.Contains(rs, p) {
			rs = append(rs, p)
		}
	}
	if rs == nil {
		rs = []netip.Prefix{}
	}
	g.bridges[name] = rs
	return nil
}

func (g Grant) refuse(kind, name string) error {
	what := grantedNone
	if len(g.granted) > 0 {
		what = strings.Join(g.granted, ", ")
	}
	return errors.Errorf(errNotGranted, kind, name, g.namespace, g.source, what)
}

// CheckNetwork returns nil when the namespace may attach guests to libvirt network name.
func (g Grant) CheckNetwork(name string) error {
	if g.networks[name] {
		return nil
	}
	return g.refuse(kindNetwork, name)
}

// CheckBridge returns nil when the namespace may attach guests to host bridge name.
func (g Grant) CheckBridge(name string) error {
	if _, ok := g.bridges[name]; ok {
		return nil
	}
	return g.refuse(kindBridge, name)
}

// CheckPool returns nil when the namespace may make volumes in storage pool name.
func (g Grant) CheckPool(name string) error {
	if g.pools[name] {
		return nil
	}
	return g.refuse(kindPool, name)
}

// CheckAttachment checks a guest's network or bridge (exactly one is set).
func (g Grant) CheckAttachment(network, bridge string) error {
	if bridge != "" {
		return g.CheckBridge(bridge)
	}
	return g.CheckNetwork(network)
}

// BridgeRanges are the address ranges the config states for bridge name (for this namespace:
// its defaults and the grants that select it); nil when none is stated.
func (g Grant) BridgeRanges(name string) []netip.Prefix {
	if rs := g.bridges[name]; len(rs) > 0 {
		return slices.Clone(rs)
	}
	return nil
}
