//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/function"
)

// rolloutCIDR is the network the roll-out step adds to a Proxy's allowedCIDRs: inside the
// platform's clientCIDRs, used by nobody, so only the squid configuration changes.
const rolloutCIDR = "10.99.0.0/16"

// prober sends a request through the proxy every 0.5 s, to the address and port the Proxy's
// Secret names at that moment (what a client that follows the Secret uses), and counts the
// answers that are not the origin's 204.
type prober struct {
	mu       sync.Mutex
	ok       int
	failures []string
	ips      map[string]int // requests answered, by guest address
}

func (e *env) startProber(ctx context.Context, ns, secret string) (*prober, func()) {
	return e.startProberTo(ctx, func(ctx context.Context) (string, error) {
		data, err := e.secretData(ctx, ns, secret)
		if err != nil {
			return "", err
		}
		return string(data["ip"]) + ":" + string(data["port"]), nil
	})
}

// startProberTo is a prober whose every request goes through the proxy at the address target
// returns at that moment.
func (e *env) startProberTo(ctx context.Context, target func(context.Context) (string, error)) (*prober, func()) {
	p := &prober{ips: map[string]int{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case at := <-tick.C:
				addr, err := target(ctx)
				if ctx.Err() != nil {
					return
				}
				var code int
				ip, _, _ := strings.Cut(addr, ":")
				if err == nil {
					code, err = httpGet(ctx, &url.URL{Scheme: "http", Host: addr}, e.probeURL, 5*time.Second)
				}
				if ctx.Err() != nil {
					return
				}
				p.mu.Lock()
				if code == 204 {
					p.ok++
					p.ips[ip]++
				} else {
					p.failures = append(p.failures, fmt.Sprintf("%s via %s: %d (%v)", at.Format("15:04:05.0"), ip, code, err))
				}
				p.mu.Unlock()
			}
		}
	}()
	return p, func() { cancel(); <-done }
}

// checkRollout edits Proxy pc's allowedCIDRs while a prober sends a request through it every
// 0.5 s, and checks the replacement: the Proxy goes Updating with two generations, ends on a
// new generation (status.generation, KVMDomain <name>-<id>) that serves (checkEndpoint: Secret,
// Service, EndpointSlice on the new VM, a 204 through it, the destination rules), the prober
// saw no failed request, and the old VM's domain, overlay and seed are gone from its host.
// oldObjs are the old VM's objects on its host.
func (e *env) checkRollout(ctx context.Context, pc proxyCase, oldObjs []object) error {
	xr := pc.object()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
		return err
	}
	oldGen, _, _ := unstructured.NestedString(xr.Object, "status", "generation")
	if oldGen == "" {
		return fmt.Errorf("%s: no status.generation before the edit", pc.label())
	}
	cidrs, _, _ := unstructured.NestedStringSlice(xr.Object, "spec", "allowedCIDRs")
	if len(cidrs) == 0 {
		cidrs = append(cidrs, function.DefaultAllowedCIDRs...)
	}
	secret := pc.name + "-proxy"
	p, stop := e.startProber(ctx, pc.ns, secret)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	time.Sleep(2 * time.Second) // a few requests before the edit
	t0 := time.Now()
	patch := client.MergeFrom(xr.DeepCopy())
	if err := unstructured.SetNestedStringSlice(xr.Object, append(cidrs, rolloutCIDR), "spec", "allowedCIDRs"); err != nil {
		return err
	}
	if err := e.c.Patch(ctx, xr, patch); err != nil {
		return fmt.Errorf("%s: cannot edit allowedCIDRs: %w", pc.label(), err)
	}
	logf("  %s: allowedCIDRs += %s; a request through it every 0.5 s meanwhile", pc.label(), rolloutCIDR)

	var updating, newGen string
	sawTwo := false
	if err := waitFor(ctx, pc.label()+" replaced by a new generation", time.Second, 10*time.Minute, func(ctx context.Context) error {
		cur := pc.object()
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			return err
		}
		phase, _, _ := unstructured.NestedString(cur.Object, "status", "phase")
		gen, _, _ := unstructured.NestedString(cur.Object, "status", "generation")
		gens, _, _ := unstructured.NestedSlice(cur.Object, "status", "generations")
		if phase == "Updating" && updating == "" {
			updating = secs(time.Since(t0))
			e.tl.add("rollout "+pc.name, "allowedCIDRs edited -> Updating (two generations)", updating)
		}
		if len(gens) == 2 {
			sawTwo = true
		}
		if fg, ok, _ := unstructured.NestedMap(cur.Object, "status", "failedGeneration"); ok {
			return fmt.Errorf("the new generation failed: %v", fg["message"])
		}
		if gen == oldGen || len(gens) != 1 || phase != "Ready" {
			msg, _, _ := unstructured.NestedString(cur.Object, "status", "message")
			return fmt.Errorf("phase %s, generation %s, %d generations: %s", phase, gen, len(gens), truncate(msg, 200))
		}
		newGen = gen
		return nil
	}); err != nil {
		return err
	}
	e.tl.add("rollout "+pc.name, "allowedCIDRs edited -> new generation serves, old one out of the Proxy", secs(time.Since(t0)))
	if !sawTwo || updating == "" {
		return fmt.Errorf("%s: the replacement never showed Updating with two generations (updating after %q)", pc.label(), updating)
	}
	d := &v1alpha1.KVMDomain{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: pc.ns, Name: pc.name + "-" + newGen}, d); err != nil {
		return fmt.Errorf("%s: the new generation's KVMDomain %s-%s: %w", pc.label(), pc.name, newGen, err)
	}
	if err := e.checkEndpoint(ctx, pc.label(), pc.ns, secret, xr); err != nil {
		return err
	}
	if err := waitFor(ctx, "the old VM of "+pc.label()+" gone from its host", 2*time.Second, e.cfg.DeleteTimeout, func(context.Context) error {
		left, err := e.hosts.Present(oldObjs)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", objectList(left))
		}
		return err
	}); err != nil {
		return err
	}
	e.tl.add("rollout "+pc.name, "allowedCIDRs edited -> old VM gone from its host", secs(time.Since(t0)))
	time.Sleep(2 * time.Second) // a few requests after
	stop()
	stopped = true
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failures) > 0 {
		return fmt.Errorf("%s: %d of %d requests through the proxy failed during the roll-out: %s", pc.label(), len(p.failures), len(p.failures)+p.ok, strings.Join(p.failures, "; "))
	}
	if len(p.ips) < 2 {
		return fmt.Errorf("%s: the prober's requests were answered by %v only; want the old VM, then the new one", pc.label(), p.ips)
	}
	logf("  %s: generation %s replaced %s in %ss; %d requests through it, none failed (by VM: %v)", pc.label(), newGen, oldGen, secs(time.Since(t0)), p.ok, p.ips)
	return nil
}
