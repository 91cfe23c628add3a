//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// checkReplicas scales Proxy pc (on host home, caching its own image, and naming home in
// spec.host) to two replicas by setting spec.replicas: the second replica is placed apart on
// other (the platform's anti-affinity), with its own BaseImage there, and both are Ready and
// in the EndpointSlice (status 2/2, a 204 through each guest). It then scales the Proxy back
// to 1 with `kubectl scale proxy/NAME --replicas=1` (the scale subresource), as a user does: the
// second replica's KVMDomain, SeedVolume and BaseImage leave the API, its domain, overlay,
// seed and NVRAM leave its host, and replica 0 serves on as before. In between, home's libvirtd
// is stopped and started again (checkHostDown). One extra guest boot.
func (e *env) checkReplicas(ctx context.Context, pc proxyCase, home, other string) error {
	xr := pc.object()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
		return err
	}
	t0 := time.Now()
	patch := client.MergeFrom(xr.DeepCopy())
	if err := unstructured.SetNestedField(xr.Object, int64(2), "spec", "replicas"); err != nil {
		return err
	}
	if err := e.c.Patch(ctx, xr, patch); err != nil {
		return fmt.Errorf("%s: cannot set spec.replicas to 2: %w", pc.label(), err)
	}
	logf("  %s: spec.replicas 1 -> 2", pc.label())

	// Both replicas Ready: status 2/2, the Proxy Ready, its EndpointSlice with two Ready
	// addresses.
	var ips []string
	if err := waitFor(ctx, pc.label()+" at 2/2 replicas", 2*time.Second, e.cfg.GuestTimeout, func(ctx context.Context) error {
		cur := pc.object()
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			return err
		}
		n, _, _ := unstructured.NestedInt64(cur.Object, "status", "replicas")
		ready, _, _ := unstructured.NestedInt64(cur.Object, "status", "readyReplicas")
		phase, _, _ := unstructured.NestedString(cur.Object, "status", "phase")
		if n != 2 || ready != 2 || phase != "Ready" {
			msg, _, _ := unstructured.NestedString(cur.Object, "status", "message")
			return fmt.Errorf("replicas %d, readyReplicas %d, phase %s: %s (Placed: %s)", n, ready, phase, truncate(msg, 200),
				truncate(unstructuredCondition(cur, "Placed").Message, 200))
		}
		if c := unstructuredCondition(cur, "ProxyReady"); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("ProxyReady %s: %s", c.Status, c.Message)
		}
		eps := &discoveryv1.EndpointSlice{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: pc.ns, Name: pc.name + "-proxy"}, eps); err != nil {
			return err
		}
		ips = nil
		for _, ep := range eps.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				ips = append(ips, ep.Addresses...)
			}
		}
		if len(ips) != 2 {
			return fmt.Errorf("the EndpointSlice lists %d Ready addresses (%v), want 2", len(ips), ips)
		}
		return nil
	}); err != nil {
		return err
	}
	e.tl.add("replicas "+pc.name, "spec.replicas 1 -> 2: both Ready, in the EndpointSlice", secs(time.Since(t0)))

	// One VM on each host: replica 0 (<name>) stays on home, replica 1 (<name>-r1-<id>) on
	// other, booting a BaseImage of its own there.
	r1, err := e.replicaDomain(ctx, pc, 1)
	if err != nil {
		return err
	}
	if err := e.checkPlacementOwnImage(ctx, pc.ns, pc.name, home); err != nil {
		return err
	}
	if err := e.checkPlacement(ctx, pc.ns, r1.Name, imageOf(r1, ""), other); err != nil {
		return err
	}
	port, _, _ := unstructured.NestedInt64(xr.Object, "spec", "port")
	if port == 0 {
		port = 3128
	}
	for _, ip := range ips {
		direct := &url.URL{Scheme: "http", Host: fmt.Sprintf("%s:%d", ip, port)}
		if code, err := httpGet(ctx, direct, e.probeURL, 20*time.Second); code != 204 {
			return fmt.Errorf("%s: GET %s through replica %s answered %d (%v), want 204", pc.label(), e.probeURL, direct, code, err)
		}
	}
	logf("  %s: 2/2 replicas, %s on %s and %s on %s, both in the EndpointSlice (%s) and answering 204",
		pc.label(), pc.name, home, r1.Name, other, strings.Join(ips, ", "))
	if err := e.checkHostDown(ctx, pc, home); err != nil {
		return err
	}
	onHost, err := e.hosts.DomainObjects(pc.ns + "_" + r1.Name)
	if err != nil {
		return err
	}
	r1Image := imageOf(r1, "")

	// The scale subresource, read and written with kubectl as a user does.
	t1 := time.Now()
	got, err := e.kubectl(ctx, "-n", pc.ns, "get", "proxy/"+pc.name, "--subresource=scale", "-o", "jsonpath={.spec.replicas}/{.status.replicas}")
	if err != nil {
		return fmt.Errorf("%s: cannot read the scale subresource: %w", pc.label(), err)
	}
	if got != "2/2" {
		return fmt.Errorf("%s: the scale subresource says spec.replicas/status.replicas %s, want 2/2", pc.label(), got)
	}
	if _, err := e.kubectl(ctx, "-n", pc.ns, "scale", "proxy/"+pc.name, "--replicas=1"); err != nil {
		return fmt.Errorf("%s: kubectl scale --replicas=1: %w", pc.label(), err)
	}
	logf("  %s: kubectl scale proxy/%s --replicas=1", pc.label(), pc.name)
	if err := waitFor(ctx, pc.label()+"'s second replica to be gone", 2*time.Second, e.cfg.DeleteTimeout, func(ctx context.Context) error {
		var left []string
		for _, o := range []client.Object{&v1alpha1.KVMDomain{}, &v1alpha1.SeedVolume{}, &v1alpha1.BaseImage{}} {
			name := r1.Name
			switch o.(type) {
			case *v1alpha1.SeedVolume:
				name = r1.Spec.ForProvider.SeedVolumeRef.Name
			case *v1alpha1.BaseImage:
				name = r1Image
			}
			err := e.c.Get(ctx, client.ObjectKey{Namespace: pc.ns, Name: name}, o)
			switch {
			case kerrors.IsNotFound(err):
			case err != nil:
				return err
			default:
				left = append(left, fmt.Sprintf("%T %s", o, name))
			}
		}
		present, err := e.hosts.Present(onHost)
		if err != nil {
			return err
		}
		if len(left) > 0 || len(present) > 0 {
			return fmt.Errorf("still in the API: %v; still on %s: %s", left, other, objectList(present))
		}
		cur := pc.object()
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			return err
		}
		n, _, _ := unstructured.NestedInt64(cur.Object, "status", "replicas")
		ready, _, _ := unstructured.NestedInt64(cur.Object, "status", "readyReplicas")
		if n != 1 || ready != 1 {
			return fmt.Errorf("status replicas %d, readyReplicas %d, want 1 and 1", n, ready)
		}
		return nil
	}); err != nil {
		return err
	}
	e.tl.add("replicas "+pc.name, "scaled to 1 -> the second VM, its seed and image gone from its host", secs(time.Since(t1)))
	logf("  %s: replica 1's domain, overlay, seed and NVRAM gone from %s; its KVMDomain, SeedVolume and BaseImage gone", pc.label(), other)
	return e.checkEndpoint(ctx, pc.label(), pc.ns, pc.name+"-proxy", pc.object())
}

