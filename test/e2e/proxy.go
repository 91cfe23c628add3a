//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// watch polls every second until the XR (or claim) u is Ready, noting in the timeline when
// each composed resource becomes Ready, when the KVMDomain is defined and started and gets
// its address, when the Secret appears, and logging its phases. It fails after GUEST_TIMEOUT.
func (e *env) watch(ctx context.Context, u *unstructured.Unstructured, composite, label string, t0 time.Time) error {
	ns, seen, lastPhase := u.GetNamespace(), map[string]bool{}, ""
	e.tl.column(label)
	note := func(key, event string, at time.Time, detail string) {
		if seen[key] {
			return
		}
		seen[key] = true
		e.tl.add(label, event, secs(at.Sub(t0)))
		if detail != "" {
			detail = " (" + detail + ")"
		}
		logf("  %s +%ss: %s%s", label, secs(at.Sub(t0)), event, detail)
	}
	sel := client.MatchingLabels{"crossplane.io/composite": composite}
	scan := func(ctx context.Context, at time.Time) {
		svs := &v1alpha1.SeedVolumeList{}
		if e.c.List(ctx, svs, client.InNamespace(ns), sel) == nil {
			for i := range svs.Items {
				if svs.Items[i].GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue {
					note("SeedVolume/"+svs.Items[i].Name, evSeedReady, at, "")
				}
			}
		}
		bis := &v1alpha1.BaseImageList{}
		if e.c.List(ctx, bis, client.InNamespace(ns), sel) == nil {
			for i := range bis.Items {
				if bis.Items[i].GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue {
					note("BaseImage/"+bis.Items[i].Name, evBaseImageReady, at, "")
				}
			}
		}
		ds := &v1alpha1.KVMDomainList{}
		if e.c.List(ctx, ds, client.InNamespace(ns), sel) == nil {
			for i := range ds.Items {
				d := &ds.Items[i]
				// Defined and started on the host: the time crossplane-runtime recorded
				// (1 s resolution).
				if created := meta.GetExternalCreateSucceeded(d); !created.IsZero() {
					note("KVMDomain/"+d.Name+"/created", evStarted, created, "")
				}
				if ip := d.Status.AtProvider.IPv4; ip != "" {
					note("KVMDomain/"+d.Name+"/ip", evAddress, at, ip)
				}
				if d.GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue {
					note("KVMDomain/"+d.Name, evDomainReady, at, "")
				}
			}
		}
		ss := &corev1.SecretList{}
		if e.c.List(ctx, ss, client.InNamespace(ns), sel) == nil {
			for i := range ss.Items {
				note("Secret/"+ss.Items[i].Name, evSecret, at, ss.Items[i].Name)
			}
		}
	}
	var phase, synced string
	err := wait.PollUntilContextTimeout(ctx, time.Second, e.cfg.GuestTimeout-time.Since(t0), true, func(ctx context.Context) (bool, error) {
		at := time.Now()
		scan(ctx, at)
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			return false, nil //nolint:nilerr // not found yet or a passing API error: poll again
		}
		phase, _, _ = unstructured.NestedString(cur.Object, "status", "phase")
		synced = string(unstructuredCondition(cur, xpv2.TypeSynced).Status)
		if phase != "" && phase != lastPhase {
			why := ""
			if phase == "Error" {
				ds := &v1alpha1.KVMDomainList{}
				if e.c.List(ctx, ds, client.InNamespace(ns), sel) == nil && len(ds.Items) > 0 {
					why = ": KVMDomain " + truncate(ds.Items[0].GetCondition(xpv2.TypeSynced).Message, 160)
				}
			}
			logf("  %s +%ss: phase %s (Synced=%s)%s", label, secs(at.Sub(t0)), phase, orQ(synced), why)
			lastPhase = phase
		}
		if unstructuredCondition(cur, xpv2.TypeReady).Status != corev1.ConditionTrue {
			return false, nil
		}
		// The XR was read after the composed resources: a KVMDomain that became Ready in
		// between would otherwise be missing from the timeline.
		scan(ctx, at)
		note("xr", evProxyReady, at, fmt.Sprintf("%s %s/%s", cur.GetKind(), ns, u.GetName()))
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s is not Ready after %s (phase %s, Synced=%s)", label, e.cfg.GuestTimeout, orDefault(phase, "none"), orQ(synced))
	}
	return nil
}

