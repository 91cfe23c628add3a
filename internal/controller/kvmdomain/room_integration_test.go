package kvmdomain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/placement"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// TestRoomGuardOnRealHost: two KVMDomains defined at once on the test bed's libvirtd, whose
// memory ratio is set so that the host has room for one of them beyond what the provider's
// domains already hold there: one is defined, the other refused as host full. The domains are
// defined, never started (the check is at definition), and undefined at the end.
func TestRoomGuardOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	lv := libvirt.New(tb.Connect(t), libvirt.NewShared())
	ctx := context.Background()
	node, err := lv.NodeInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := lv.DomainDefinitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	used, err := ourUsage(defs, "")
	if err != nil {
		t.Fatal(err)
	}
	const wantMiB = 128
	// Room for 1.5 domains of wantMiB: one fits, two do not.
	ratio := float64(used.MemoryBytes+wantMiB*3/2<<20) / float64(node.MemoryBytes)
	mem := resource.MustParse(fmt.Sprintf("%.12f", ratio))
	cpu := resource.MustParse("1000")
	e := &external{lv: lv, recorder: event.NewNopRecorder(), defines: newHostLocks(), host: "testbed", source: "ClusterProviderConfig/testbed",
		allocation: &v1alpha1.AllocationRatios{CPU: &cpu, Memory: &mem}}

	names := []string{"room-race-0", "room-race-1"}
	for _, n := range names {
		t.Cleanup(func() { _ = lv.UndefineDomain(context.Background(), n) })
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		uid := fmt.Sprintf("room-race-uid-%d", i)
		cr := kvm(func(d *v1alpha1.KVMDomain) {
			d.SetUID(types.UID(uid))
			d.SetName(n)
			d.Spec.ForProvider.MemoryMiB = wantMiB
		})
		x := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>%d</memory><vcpu>1</vcpu>`+
			`<os><type arch='x86_64'>hvm</type></os>`+
			`<metadata><pk:owner xmlns:pk='%s'><managedBy>%s</managedBy><uid>%s</uid><namespace>team-a</namespace><name>%s</name></pk:owner></metadata>`+
			`<devices><interface type='network'><mac address='%s'/><source network='default'/></interface></devices></domain>`,
			n, wantMiB, domainxml.Namespace, domainxml.ManagedBy, uid, n, domainxml.MAC(uid))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.define(ctx, cr, x)
		}()
	}
	wg.Wait()
	var defined, refused int
	for _, err := range errs {
		switch {
		case err == nil:
			defined++
		case strings.HasPrefix(err.Error(), placement.ErrHostFull+": "):
			refused++
			t.Logf("refused: %v", err)
		default:
			t.Errorf("define(): %v", err)
		}
	}
	if defined != 1 || refused != 1 {
		t.Errorf("two domains on a host with room for one: %d defined, %d refused; want 1 and 1", defined, refused)
	}
}