// kubectl runs kubectl as admin on the node's cluster (cluster/node/kubectl.sh) and returns
// its output; an error carries what it printed.
func (e *env) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.Repo, "cluster", "node", "kubectl.sh"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// replicaDomain is the one KVMDomain of replica r (above 0) of pc: <name>-r<r>-<generation>.
func (e *env) replicaDomain(ctx context.Context, pc proxyCase, r int) (*v1alpha1.KVMDomain, error) {
	ds := &v1alpha1.KVMDomainList{}
	if err := e.c.List(ctx, ds, client.InNamespace(pc.ns)); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("%s-r%d-", pc.name, r)
	var found []*v1alpha1.KVMDomain
	var names []string
	for i := range ds.Items {
		if strings.HasPrefix(ds.Items[i].Name, prefix) {
			found = append(found, &ds.Items[i])
			names = append(names, ds.Items[i].Name)
		}
	}
	sort.Strings(names)
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: %d KVMDomains of replica %d (%v), want 1", pc.label(), len(found), r, names)
	}
	d := found[0]
	if d.GetCondition(xpv2.TypeReady).Status != corev1.ConditionTrue {
		return nil, fmt.Errorf("%s: KVMDomain %s is not Ready", pc.label(), d.Name)
	}
	if d.Spec.ForProvider.SeedVolumeRef == nil || d.Spec.ForProvider.BaseImageRef == nil {
		return nil, errors.New(pc.label() + ": KVMDomain " + d.Name + " names no seed or image")
	}
	return d, nil
}

