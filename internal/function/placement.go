package function

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"
	"github.com/crossplane/function-sdk-go/resource"
	"github.com/crossplane/function-sdk-go/resource/composite"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/placement"
)

// RequirementHosts names the required resources the function asks Crossplane for to place a
// Proxy: the ClusterProviderConfigs its selector (and the platform's) match.
const RequirementHosts = "hosts"

// RequirementBaseImage names the required resource the function asks for to place a Proxy
// that boots a shared BaseImage: that BaseImage, in the Proxy's namespace. A domain boots a
// BaseImage of its own host only, so the Proxy goes where the image is.
const RequirementBaseImage = "base-image"

// RequirementNamespace names the required resource the function asks for when a host admits
// namespaces by label: the Proxy's own Namespace.
const RequirementNamespace = "namespace"

// needsNamespace is true when a host among got admits namespaces by a label selector.
func needsNamespace(got []resource.Required, attached bool) bool {
	for _, r := range got {
		if sel, ok, _ := unstructured.NestedMap(r.Resource.Object, "spec", "allowedNamespaces", "selector"); ok && sel != nil {
			return true
		}
		if !attached {
			continue
		}
		// With the platform's default attachment, a host's grants are read (hostgrants.For):
		// an attachment grant that selects namespaces by label needs the labels too.
		grants, _, _ := unstructured.NestedSlice(r.Resource.Object, "spec", "attachments")
		for _, g := range grants {
			if sel, ok, _ := unstructured.NestedMap(asMap(g), "namespaces", "selector"); ok && sel != nil {
				return true
			}
		}
	}
	return false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// The Placed condition of a Proxy, and its reasons.
const (
	ConditionPlaced  = "Placed"
	ReasonHostGiven  = "HostGiven"  // spec.host names the host
	ReasonPlaced     = "Placed"     // the function chose the host (status.host), for good
	ReasonNoHostFits = "NoHostFits" // no host matches, or none has room: nothing is composed
	// ReasonEvacuationBlocked: the Proxy leaves its host (it evacuates, or has not been Ready
	// for longer than the platform's failoverAfter), but no other host fits: it stays.
	ReasonEvacuationBlocked = "EvacuationBlocked"
	ReasonChoosing          = "Choosing" // the hosts were asked for; Crossplane calls again with them
	PhasePending            = "Pending"  // no host yet: nothing is composed
	msgChoosing             = "choosing a host"
	hostsAPIVersion         = "kvm.crossplane.io/v1alpha1"
	statusHostField         = "status.host"
)

// where is the outcome of placement: the host, or why there is none yet.
type where struct {
	host   string
	reason string // one of the Reason* constants
	// message of the Placed condition: where and why, or each host considered and why it was
	// skipped.
	message string
	// selector is set while the hosts are needed: they are asked for on every call until the
	// Proxy is placed, so Crossplane's requirements settle.
	selector map[string]string
	// image is the shared BaseImage asked for with the hosts ("" none), in namespace ns.
	image, ns string
	// namespaceNeeded: the Proxy's Namespace is asked for too (a host admits namespaces by
	// label).
	namespaceNeeded bool
	// left is the host the Proxy leaves while it moves to host ("" when it does not move).
	left string
}

// locate decides the host of a Proxy. In order: spec.host when given (as before placement);
// the host its composed resources already name, or failing that status.host (placement is
// sticky: a Proxy never moves on its own, and a later change of capacity never moves it),
// unless it leaves that host (spec.evacuate, or the host not Ready for longer than the
// platform's placement.failoverAfter: then placement chooses another, and the Proxy's new
// generation there takes over once Ready; with none, it stays); else the host placement
// chooses among the ClusterProviderConfigs Crossplane gave for the
// requirement (asked for in this response when not given yet).
func locate(req *fnv1.RunFunctionRequest, xr *composite.Unstructured, spec ProxySpec, p Proxy, ns string, pol ppv1.ProxyPolicy, observed map[resource.Name]resource.ObservedComposed, view hostView) (where, error) {

	if spec.Host != "" {
		return where{host: p.Host, reason: ReasonHostGiven, message: "spec.host names host " + p.Host}, nil
	}
	placed := composedHosts(observed, 0)
	if h, _ := xr.GetString(statusHostField); h != "" {
		placed = append(placed, h)
	}
	if len(placed) > 0 {
		// A placed Proxy stays where it is, unless its host evacuates: the hosts are asked
		// for on every call to tell.
		sel, err := selector(spec.HostSelector, pol)
		if err != nil {
			return where{}, err
		}
		h, left := stay(placed, view)
		if h != "" {
			return where{host: h, reason: ReasonPlaced, message: "placed on host " + h, selector: sel, image: p.BaseImageName, ns: ns}, nil
		}
		w, err := place(req, spec, p, ns, pol)
		switch {
		case err != nil:
			return w, err
		case w.reason == ReasonChoosing:
			// Crossplane calls again with what placement asks for; meanwhile it stays.
			w.host = left
			return w, nil
		case w.host == "":
			// Nowhere to go: it stays, serving, and says why.
			w.host, w.reason, w.message = left, ReasonEvacuationBlocked, evacuationBlocked(view, left, w.message)
			return w, nil
		}
		w.message = fmt.Sprintf("host %s %s: moving to host %s (the VM there takes over once Ready). %s", left, view.leave[left], w.host, w.message)
		w.left = left
		return w, nil
	}
	return place(req, spec, p, ns, pol)
}

// place chooses a host for the Proxy among the ClusterProviderConfigs Crossplane gave for the
// requirement (asked for in this response when not given yet).
func place(req *fnv1.RunFunctionRequest, spec ProxySpec, p Proxy, ns string, pol ppv1.ProxyPolicy) (where, error) {
	hosts, w, err := candidates(req, spec, p, ns, pol)
	if err != nil || w.reason == ReasonChoosing {
		return w, err
	}
	want := placement.Size{VCPUs: int64(p.VCPU), MemoryBytes: int64(p.MemoryMiB) << 20}
	d := placement.Place(hosts, want)
	if d.Host == "" {
		w.reason, w.message = ReasonNoHostFits, d.Why()
		if len(hosts) == 0 && len(w.selector) > 0 {
			w.message = "no host (ClusterProviderConfig) has the labels " + labels(w.selector)
		}
		return w, nil
	}
	w.host, w.reason = d.Host, ReasonPlaced
	w.message = fmt.Sprintf("placed on host %s: %d MiB of memory and %d vCPUs left there once placed (of %d hosts considered)", d.Host, d.Room.MemoryBytes>>20, d.Room.VCPUs, len(hosts))
	return w, nil
}

// candidates are the hosts a Proxy may be placed on, as placement sees them, each host the
// Proxy may not use marked Excluded with why; w carries the requirement to ask Crossplane for
// (selector, image, namespace), and reason ReasonChoosing while Crossplane has not given all
// of it yet.
func candidates(req *fnv1.RunFunctionRequest, spec ProxySpec, p Proxy, ns string, pol ppv1.ProxyPolicy) ([]placement.Host, where, error) { //nolint:gocyclo // one ordered list of what excludes a host
	sel, err := selector(spec.HostSelector, pol)
	if err != nil {
		return nil, where{}, err
	}
	w := where{selector: sel, image: p.BaseImageName, ns: ns}
	got, ok, err := request.GetRequiredResource(req, RequirementHosts)
	if err != nil {
		return nil, w, errors.Wrap(err, "cannot read the hosts (ClusterProviderConfigs) Crossplane gave")
	}
	imageHost, imageOK := "", true
	if p.BaseImageName != "" {
		var imgs []resource.Required
		imgs, imageOK, err = request.GetRequiredResource(req, RequirementBaseImage)
		if err != nil {
			return nil, w, errors.Wrap(err, "cannot read the BaseImage Crossplane gave")
		}
		imageHost = baseImageHost(imgs, ns)
	}
	if !ok || !imageOK {
		w.reason, w.message = ReasonChoosing, msgChoosing
		return nil, w, nil
	}
	var nsLabels map[string]string
	hosts := make([]placement.Host, 0, len(got))
	for _, r := range got {
		h, err := candidate(r.Resource.Object)
		if err != nil {
			return nil, w, err
		}
		if imageHost != "" && h.Name != imageHost {
			h.Excluded = fmt.Sprintf("BaseImage %s is on host %s", p.BaseImageName, imageHost)
		}
		hosts = append(hosts, h)
	}
	// A host that does not admit the Proxy's namespace (spec.allowedNamespaces) would refuse
	// everything composed there. A label selector needs the Namespace's labels: it is asked
	// for only then.
	attached := attachmentName(p.Network, p.Bridge)
	if needsNamespace(got, attached != "") {
		w.namespaceNeeded = true
		nss, ok, err := request.GetRequiredResource(req, RequirementNamespace)
		if err != nil {
			return nil, w, errors.Wrap(err, "cannot read the Namespace Crossplane gave")
		}
		if !ok {
			w.reason, w.message = ReasonChoosing, msgChoosing
			return nil, w, nil
		}
		for _, n := range nss {
			if n.Resource.GetName() == ns {
				nsLabels = n.Resource.GetLabels()
			}
		}
	}
	for i, r := range got {
		if hosts[i].Excluded != "" {
			continue
		}
		var c v1alpha1.ClusterProviderConfig
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.Resource.Object, &c); err != nil {
			return nil, w, errors.Wrap(err, "cannot read a ClusterProviderConfig Crossplane gave")
		}
		source, nsv := v1alpha1.ClusterProviderConfigKind+"/"+c.GetName(), hostgrants.Namespace{Name: ns, Labels: nsLabels}
		if err := hostgrants.Admit(source, c.Spec.AllowedNamespaces, nsv); err != nil {
			hosts[i].Excluded = "does not admit namespace " + ns + " (spec.allowedNamespaces)"
			continue
		}
		if attached == "" {
			continue
		}
		// The platform's default attachment: a host that does not grant it to the namespace
		// would refuse the KVMDomain.
		g, err := hostgrants.For(source, c.Spec, nsv, false)
		if err == nil {
			err = g.CheckAttachment(p.Network, p.Bridge)
		}
		if err != nil {
			hosts[i].Excluded = "does not grant " + attached + " (the platform's defaultAttachment) to namespace " + ns + " (spec.defaults, spec.attachments)"
		}
	}
	return hosts, w, nil
}