// checkEndpoint: Secret ns/secret holds url, host, ip and port that agree with each other, with
// the status.url of obj (the Proxy or the claim) and with the Proxy's Service and EndpointSlice
// (named like the Secret): url is http://<service>.<ns>.svc:<port>, the EndpointSlice points at
// ip; and the proxy at ip:port forwards a request for the 204 origin (as curl -x does, from
// node, straight to the guest; the path through the Service's name and cluster IP is the
// application pods' of TestE2E's app-pods step, runAppPod).
func (e *env) checkEndpoint(ctx context.Context, label, ns, secret string, obj *unstructured.Unstructured) error {
	data, err := e.secretData(ctx, ns, secret)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	u, h, ip, p := string(data["url"]), string(data["host"]), string(data["ip"]), string(data["port"])
	if u == "" || h == "" || ip == "" || p == "" {
		return fmt.Errorf("%s: Secret %s/%s lacks url, host, ip or port (has %v)", label, ns, secret, sortedKeys(data))
	}
	if want := secret + "." + ns + ".svc"; h != want {
		return fmt.Errorf("%s: Secret %s/%s: host %s, want the Service's cluster DNS name %s", label, ns, secret, h, want)
	}
	if u != "http://"+h+":"+p {
		return fmt.Errorf("%s: Secret %s/%s: url %s does not match host %s and port %s", label, ns, secret, u, h, p)
	}
	// obj names the Proxy or claim; what it says is read now (a caller may pass a bare key).
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(obj.GroupVersionKind())
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	wantPort := int64(3128) // the Proxy API's default
	if v, ok, _ := unstructured.NestedInt64(cur.Object, "spec", "port"); ok {
		wantPort = v
	}
	if p != fmt.Sprint(wantPort) {
		return fmt.Errorf("%s: Secret %s/%s: port %s, want %d (spec.port)", label, ns, secret, p, wantPort)
	}
	if su, _, _ := unstructured.NestedString(cur.Object, "status", "url"); su != u {
		return fmt.Errorf("%s: status.url %q differs from the Secret's %s", label, su, u)
	}
	svc := &corev1.Service{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: secret}, svc); err != nil {
		return fmt.Errorf("%s: Service %s/%s: %w", label, ns, secret, err)
	}
	if len(svc.Spec.Selector) > 0 || len(svc.Spec.Ports) != 1 || fmt.Sprint(svc.Spec.Ports[0].Port) != p {
		return fmt.Errorf("%s: Service %s/%s: selector %v, ports %v; want no selector and port %s", label, ns, secret, svc.Spec.Selector, svc.Spec.Ports, p)
	}
	eps := &discoveryv1.EndpointSlice{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: secret}, eps); err != nil {
		return fmt.Errorf("%s: EndpointSlice %s/%s: %w", label, ns, secret, err)
	}
	if eps.Labels[discoveryv1.LabelServiceName] != secret || len(eps.Endpoints) != 1 || len(eps.Endpoints[0].Addresses) != 1 || eps.Endpoints[0].Addresses[0] != ip {
		return fmt.Errorf("%s: EndpointSlice %s/%s: labels %v, endpoints %v; want service %s and address %s", label, ns, secret, eps.Labels, eps.Endpoints, secret, ip)
	}
	direct := &url.URL{Scheme: "http", Host: ip + ":" + p}
	code, err := httpGet(ctx, direct, e.probeURL, 20*time.Second)
	if code != 204 {
		return fmt.Errorf("%s: GET %s through proxy %s answered %d (%v), want 204", label, e.probeURL, direct, code, err)
	}
	// The platform's destination rules (the shipped Compositions' ProxyPolicy): the metadata
	// address and a private network outside the allowed ranges get squid's 403 naming the rule.
	// A Proxy with its own allowedDomains (neither is among them) denies them by that rule first.
	denied := map[string]string{
		"http://169.254.169.254/latest/meta-data/": "ERR_PROXY_DST_LINK_LOCAL",
		"http://172.16.0.1:8080/":                  "ERR_PROXY_DST_PRIVATE",
	}
	if d, _, _ := unstructured.NestedStringSlice(cur.Object, "spec", "allowedDomains"); len(d) > 0 {
		for target := range denied {
			denied[target] = "ERR_PROXY_DOMAIN_NOT_ALLOWED"
		}
	}
	for target, page := range denied {
		code, xerr, err := httpGetSquidError(ctx, direct, target, 20*time.Second)
		if code != 403 || !strings.HasPrefix(xerr, page+" ") {
			return fmt.Errorf("%s: GET %s through proxy %s answered %d, X-Squid-Error %q (%v); want 403 and %s", label, target, direct, code, xerr, err, page)
		}
	}
	logf("  %s: Secret %s/%s url=%s ip=%s port=%s; Service (cluster IP %s) and EndpointSlice -> %s; GET %s through %s -> 204; the metadata address and 172.16.0.1 -> 403 naming the rule",
		label, ns, secret, u, ip, p, svc.Spec.ClusterIP, ip, e.probeURL, direct)
	return nil
}

