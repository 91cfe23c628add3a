//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/placement"
)

// placementNS is where TestPlacement works. Its Proxies boot a BaseImage that does not exist,
// so they are placed and composed but never defined on a host: placement is what is tested,
// without downloads or boots, and the hosts' figures do not move under the test.
const placementNS = "team-place"

// TestPlacement (make e2e's bring-up, then `go test -tags e2e -run TestPlacement ./test/e2e/`):
// two Proxies without spec.host, created at once, land on the host with the most memory left
// (as the hosts' status tells it); once that host is cordoned a third lands on the other, and
// once it evacuates the first two move there (new generations, the old ones deleted); a
// Proxy whose memory fits nowhere composes nothing and says why (phase Pending, Placed=False
// NoHostFits naming each host). Needs two hosts (E2E_HOSTS); the cordon is lifted at the end.
func TestPlacement(t *testing.T) {
	e := requireEnv(t, ModeE2E)
	ctx := context.Background()
	keep, err := e.hosts.BaseVolumes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.finish(t, []string{placementNS}, keep) })
	if err := e.waitServers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.install(ctx); err != nil {
		t.Fatal(err)
	}
	hostA, hostB := e.cfg.hostNames()
	if hostA == hostB {
		t.Skip("placement needs two hosts")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: placementNS}}
	if err := e.c.Create(ctx, ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}

	// The host placement should choose, from the hosts' status as the function reads it.
	var first string
	if err := waitFor(ctx, "both hosts Ready with their figures", 2*time.Second, 120*time.Second, func(ctx context.Context) error {
		var hs []placement.Host
		for _, n := range []string{hostA, hostB} {
			h, err := e.placementHost(ctx, n)
			if err != nil {
				return err
			}
			if !h.Ready || h.Size.MemoryBytes == 0 {
				return fmt.Errorf("ClusterProviderConfig %s not Ready with figures yet", n)
			}
			hs = append(hs, h)
		}
		d := placement.Place(hs, placement.Size{VCPUs: 1, MemoryBytes: 256 << 20})
		if d.Host == "" {
			return fmt.Errorf("no host has room for a 256 MiB Proxy: %s", d.Why())
		}
		first = d.Host
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	other := hostB
	if first == hostB {
		other = hostA
	}
	logf("placement: %s has the most memory left; %s is the other", first, other)

	for _, n := range []string{"p1", "p2"} {
		if err := e.c.Create(ctx, placedProxy(n, 256)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"p1", "p2"} {
		if err := e.waitPlaced(ctx, n, first); err != nil {
			t.Fatal(err)
		}
	}

	// cordon sets the first host's spec.unschedulable and spec.evacuate, as kubectl patch does.
	cordon := func(on, evacuate bool) error {
		c := &v1alpha1.ClusterProviderConfig{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: first}, c); err != nil {
			return err
		}
		p := client.MergeFrom(c.DeepCopy())
		c.Spec.Unschedulable, c.Spec.Evacuate = on, evacuate
		return e.c.Patch(ctx, c, p)
	}
	if err := cordon(true, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cordon(false, false); err != nil {
			t.Errorf("uncordon %s: %v", first, err)
		}
	})
	if err := e.c.Create(ctx, placedProxy("p3", 256)); err != nil {
		t.Fatal(err)
	}
	if err := e.waitPlaced(ctx, "p3", other); err != nil {
		t.Fatal(err)
	}
	// p1 and p2 stay where they are: placement is sticky.
	for _, n := range []string{"p1", "p2"} {
		if err := e.waitPlaced(ctx, n, first); err != nil {
			t.Fatal(err)
		}
	}

	// Evacuating the cordoned host moves p1 and p2 to the other: placement chooses again, and
	// each gets a new generation there. Neither ever served (their image does not exist), so
	// nothing gates the switch: the generation on the evacuating host goes at once.
	t0 := time.Now()
	if err := cordon(true, true); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"p1", "p2"} {
		if err := e.waitEvacuated(ctx, n, first, other); err != nil {
			t.Fatal(err)
		}
	}
	logf("placement: %s evacuated: p1 and p2 moved to %s in %.1fs", first, other, time.Since(t0).Seconds())
	if err := cordon(true, false); err != nil {
		t.Fatal(err)
	}

	// A Proxy the platform's policy allows (4 GiB) that no host has room for: the first host is
	// cordoned, and the other's memory ratio is lowered to leave it 1 % of its memory.
	squeeze := func(memory *resource.Quantity) error {
		c := &v1alpha1.ClusterProviderConfig{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: other}, c); err != nil {
			return err
		}
		p := client.MergeFrom(c.DeepCopy())
		c.Spec.Allocation = nil
		if memory != nil {
			c.Spec.Allocation = &v1alpha1.AllocationRatios{Memory: memory}
		}
		return e.c.Patch(ctx, c, p)
	}
	small := resource.MustParse("0.01")
	if err := squeeze(&small); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := squeeze(nil); err != nil {
			t.Errorf("restore the memory ratio of %s: %v", other, err)
		}
	})
	if err := e.c.Create(ctx, placedProxy("huge", 4096)); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, "Proxy huge Pending with NoHostFits", 2*time.Second, 60*time.Second, func(ctx context.Context) error {
		xr := newUnstructured(gvkProxy, placementNS, "huge")
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
			return err
		}
		phase, _, _ := unstructured.NestedString(xr.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(xr.Object, "status", "message")
		c := unstructuredCondition(xr, "Placed")
		if phase != "Pending" || string(c.Reason) != "NoHostFits" || c.Status != corev1.ConditionFalse {
			return fmt.Errorf("phase %q, Placed %s/%s", phase, c.Status, c.Reason)
		}
		for _, n := range []string{hostA, hostB} {
			if !strings.Contains(msg, n+": ") || !strings.Contains(c.Message, n+": ") {
				return fmt.Errorf("status.message %q or the condition %q does not say why %s was skipped", msg, c.Message, n)
			}
		}
		if h, ok, _ := unstructured.NestedString(xr.Object, "status", "host"); ok {
			return fmt.Errorf("status.host = %q for a Proxy no host fits", h)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Nothing composed for it: no KVMDomain, SeedVolume or Service of that name.
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: placementNS, Name: "huge"}, &v1alpha1.KVMDomain{}); err == nil {
		t.Error("a Proxy no host fits composed a KVMDomain")
	}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: placementNS, Name: "huge-seed"}, &v1alpha1.SeedVolume{}); err == nil {
		t.Error("a Proxy no host fits composed a SeedVolume")
	}
}