// imageOf is the BaseImage domain d boots, or def when d names none.
func imageOf(d *v1alpha1.KVMDomain, def string) string {
	if d.Spec.ForProvider.BaseImageRef != nil && d.Spec.ForProvider.BaseImageRef.Name != "" {
		return d.Spec.ForProvider.BaseImageRef.Name
	}
	return def
}

// checkPlacementOwnImage is checkPlacement for KVMDomain ns/name with the BaseImage it boots.
func (e *env) checkPlacementOwnImage(ctx context.Context, ns, name, host string) error {
	d := &v1alpha1.KVMDomain{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		return err
	}
	return e.checkPlacement(ctx, ns, name, imageOf(d, ""), host)
}

// checkHostDown stops the libvirtd of host, where one of pc's two Ready replicas runs (its
// guest keeps running), while an application pod sends a request through the Proxy every
// 0.5 s (podProber: HTTP_PROXY from the Proxy's Secret, the Service by its cluster DNS name).
// The provider cannot read host any more: the Proxy stays Ready at 1 of 2 replicas, and its
// EndpointSlice lists only the other replica, since what the VM on host does is no longer
// known. With libvirtd started again: 2 of 2, both in the EndpointSlice. At most one request
// may fail (one in flight when an address leaves), and the Proxy's ProxyReady may never be
// False.
func (e *env) checkHostDown(ctx context.Context, pc proxyCase, host string) error {
	hc, ok := e.cfg.host(host)
	if !ok || hc.LAN == "" {
		return fmt.Errorf("%s: ClusterProviderConfig %s is no host of the LAN bed", pc.label(), host)
	}
	key := client.ObjectKey{Namespace: pc.ns, Name: pc.name + "-proxy"}
	onHost, err := e.replicaIPOn(ctx, pc, host)
	if err != nil {
		return err
	}
	p, err := e.startPodProber(ctx, pc.ns, pc.name+"-prober", pc.name)
	if err != nil {
		return fmt.Errorf("%s: %w", pc.label(), err)
	}
	stopped, started := false, false
	defer func() {
		if !stopped {
			_, _ = p.stop(context.WithoutCancel(ctx), e)
		}
		if !started {
			_ = e.lanCtl(context.WithoutCancel(ctx), hc.LAN, "start-libvirtd")
		}
	}()
	var dips []string // every time ProxyReady was seen not True
	state := func(ctx context.Context, wantReady int64, wantIPs int) error {
		cur := pc.object()
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			return err
		}
		if c := unstructuredCondition(cur, "ProxyReady"); c.Status != corev1.ConditionTrue {
			dips = append(dips, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05"), c.Status, truncate(c.Message, 160)))
		}
		n, _, _ := unstructured.NestedInt64(cur.Object, "status", "replicas")
		ready, _, _ := unstructured.NestedInt64(cur.Object, "status", "readyReplicas")
		msg, _, _ := unstructured.NestedString(cur.Object, "status", "message")
		if n != 2 || ready != wantReady {
			return fmt.Errorf("replicas %d, readyReplicas %d, want 2 and %d: %s", n, ready, wantReady, truncate(msg, 200))
		}
		eps := &discoveryv1.EndpointSlice{}
		if err := e.c.Get(ctx, key, eps); err != nil {
			return err
		}
		var ips []string
		for _, ep := range eps.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				ips = append(ips, ep.Addresses...)
			}
		}
		if len(ips) != wantIPs || (wantIPs == 1 && ips[0] == onHost) {
			return fmt.Errorf("the EndpointSlice lists %v Ready, want %d address(es)%s", ips, wantIPs, map[bool]string{true: " without " + onHost}[wantIPs == 1])
		}
		return nil
	}
	time.Sleep(2 * time.Second) // a few requests before
	t0 := time.Now()
	if err := e.lanCtl(ctx, hc.LAN, "stop-libvirtd"); err != nil {
		return err
	}
	logf("  %s: %s's libvirtd stopped (its guest %s keeps running); pod %s/%s sends a request through the Proxy every %s", pc.label(), hc.LAN, onHost, p.ns, p.name, podProberEvery)
	// The host status calls a host not Ready after its retries (about 2 minutes), and the Proxy
	// is composed again within Crossplane's poll.
	if err := waitFor(ctx, pc.label()+" at 1 of 2 with "+host+" not Ready", time.Second, 6*time.Minute, func(ctx context.Context) error {
		return state(ctx, 1, 1)
	}); err != nil {
		return err
	}
	down := time.Since(t0)
	e.tl.add("replicas "+pc.name, host+"'s libvirtd stopped -> 1/2 Ready, its replica out of the EndpointSlice", secs(down))
	time.Sleep(5 * time.Second) // requests go to the other replica alone
	t1 := time.Now()
	started = true
	if err := e.lanCtl(ctx, hc.LAN, "start-libvirtd"); err != nil {
		return err
	}
	if err := waitFor(ctx, pc.label()+" back at 2 of 2", time.Second, 6*time.Minute, func(ctx context.Context) error {
		return state(ctx, 2, 2)
	}); err != nil {
		return err
	}
	back := time.Since(t1)
	e.tl.add("replicas "+pc.name, host+"'s libvirtd started -> 2/2, both in the EndpointSlice", secs(back))
	time.Sleep(2 * time.Second)
	stopped = true
	r, err := p.stop(ctx, e)
	if err != nil {
		return fmt.Errorf("%s: %w", pc.label(), err)
	}
	okN, failures := r.ok, r.failures
	if len(failures) > 1 {
		return fmt.Errorf("%s: %d requests through the Service failed while %s's libvirtd was down and back (at most 1 may): %s",
			pc.label(), len(failures), hc.LAN, strings.Join(failures, "; "))
	}
	if len(dips) > 0 {
		return fmt.Errorf("%s: ProxyReady was not True while one replica served: %s", pc.label(), strings.Join(dips, "; "))
	}
	if okN == 0 {
		return fmt.Errorf("%s: no request through the Service answered", pc.label())
	}
	logf("  %s: 1 of 2 Ready %s after %s's libvirtd stopped, 2 of 2 %s after it started; %d requests of pod %s/%s through the Proxy answered 204, %d failed; ProxyReady True throughout",
		pc.label(), secs(down)+" s", hc.LAN, secs(back)+" s", okN, p.ns, p.name, len(failures))
	return nil
}

// replicaIPOn is the address of pc's serving generation on host, from status.generations.
func (e *env) replicaIPOn(ctx context.Context, pc proxyCase, host string) (string, error) {
	cur := pc.object()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
		return "", err
	}
	gens, _, _ := unstructured.NestedSlice(cur.Object, "status", "generations")
	for _, g := range gens {
		m, _ := g.(map[string]any)
		if m["host"] == host && m["serving"] == true {
			if ip, _ := m["ip"].(string); ip != "" {
				return ip, nil
			}
		}
	}
	return "", fmt.Errorf("%s: status.generations names no serving generation with an address on %s: %v", pc.label(), host, gens)
}

// lanCtl runs cluster/lan/ctl.sh HOST ACTION (stop-libvirtd, start-libvirtd): make e2e holds
// the LAN bed's lock for the whole run.
func (e *env) lanCtl(ctx context.Context, host, action string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.Repo, "cluster", "lan", "ctl.sh"), host, action)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cluster/lan/ctl.sh %s %s: %w: %s", host, action, err, strings.TrimSpace(string(out)))
	}
	return nil
}