// httpGetSquidError is httpGet through proxy that also returns squid's X-Squid-Error header.
func httpGetSquidError(ctx context.Context, proxy *url.URL, u string, timeout time.Duration) (int, string, error) {
	tr := &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyURL(proxy)}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Squid-Error"), nil
}

// composedLeft lists the managed resources and Secrets of XR composite still in the API.
func (e *env) composedLeft(ctx context.Context, ns, composite string) ([]string, error) {
	sel := client.MatchingLabels{"crossplane.io/composite": composite}
	var out []string
	for _, l := range []client.ObjectList{&v1alpha1.SeedVolumeList{}, &v1alpha1.KVMDomainList{}, &v1alpha1.BaseImageList{}, &corev1.SecretList{},
		&corev1.ServiceList{}, &discoveryv1.EndpointSliceList{}} {
		if err := e.c.List(ctx, l, client.InNamespace(ns), sel); err != nil {
			return nil, err
		}
		out = append(out, names(l)...)
	}
	return out, nil
}

// managedLeft lists the managed resources (of kinds) left in the namespaces.
func (e *env) managedLeft(ctx context.Context, namespaces []string, lists ...func() client.ObjectList) ([]string, error) {
	var out []string
	for _, ns := range namespaces {
		for _, mk := range lists {
			l := mk()
			if err := e.c.List(ctx, l, client.InNamespace(ns)); err != nil {
				return nil, err
			}
			out = append(out, names(l)...)
		}
	}
	return out, nil
}

// names are "Kind ns/name" of a list's items.
func names(l client.ObjectList) []string {
	var out []string
	switch l := l.(type) {
	case *v1alpha1.SeedVolumeList:
		for _, o := range l.Items {
			out = append(out, "SeedVolume "+o.Namespace+"/"+o.Name)
		}
	case *v1alpha1.KVMDomainList:
		for _, o := range l.Items {
			out = append(out, "KVMDomain "+o.Namespace+"/"+o.Name)
		}
	case *v1alpha1.BaseImageList:
		for _, o := range l.Items {
			out = append(out, "BaseImage "+o.Namespace+"/"+o.Name)
		}
	case *corev1.SecretList:
		for _, o := range l.Items {
			out = append(out, "Secret "+o.Namespace+"/"+o.Name)
		}
	case *unstructured.UnstructuredList:
		for _, o := range l.Items {
			out = append(out, o.GetKind()+" "+joinNS(o.GetNamespace(), o.GetName()))
		}
	}
	return out
}

