//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// The orphan sweep (spec.orphans), on a LAN host: a KVMDomain and its SeedVolume of team-a,
// of their own (not composed), onto team-a's shared BaseImage, lose their finalizers by hand
// and are deleted: their domain, overlay and seed stay on the host as orphans. The host's
// ClusterProviderConfig reports them (Report, the default, removes nothing); a ProviderConfig
// of team-a for the same host, with orphans: Delete and a short grace, removes them (a
// namespaced config removes only its own namespace's orphans, so nothing else on the shared
// host is at stake); a domain of a team-a name defined by hand, without the provider's
// ownership record, is neither reported nor touched.
const (
	orphanDomainName = "orphan"
	orphanSeedName   = "orphan-seed"
	handmadeDomain   = "team-a_handmade"
	orphanGrace      = 10 * time.Second
	sweeperName      = "orphan-sweeper"
)

// checkOrphans runs the orphan case on the host of the ClusterProviderConfig cfgName; team-a's
// BaseImage debian-12-squid must be Ready. It removes the ProviderConfig it made.
func (e *env) checkOrphans(ctx context.Context, cfgName string) (err error) {
	h := e.hosts.Get(cfgName)
	if h == nil {
		return fmt.Errorf("no host %s", cfgName)
	}
	ref := &xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: cfgName}
	userData := "#cloud-config\n"
	sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: orphanSeedName}}
	sv.Spec.ForProvider.Hostname = orphanDomainName
	sv.Spec.ForProvider.UserData = &userData
	sv.SetProviderConfigReference(ref)
	kd := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: orphanDomainName}}
	kd.Spec.ForProvider.VCPU = 1
	kd.Spec.ForProvider.MemoryMiB = 512
	kd.Spec.ForProvider.PowerState = v1alpha1.PowerStateStopped
	kd.Spec.ForProvider.BaseImageRef = &xpv2.NamespacedReference{Name: "debian-12-squid"}
	kd.Spec.ForProvider.SeedVolumeRef = &xpv2.NamespacedReference{Name: orphanSeedName}
	kd.SetProviderConfigReference(ref)
	for _, o := range []client.Object{sv, kd} {
		if err := e.c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	domain := "team-a_" + orphanDomainName
	var objs []object
	if err := waitFor(ctx, "the domain "+domain+" defined on "+cfgName, 2*time.Second, 3*time.Minute, func(context.Context) (err error) {
		objs, err = e.hosts.DomainObjects(domain)
		return err
	}); err != nil {
		return err
	}
	logf("  orphans: %s defined on %s with %s", domain, cfgName, objectList(objs))

	// Deleted by hand past their finalizers: what they made stays on the host.
	for _, o := range []client.Object{kd, sv} {
		if err := e.dropFinalizersAndDelete(ctx, o); err != nil {
			return err
		}
	}
	if left, err := e.hosts.Present(objs); err != nil || len(left) != len(objs) {
		return fmt.Errorf("the orphan's objects changed without a sweep: %s left of %s (%v)", objectList(left), objectList(objs), err)
	}
	hand := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>`, handmadeDomain)
	if err := h.Define(hand); err != nil {
		return fmt.Errorf("defining %s by hand: %w", handmadeDomain, err)
	}
	defer func() {
		for _, err := range e.hosts.Remove([]object{{Host: cfgName, Kind: "domain", Name: handmadeDomain}}) {
			warnf("%v", err)
		}
		for _, o := range []client.Object{
			&v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: sweeperName}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: sweeperName + "-ssh"}},
		} {
			if derr := e.c.Delete(context.Background(), o); derr != nil && !kerrors.IsNotFound(derr) && err == nil {
				err = derr
			}
		}
	}()

	// Report: listed, nothing removed.
	var wantVols []string
	for _, o := range objs {
		if o.Kind == "volume" {
			wantVols = append(wantVols, "/"+o.Name)
		}
	}
	if err := waitFor(ctx, "ClusterProviderConfig "+cfgName+" to report the orphans", 2*time.Second, 3*time.Minute, func(ctx context.Context) error {
		o, err := e.hostOrphans(ctx, cfgName)
		if err != nil {
			return err
		}
		if slices.Contains(o.Names, "domain "+handmadeDomain) {
			return fmt.Errorf("the domain made by hand, without the provider's record, is reported: %v", o.Names)
		}
		if !slices.Contains(o.Names, "domain "+domain) {
			return fmt.Errorf("orphans %v do not name domain %s", o.Names, domain)
		}
		for _, v := range wantVols {
			if !slices.ContainsFunc(o.Names, func(n string) bool { return strings.HasPrefix(n, "volume ") && strings.HasSuffix(n, v) }) {
				return fmt.Errorf("orphans %v do not name volume %s", o.Names, strings.TrimPrefix(v, "/"))
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if left, err := e.hosts.Present(objs); err != nil || len(left) != len(objs) {
		return fmt.Errorf("orphans: Report removed something: %s left of %s (%v)", objectList(left), objectList(objs), err)
	}
	logf("  orphans: ClusterProviderConfig %s reports %s and its volumes; %s (no record) not reported", cfgName, domain, handmadeDomain)

	// Delete: removed after the grace; the domain first, its volumes once no domain uses them.
	if err := e.createSweeper(ctx, cfgName); err != nil {
		return err
	}
	t0 := time.Now()
	if err := waitFor(ctx, "the orphans removed from "+cfgName, 2*time.Second, 5*time.Minute, func(context.Context) error {
		left, err := e.hosts.Present(objs)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", objectList(left))
		}
		return err
	}); err != nil {
		return err
	}
	ds, err := h.Domains()
	if err != nil {
		return err
	}
	if !ds[handmadeDomain] {
		return fmt.Errorf("the domain %s, made by hand without the provider's record, was removed", handmadeDomain)
	}
	if err := waitFor(ctx, "ProviderConfig team-a/"+sweeperName+" to count the removals", 2*time.Second, 2*time.Minute, func(ctx context.Context) error {
		pc := &v1alpha1.ProviderConfig{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: sweeperName}, pc); err != nil {
			return err
		}
		o := &v1alpha1.HostOrphans{}
		if pc.Status.Host != nil && pc.Status.Host.Orphans != nil {
			o = pc.Status.Host.Orphans
		}
		if slices.Contains(o.Names, "domain "+domain) || o.Deleted < int32(1+len(wantVols)) {
			return fmt.Errorf("orphans %+v: want %s gone and at least %d deleted", o, domain, 1+len(wantVols))
		}
		return nil
	}); err != nil {
		return err
	}
	logf("  orphans: with orphans: Delete (grace %s) on ProviderConfig team-a/%s the domain, overlay and seed are gone %ss later; %s stays", orphanGrace, sweeperName, secs(time.Since(t0)), handmadeDomain)
	return nil
}

// dropFinalizersAndDelete deletes o past its finalizer, as a person would by hand: paused
// first (crossplane.io/paused: the provider's reconciler then does nothing with it, not even
// its deletion), deleted, and its finalizers removed; it waits until o is gone.
func (e *env) dropFinalizersAndDelete(ctx context.Context, o client.Object) error {
	key := client.ObjectKeyFromObject(o)
	if err := e.c.Get(ctx, key, o); err != nil {
		return err
	}
	// A merge patch, as kubectl annotate sends: no conflict with the provider's own writes.
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[meta.AnnotationKeyReconciliationPaused] = "true"
	o.SetAnnotations(a)
	if err := e.c.Patch(ctx, o, patch); err != nil {
		return fmt.Errorf("pausing %s: %w", key, err)
	}
	if err := e.c.Delete(ctx, o); err != nil && !kerrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	return waitFor(ctx, fmt.Sprintf("%T %s gone without its finalizer", o, key), time.Second, time.Minute, func(ctx context.Context) error {
		if err := e.c.Get(ctx, key, o); kerrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if len(o.GetFinalizers()) > 0 {
			patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
			o.SetFinalizers(nil)
			if err := e.c.Patch(ctx, o, patch); err != nil && !kerrors.IsNotFound(err) {
				return err
			}
		}
		return fmt.Errorf("still there")
	})
}

// hostOrphans is status.host.orphans of the ClusterProviderConfig name (empty when unset).
func (e *env) hostOrphans(ctx context.Context, name string) (*v1alpha1.HostOrphans, error) {
	c := &v1alpha1.ClusterProviderConfig{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
		return nil, err
	}
	if c.Status.Host == nil || c.Status.Host.Orphans == nil {
		return &v1alpha1.HostOrphans{}, nil
	}
	return c.Status.Host.Orphans, nil
}

// createSweeper makes ProviderConfig team-a/sweeperName for the host of the
// ClusterProviderConfig name (its spec, its SSH Secret copied into team-a) with orphans: Delete
// and a grace of orphanGrace.
func (e *env) createSweeper(ctx context.Context, name string) error {
	c := &v1alpha1.ClusterProviderConfig{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
		return err
	}
	spec := *c.Spec.DeepCopy()
	if spec.Credentials == nil || spec.KnownHosts == nil {
		return fmt.Errorf("ClusterProviderConfig %s has no SSH credentials or known hosts to copy", name)
	}
	data := map[string][]byte{}
	for _, sel := range []*v1alpha1.SecretKeySelector{&spec.Credentials.SecretRef, &spec.KnownHosts.SecretRef} {
		src := &corev1.Secret{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: sel.Namespace, Name: sel.Name}, src); err != nil {
			return err
		}
		data[sel.Key] = src.Data[sel.Key]
		sel.Namespace, sel.Name = "", sweeperName+"-ssh"
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: sweeperName + "-ssh"}, Data: data}
	if err := e.c.Create(ctx, sec); err != nil {
		return err
	}
	spec.AllowedNamespaces, spec.Attachments = nil, nil
	spec.Orphans, spec.OrphanGracePeriod = v1alpha1.OrphansDelete, &metav1.Duration{Duration: orphanGrace}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: sweeperName}, Spec: spec}
	return e.c.Create(ctx, pc)
}