// placedProxy is a Proxy without spec.host of memoryMiB, booting a BaseImage that does not
// exist (nothing is downloaded or booted).
func placedProxy(name string, memoryMiB int64) *unstructured.Unstructured {
	u := newUnstructured(gvkProxy, placementNS, name)
	u.Object["spec"] = map[string]any{
		"image":     map[string]any{"baseImageName": "no-such-image"},
		"memoryMiB": memoryMiB,
	}
	return u
}

// waitPlaced waits for Proxy name's status.host and its KVMDomain's host to be host.
func (e *env) waitPlaced(ctx context.Context, name, host string) error {
	return waitFor(ctx, "Proxy "+name+" placed on "+host, 2*time.Second, 90*time.Second, func(ctx context.Context) error {
		xr := newUnstructured(gvkProxy, placementNS, name)
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
			return err
		}
		got, _, _ := unstructured.NestedString(xr.Object, "status", "host")
		if got != host {
			return fmt.Errorf("status.host = %q, want %q", got, host)
		}
		d := &v1alpha1.KVMDomain{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: placementNS, Name: name}, d); err != nil {
			return err
		}
		if ref := d.Spec.ProviderConfigReference; ref == nil || ref.Name != host {
			return fmt.Errorf("KVMDomain %s is on %v, want %s", name, ref, host)
		}
		return nil
	})
}

// waitEvacuated waits for Proxy name to have moved from host from to host to: its status.host
// is to, the Placed condition True, and each of its KVMDomains (every generation's) on to.
func (e *env) waitEvacuated(ctx context.Context, name, from, to string) error {
	return waitFor(ctx, "Proxy "+name+" moved from "+from+" to "+to, 2*time.Second, 90*time.Second, func(ctx context.Context) error {
		xr := newUnstructured(gvkProxy, placementNS, name)
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(xr), xr); err != nil {
			return err
		}
		if got, _, _ := unstructured.NestedString(xr.Object, "status", "host"); got != to {
			c := unstructuredCondition(xr, "Placed")
			return fmt.Errorf("status.host = %q, want %q (Placed %s/%s: %s)", got, to, c.Status, c.Reason, c.Message)
		}
		ds := &v1alpha1.KVMDomainList{}
		if err := e.c.List(ctx, ds, client.InNamespace(placementNS), client.MatchingLabels{"crossplane.io/composite": name}); err != nil {
			return err
		}
		if len(ds.Items) == 0 {
			return fmt.Errorf("Proxy %s composes no KVMDomain", name)
		}
		for _, d := range ds.Items {
			if ref := d.Spec.ProviderConfigReference; ref == nil || ref.Name != to {
				return fmt.Errorf("KVMDomain %s is on %v, want %s", d.Name, ref, to)
			}
		}
		return nil
	})
}

// placementHost reads a ClusterProviderConfig as the function's placement does.
func (e *env) placementHost(ctx context.Context, name string) (placement.Host, error) {
	c := &v1alpha1.ClusterProviderConfig{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
		return placement.Host{}, err
	}
	return placement.HostOf(c), nil
}