func joinNS(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func seedVolumes() client.ObjectList { return &v1alpha1.SeedVolumeList{} }
func kvmDomains() client.ObjectList  { return &v1alpha1.KVMDomainList{} }
func baseImages() client.ObjectList  { return &v1alpha1.BaseImageList{} }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orQ(s string) string { return orDefault(s, "?") }

// checkPlacement: the Proxy's KVMDomain ns/name and its BaseImage ns/image use the
// ClusterProviderConfig of host hostName; its domain is defined on that host only, attached
// as that host's defaults say (its bridge); on a bridge the guest's address came
// from the guest agent (or ARP), there being no libvirt lease; the image's volume is on that
// host.
func (e *env) checkPlacement(ctx context.Context, ns, name, image, hostName string) error {
	label := ns + "/" + name
	hc, ok := e.cfg.host(hostName)
	h := e.hosts.Get(hostName)
	if !ok || h == nil {
		return fmt.Errorf("%s: no host %s in this topology", label, hostName)
	}
	d := &v1alpha1.KVMDomain{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	if ref := d.GetProviderConfigReference(); ref == nil || ref.Name != hostName {
		return fmt.Errorf("%s: KVMDomain's providerConfigRef %+v, want %s", label, ref, hostName)
	}
	at := d.Status.AtProvider
	if hc.Bridge != "" && at.IPSource != "agent" && at.IPSource != "arp" {
		return fmt.Errorf("%s: guest on bridge %s reports its address %s from %q, want the guest agent (or arp): a bridge has no libvirt lease", label, hc.Bridge, at.IPv4, at.IPSource)
	}
	domain := ns + "_" + name
	for _, o := range e.hosts {
		ds, err := o.Domains()
		if err != nil {
			return err
		}
		if ds[domain] != (o.Name == hostName) {
			return fmt.Errorf("%s: domain %s defined on host %s: %v (it belongs on %s only)", label, domain, o.Name, ds[domain], hostName)
		}
	}
	dom, err := h.DomainXML(domain)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	var attached []string
	if dom.Devices != nil {
		for _, i := range dom.Devices.Interfaces {
			switch {
			case i.Source != nil && i.Source.Bridge != nil:
				attached = append(attached, "bridge "+i.Source.Bridge.Bridge)
			case i.Source != nil && i.Source.Network != nil:
				attached = append(attached, "network "+i.Source.Network.Network)
			}
		}
	}
	want := "bridge " + hc.Bridge
	if len(attached) != 1 || attached[0] != want {
		return fmt.Errorf("%s: domain %s on %s is attached to %v, want %s", label, domain, hostName, attached, want)
	}
	if dom.Metadata == nil || !clusterIDElement.MatchString(dom.Metadata.XML) {
		return fmt.Errorf("%s: domain %s's ownership record does not name the provider's --cluster-id %s", label, domain, clusterID)
	}
	bi := &v1alpha1.BaseImage{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: image}, bi); err != nil {
		return fmt.Errorf("%s: BaseImage %s/%s: %w", label, ns, image, err)
	}
	if ref := bi.GetProviderConfigReference(); ref == nil || ref.Name != hostName {
		return fmt.Errorf("%s: BaseImage %s/%s's providerConfigRef %+v, want %s", label, ns, image, ref, hostName)
	}
	vol := bi.Status.AtProvider.VolumeName
	if left, err := e.hosts.Present([]object{{Host: hostName, Kind: "volume", Name: vol}}); err != nil || len(left) != 1 {
		return fmt.Errorf("%s: BaseImage %s/%s's volume %q is not on host %s (%v)", label, ns, image, vol, hostName, err)
	}
	logf("  %s: on host %s (%s), address %s from %s, base image %s cached on %s", label, hostName, want, at.IPv4, at.IPSource, vol, hostName)
	return nil
}

// clusterID is the provider's --cluster-id in the e2e (cluster/e2e/lib.sh sets it): the
// ownership record in each domain's metadata names it.
const clusterID = "e2e"

// clusterIDElement finds it in a domain's metadata (libvirt writes the element with our
// namespace's prefix).
var clusterIDElement = regexp.MustCompile(`<(\w+:)?clusterID>` + clusterID + `</(\w+:)?clusterID>`)