// baseImageHost is the ClusterProviderConfig the shared BaseImage uses: "" when it does not
// exist (yet; the domain waits for it wherever it goes) or uses a namespaced ProviderConfig
// (which Proxies do not use). Only a BaseImage of the Proxy's own namespace counts, whatever
// Crossplane gave: another namespace's must neither steer placement nor be named.
func baseImageHost(imgs []resource.Required, ns string) string {
	for _, i := range imgs {
		if i.Resource.GetNamespace() != ns {
			continue
		}
		kind, _, _ := unstructured.NestedString(i.Resource.Object, "spec", "providerConfigRef", "kind")
		name, _, _ := unstructured.NestedString(i.Resource.Object, "spec", "providerConfigRef", "name")
		if kind == v1alpha1.ClusterProviderConfigKind && name != "" {
			return name
		}
	}
	return ""
}

// composedHosts are the ClusterProviderConfigs the Proxy's composed resources name, each
// once, in the order of the resources' names (the legacy generation's first): where they
// live, whatever status says (it is lost when the Proxy is restored from a backup without
// status, say). A replica has two while it moves to another host.
//
// Replica r (above 0) is read from its own resources only (domain-r<r>-*, seed-r<r>-*).
func composedHosts(observed map[resource.Name]resource.ObservedComposed, replica int) []string {
	var names []resource.Name
	if replica == 0 {
		names = []resource.Name{ResourceDomain, ResourceSeed, ResourceBaseImage}
	}
	in := replicaInfix(replica)
	keys := make([]string, 0, len(observed))
	for k := range observed {
		id, ok := strings.CutPrefix(string(k), ResourceDomain+"-"+in)
		if !ok {
			id, ok = strings.CutPrefix(string(k), ResourceSeed+"-"+in)
		}
		if ok && len(id) == genIDLen {
			keys = append(keys, string(k))
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		names = append(names, resource.Name(k))
	}
	var hosts []string
	for _, n := range names {
		if o, ok := observed[n]; ok {
			if h, _ := o.Resource.GetString("spec.providerConfigRef.name"); h != "" && !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts
}

// evacuationBlocked says why a replica stays on the host left it leaves (because it evacuates
// or has not been Ready for long: hosts.leave): why no other host fits.
func evacuationBlocked(hosts hostView, left, why string) string {
	return fmt.Sprintf("host %s %s, but no other host fits: %s", left, hosts.leave[left], why)
}

// stay is the host a placed replica stays on, of hosts (where its generations are, then the
// one status recorded): the first it does not leave (view.leaves: evacuating, or not Ready for
// longer than the platform's failoverAfter; nothing is left while the hosts are not known, when
// the first is kept). left is the host it leaves when none is found ("" when it had none):
// then it is placed anew.
func stay(hosts []string, view hostView) (host, left string) {
	for _, h := range hosts {
		if !view.leaves(h) {
			return h, ""
		}
		if left == "" {
			left = h
		}
	}
	return "", left
}

// selector is the Proxy's hostSelector with the platform's: a host must have every label of
// both. A label both name with different values matches no host, and is refused.
func selector(proxy map[string]string, pol ppv1.ProxyPolicy) (map[string]string, error) {
	sel := map[string]string{}
	if pol.Placement != nil {
		for k, v := range pol.Placement.HostSelector {
			sel[k] = v
		}
	}
	for k, v := range proxy {
		if pv, ok := sel[k]; ok && pv != v {
			return nil, errors.Errorf("spec.hostSelector: %s=%s conflicts with the platform's placement, which selects hosts with %s=%s", k, v, k, pv)
		}
		sel[k] = v
	}
	return sel, nil
}

func labels(sel map[string]string) string {
	kv := make([]string, 0, len(sel))
	for k, v := range sel {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// candidate reads a ClusterProviderConfig as placement sees it: its Ready condition, cordon,
// allocation ratios, and the size and usage the provider's host status controller wrote.
func candidate(obj map[string]any) (placement.Host, error) {
	var c v1alpha1.ClusterProviderConfig
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &c); err != nil {
		return placement.Host{}, errors.Wrap(err, "cannot read a ClusterProviderConfig Crossplane gave")
	}
	return placement.HostOf(&c), nil
}

// requirements are the resources rsp asks Crossplane for, made when rsp has none yet.
func requirements(rsp *fnv1.RunFunctionResponse) map[string]*fnv1.ResourceSelector {
	if rsp.Requirements == nil {
		rsp.Requirements = &fnv1.Requirements{}
	}
	if rsp.Requirements.Resources == nil {
		rsp.Requirements.Resources = map[string]*fnv1.ResourceSelector{}
	}
	return rsp.Requirements.Resources
}

// require asks Crossplane for the hosts sel matches (every ClusterProviderConfig when sel is
// empty).
func require(rsp *fnv1.RunFunctionResponse, w where) {
	asked := requirements(rsp)
	asked[RequirementHosts] = &fnv1.ResourceSelector{
		ApiVersion: hostsAPIVersion,
		Kind:       v1alpha1.ClusterProviderConfigKind,
		Match:      &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: w.selector}},
	}
	if w.namespaceNeeded {
		asked[RequirementNamespace] = &fnv1.ResourceSelector{
			ApiVersion: "v1",
			Kind:       "Namespace",
			Match:      &fnv1.ResourceSelector_MatchName{MatchName: w.ns},
		}
	}
	if w.image != "" {
		ns := w.ns
		asked[RequirementBaseImage] = &fnv1.ResourceSelector{
			ApiVersion: hostsAPIVersion,
			Kind:       v1alpha1.BaseImageKind,
			Match:      &fnv1.ResourceSelector_MatchName{MatchName: w.image},
			Namespace:  &ns,
		}
	}
}
