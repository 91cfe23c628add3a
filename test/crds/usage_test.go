package crds

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/providerconfig"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
)

// TestConfigInUseCannotBeDeleted: while a managed resource's ProviderConfigUsage exists,
// deleting its ProviderConfig or ClusterProviderConfig is held by a finalizer with an InUse
// condition; once the usage is gone, the deletion completes.
func TestConfigInUseCannotBeDeleted(t *testing.T) {
	(&controlplane.Env{Config: cfg, Client: kube, Scheme: scheme}).Run(t, time.Second, config.Setup)
	ensureNamespace(t, "usage")

	spec := v1alpha1.ProviderConfigSpec{
		Transport: v1alpha1.TransportUnix, LibvirtSocket: "/var/run/libvirt/libvirt-sock",
		URI: "qemu:///system", Port: 22, User: "root",
		Defaults: v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeKVM, Pool: "default", Network: "default"},
	}
	// A namespaced ProviderConfig cannot use transport Unix: it reaches a host over SSH.
	ssh := spec
	ssh.Transport, ssh.Host = v1alpha1.TransportSSH, "10.0.0.5"
	ssh.Credentials = &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Name: "ssh", Key: "key"}}
	ssh.KnownHosts = &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Name: "ssh", Key: "known_hosts"}}
	cases := map[string]client.Object{
		v1alpha1.ClusterProviderConfigKind: &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "in-use"}, Spec: spec},
		v1alpha1.ProviderConfigKind:        &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "usage", Name: "in-use"}, Spec: ssh},
	}
	for kind, pc := range cases {
		t.Run(kind, func(t *testing.T) {
			ctx := testContext(t)
			if err := kube.Create(ctx, pc); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(pc)

			// A managed resource that uses it, tracked exactly as a managed resource
			// controller's Connect does before it talks to the host.
			mg := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "usage", Name: "uses-" + strings.ToLower(kind)}}
			mg.SetProviderConfigReference(&xpv2.ProviderConfigReference{Kind: kind, Name: "in-use"})
			if err := kube.Create(ctx, mg); err != nil {
				t.Fatal(err)
			}
			mg.SetGroupVersionKind(v1alpha1.KVMDomainGroupVersionKind)
			tracker := resource.NewProviderConfigUsageTracker(kube, &v1alpha1.ProviderConfigUsage{})
			if err := tracker.Track(ctx, mg); err != nil {
				t.Fatalf("track usage: %v", err)
			}

			controlplane.Eventually(t, 30*time.Second, "finalizer and users=1", func() error {
				got := pc.DeepCopyObject().(resource.ProviderConfig)
				if err := kube.Get(ctx, key, got); err != nil {
					return err
				}
				if len(got.GetFinalizers()) == 0 || got.GetUsers() != 1 {
					return errorf("finalizers=%v users=%d", got.GetFinalizers(), got.GetUsers())
				}
				return nil
			})

			if err := kube.Delete(ctx, pc); err != nil {
				t.Fatal(err)
			}
			controlplane.Eventually(t, 30*time.Second, "deletion held with an InUse condition", func() error {
				got := pc.DeepCopyObject().(resource.ProviderConfig)
				if err := kube.Get(ctx, key, got); err != nil {
					return err
				}
				if got.GetDeletionTimestamp() == nil {
					return errorf("no deletion timestamp yet")
				}
				if c := got.GetCondition(providerconfig.TypeTerminating); c.Reason != providerconfig.ReasonInUse {
					return errorf("Terminating condition reason %q, want InUse", c.Reason)
				}
				return nil
			})
			// Still there a while later: the finalizer holds it.
			time.Sleep(time.Second)
			if err := kube.Get(ctx, key, pc.DeepCopyObject().(client.Object)); err != nil {
				t.Fatalf("config vanished while in use: %v", err)
			}

			// The usage goes when the managed resource goes (garbage collection of its
			// owner reference; envtest runs no garbage collector, so delete it here).
			if err := kube.Delete(ctx, &v1alpha1.ProviderConfigUsage{ObjectMeta: metav1.ObjectMeta{Namespace: "usage", Name: string(mg.GetUID())}}); err != nil {
				t.Fatalf("delete usage: %v", err)
			}
			if kind == v1alpha1.ProviderConfigKind {
				// A namespaced config is also held while a managed resource of its namespace
				// names it (its usage may be gone first when the namespace is deleted).
				time.Sleep(2 * time.Second)
				if err := kube.Get(ctx, key, pc.DeepCopyObject().(client.Object)); err != nil {
					t.Fatalf("namespaced config went while KVMDomain %s still names it: %v", mg.GetName(), err)
				}
				if err := kube.Delete(ctx, mg); err != nil {
					t.Fatal(err)
				}
			}
			controlplane.Eventually(t, 30*time.Second, "config deleted once unused", func() error {
				err := kube.Get(ctx, key, pc.DeepCopyObject().(client.Object))
				if kerrors.IsNotFound(err) {
					return nil
				}
				return errorf("still present (err=%v)", err)
			})
			_ = kube.Delete(ctx, mg)
		})
	}
}

