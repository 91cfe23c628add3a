package hoststatus

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostconfig"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
)

// TestStatusOnAPIServer writes the status of a ClusterProviderConfig and a ProviderConfig to a
// real API server (the CRDs' schema: quantities, the pools list map, the printer columns'
// fields) and reads it back, from a fake host; no libvirt host is needed.
func TestStatusOnAPIServer(t *testing.T) {
	env := controlplane.Start(t)
	ctx := context.Background()
	env.Namespace(t, "kvm")
	env.Namespace(t, "team-a")
	for _, ns := range []string{"kvm", "team-a"} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key"},
			Data: map[string][]byte{"id": []byte(secretBytes), "known_hosts": []byte("h ssh-ed25519 AAAA")}}
		if err := env.Client.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, cpc(true)); err != nil {
		t.Fatal(err)
	}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "own"}, Spec: cpc(false).Spec}
	pc.Spec.Credentials.SecretRef.Namespace, pc.Spec.KnownHosts.SecretRef.Namespace = "", ""
	if err := env.Client.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}

	r := func(o ops, connErr error) *Reconciler {
		return &Reconciler{kube: env.Client, api: env.Client, ops: o, conns: &fakeConns{err: connErr}, memo: NewMemo(time.Now, DefaultRecheck),
			record: &recorder{}, log: logging.NewNopLogger(), poll: time.Minute, unreadyPoll: 15 * time.Second, timeout: time.Minute,
			host: func(*host.Conn, *hostconfig.Resolved) Host { return newFakeHost() }}
	}
	if _, err := r(cpcOps, nil).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "a"}}); err != nil {
		t.Fatalf("Reconcile(ClusterProviderConfig): %v", err)
	}
	got := &v1alpha1.ClusterProviderConfig{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: "a"}, got); err != nil {
		t.Fatal(err)
	}
	h := got.Status.Host
	if h == nil || got.Status.GetCondition(xpv2.TypeReady).Status != corev1.ConditionTrue || !got.Status.Unschedulable {
		t.Fatalf("status after a read: %+v", got.Status)
	}
	g := []any{h.Address, h.CPUs, h.MemoryFree.Value(), h.Managed.Domains, h.Managed.VolumeBytes.Value(), len(h.Pools), h.Pools[0].Available.Value()}
	want := []any{"root@h:22", int32(8), int64(6 << 30), int32(2), int64(2*4096 + 8192 + 3*4096), 1, int64(60 << 30)}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("status read back: -want, +got:\n%s", diff)
	}

	mismatch := &host.HostKeyError{Reason: host.HostKeyMismatch, Host: "h", Presented: "ssh-ed25519 SHA256:AAA", Known: []string{"ssh-ed25519 SHA256:BBB"}}
	if _, err := r(pcOps, mismatch).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "own"}}); err != nil {
		t.Fatalf("Reconcile(ProviderConfig): %v", err)
	}
	gotPC := &v1alpha1.ProviderConfig{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "own"}, gotPC); err != nil {
		t.Fatal(err)
	}
	c := gotPC.Status.GetCondition(xpv2.TypeReady)
	if c.Status != corev1.ConditionFalse || c.Reason != ReasonHostKeyMismatch || gotPC.Status.Host == nil || gotPC.Status.Host.Address != "root@h:22" {
		t.Errorf("ProviderConfig status after a host key mismatch: %+v", gotPC.Status)
	}
}