// TestNamespacedConfigOutlivesItsResources is a team offboarded by deleting its namespace: the
// namespace controller deletes everything in it at once, the ProviderConfigUsages included.
// The namespaced ProviderConfig and the Secret with its key must stay until the last managed
// resource that names it is gone (that resource still needs them to remove its VM), then go.
func TestNamespacedConfigOutlivesItsResources(t *testing.T) {
	(&controlplane.Env{Config: cfg, Client: kube, Scheme: scheme}).Run(t, time.Second, config.Setup)
	ensureNamespace(t, "offboard")
	ctx := testContext(t)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "offboard", Name: "host-ssh"},
		Data: map[string][]byte{"key": []byte("not a real key"), "known_hosts": []byte("10.0.0.5 ssh-ed25519 AAAA")}}
	if err := kube.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "offboard", Name: "team-host"}, Spec: v1alpha1.ProviderConfigSpec{
		Transport: v1alpha1.TransportSSH, Host: "10.0.0.5", Port: 22, User: "root",
		LibvirtSocket: "/var/run/libvirt/libvirt-sock", URI: "qemu:///system",
		Credentials: &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Name: "host-ssh", Key: "key"}},
		KnownHosts:  &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Name: "host-ssh", Key: "known_hosts"}},
		Defaults:    v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeKVM, Pool: "default", Network: "default"},
	}}
	if err := kube.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	// A KVMDomain whose controller is still removing its VM: its own finalizer stands in for it.
	const busy = "example.org/removing-the-vm"
	mg := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "offboard", Name: "vm", Finalizers: []string{busy}}}
	mg.SetProviderConfigReference(&xpv2.ProviderConfigReference{Kind: v1alpha1.ProviderConfigKind, Name: "team-host"})
	if err := kube.Create(ctx, mg); err != nil {
		t.Fatal(err)
	}
	fin := config.SecretFinalizer("team-host")
	controlplane.Eventually(t, 30*time.Second, "config and Secret held", func() error {
		got := &v1alpha1.ProviderConfig{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(pc), got); err != nil {
			return err
		}
		s := &corev1.Secret{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(secret), s); err != nil {
			return err
		}
		if !meta.FinalizerExists(got, config.HoldFinalizer) || !meta.FinalizerExists(s, fin) {
			return errorf("config finalizers %v, Secret finalizers %v; want %s and %s", got.GetFinalizers(), s.GetFinalizers(), config.HoldFinalizer, fin)
		}
		return nil
	})

	// The namespace controller deletes them all at once.
	for _, o := range []client.Object{mg, pc, secret} {
		if err := kube.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	for _, o := range []client.Object{pc.DeepCopy(), secret.DeepCopy()} {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatalf("%s went while KVMDomain offboard/vm still needs it: %v", o.GetName(), err)
		}
		if o.GetDeletionTimestamp() == nil {
			t.Fatalf("%s: no deletion timestamp", o.GetName())
		}
	}

	// The KVMDomain's VM is gone: so go the config and its Secret.
	cur := &v1alpha1.KVMDomain{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(mg), cur); err != nil {
		t.Fatal(err)
	}
	meta.RemoveFinalizer(cur, busy)
	if err := kube.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, 30*time.Second, "config and Secret deleted once no resource names the config", func() error {
		for _, o := range []client.Object{&v1alpha1.ProviderConfig{}, &corev1.Secret{}} {
			key := client.ObjectKeyFromObject(pc)
			if _, ok := o.(*corev1.Secret); ok {
				key = client.ObjectKeyFromObject(secret)
			}
			err := kube.Get(ctx, key, o)
			if !kerrors.IsNotFound(err) {
				return errorf("%s still there (finalizers %v, err %v)", key, o.GetFinalizers(), err)
			}
		}
		return nil
	})
}
