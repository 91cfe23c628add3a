package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// A namespaced ProviderConfig lives in a team's namespace, next to the managed resources that
// use it and the Secrets with its SSH key and known_hosts. Deleting the namespace (offboarding
// the team) deletes all of them at once. crossplane-runtime's in-use finalizer counts
// ProviderConfigUsages, which the namespace controller deletes as well, so the config and its
// Secrets went first, and the managed resources could no longer reach the host to remove their
// VMs: the namespace stayed Terminating for good, its VMs on the host.
//
// The hold controller closes that gap. While a namespaced ProviderConfig exists it carries
// HoldFinalizer, and each Secret it names carries a finalizer naming that config
// (SecretFinalizer). When the config is deleted, both stay until no BaseImage, SeedVolume or
// KVMDomain of its namespace names it any more; then the Secrets are let go and the config.
const (
	// HoldFinalizer keeps a namespaced ProviderConfig while managed resources name it.
	HoldFinalizer = "kvm.crossplane.io/managed-resources"
	// secretFinalizerPrefix + a digest of the config's name is the finalizer each Secret of
	// a namespaced ProviderConfig carries while that config holds it.
	secretFinalizerPrefix = "kvm.crossplane.io/providerconfig-"
	// annotationHeld lists the Secrets the config holds, so that a Secret the config no
	// longer names is let go.
	annotationHeld = "kvm.crossplane.io/held-secrets"

	holdControllerName = "providerconfig-hold/providerconfig.kvm.crossplane.io"
	// recheck is how often a config held by managed resources is looked at again (deleting
	// managed resources also requeue it at once).
	recheck = 30 * time.Second

	reasonHeld event.Reason = "HeldByManagedResources"

	errGetConfig     = "cannot get the ProviderConfig"
	errUpdateConfig  = "cannot update the ProviderConfig's finalizers"
	errListUsers     = "cannot list the managed resources that name the ProviderConfig"
	errHoldSecret    = "cannot hold Secret %s/%s for the ProviderConfig"
	errReleaseSecret = "cannot let go of Secret %s/%s"
)

// SecretFinalizer is the finalizer a Secret carries while ProviderConfig pc holds it.
func SecretFinalizer(pc string) string {
	d := sha256.Sum256([]byte(pc))
	return secretFinalizerPrefix + hex.EncodeToString(d[:])[:16]
}

// heldSecrets are the names of the Secrets in the config's namespace that it names: its SSH
// key, passphrase and known_hosts.
func heldSecrets(pc *v1alpha1.ProviderConfig) []string {
	set := map[string]bool{}
	sp := pc.Spec
	if c := sp.Credentials; c != nil {
		if c.SecretRef.Name != "" {
			set[c.SecretRef.Name] = true
		}
		if r := c.PassphraseSecretRef; r != nil && r.Name != "" {
			set[r.Name] = true
		}
	}
	if kh := sp.KnownHosts; kh != nil && kh.SecretRef.Name != "" {
		set[kh.SecretRef.Name] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// users lists the managed resources of a namespace that name ProviderConfig name.
type users func(ctx context.Context, namespace, name string) ([]string, error)

// apiUsers lists BaseImages, SeedVolumes and KVMDomains from kube.
func apiUsers(kube client.Reader) users {
	return func(ctx context.Context, ns, name string) ([]string, error) {
		var out []string
		for _, l := range []resource.ManagedList{&v1alpha1.BaseImageList{}, &v1alpha1.SeedVolumeList{}, &v1alpha1.KVMDomainList{}} {
			if err := kube.List(ctx, l, client.InNamespace(ns)); err != nil {
				return nil, err
			}
			for _, mg := range l.GetItems() {
				if namesConfig(mg, name) {
					out = append(out, mg.GetObjectKind().GroupVersionKind().Kind+" "+mg.GetName())
				}
			}
		}
		return out, nil
	}
}

// namesConfig: the managed resource uses the namespaced ProviderConfig name.
func namesConfig(mg resource.Managed, name string) bool {
	m, ok := mg.(resource.ModernManaged)
	if !ok {
		return false
	}
	ref := m.GetProviderConfigReference()
	return ref != nil && ref.Kind == v1alpha1.ProviderConfigKind && ref.Name == name
}

// holder reconciles the hold of namespaced ProviderConfigs.
type holder struct {
	kube client.Client // writes, and reads of ProviderConfigs
	// secrets reads Secrets from the API server (the manager's APIReader), as the manager's
	// client does too (setup.ClientOptions): the provider has no Secret informer and caches
	// no Secret of the cluster.
	secrets  client.Reader
	users    users
	log      logging.Logger
	recorder event.Recorder
}

func (h *holder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := h.kube.Get(ctx, req.NamespacedName, pc); err != nil {
		return reconcile.Result{}, errors.Wrap(resource.IgnoreNotFound(err), errGetConfig)
	}
	fin := SecretFinalizer(pc.Name)
	held := strings.FieldsFunc(pc.GetAnnotations()[annotationHeld], func(r rune) bool { return r == ',' })

	if !meta.WasDeleted(pc) {
		want := heldSecrets(pc)
		for _, s := range want {
			if err := h.secretFinalizer(ctx, pc.Namespace, s, fin, true); err != nil {
				return reconcile.Result{}, errors.Wrapf(err, errHoldSecret, pc.Namespace, s)
			}
		}
		for _, s := range held {
			if !slices.Contains(want, s) {
				if err := h.secretFinalizer(ctx, pc.Namespace, s, fin, false); err != nil {
					return reconcile.Result{}, errors.Wrapf(err, errReleaseSecret, pc.Namespace, s)
				}
			}
		}
		if meta.FinalizerExists(pc, HoldFinalizer) && strings.Join(held, ",") == strings.Join(want, ",") {
			return reconcile.Result{}, nil
		}
		meta.AddFinalizer(pc, HoldFinalizer)
		meta.AddAnnotations(pc, map[string]string{annotationHeld: strings.Join(want, ",")})
		return reconcile.Result{}, errors.Wrap(h.kube.Update(ctx, pc), errUpdateConfig)
	}

	if !meta.FinalizerExists(pc, HoldFinalizer) {
		return reconcile.Result{}, nil
	}
	left, err := h.users(ctx, pc.Namespace, pc.Name)
	if err != nil {
		return reconcile.Result{}, errors.Wrap(err, errListUsers)
	}
	if len(left) > 0 {
		h.recorder.Event(pc, event.Normal(reasonHeld, "kept (with its Secrets) until the managed resources that use it are gone: "+strings.Join(left, ", ")))
		return reconcile.Result{RequeueAfter: recheck}, nil
	}
	for _, s := range append(heldSecrets(pc), held...) {
		if err := h.secretFinalizer(ctx, pc.Namespace, s, fin, false); err != nil {
			return reconcile.Result{}, errors.Wrapf(err, errReleaseSecret, pc.Namespace, s)
		}
	}
	meta.RemoveFinalizer(pc, HoldFinalizer)
	return reconcile.Result{}, errors.Wrap(resource.IgnoreNotFound(h.kube.Update(ctx, pc)), errUpdateConfig)
}

// secretFinalizer adds (on) or removes the finalizer on Secret ns/name. A Secret that does not
// exist is left to the connection to report (holding) or is gone already (letting go). A
// Secret being deleted gets no new finalizer.
func (h *holder) secretFinalizer(ctx context.Context, ns, name, fin string, on bool) error {
	s := &corev1.Secret{}
	if err := h.secrets.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		return resource.IgnoreNotFound(err)
	}
	if meta.FinalizerExists(s, fin) == on || (on && meta.WasDeleted(s)) {
		return nil
	}
	orig := s.DeepCopy()
	if on {
		meta.AddFinalizer(s, fin)
	} else {
		meta.RemoveFinalizer(s, fin)
	}
	return resource.IgnoreNotFound(h.kube.Patch(ctx, s, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})))
}

// setupHold adds the hold controller; it starts once the managed resources' CRDs are
// established (it watches them).
func setupHold(mgr ctrl.Manager, o controller.Options) error {
	start := func() {
		h := &holder{
			kube: mgr.GetClient(), secrets: mgr.GetAPIReader(), users: apiUsers(mgr.GetClient()),
			log:      o.Logger.WithValues("controller", holdControllerName),
			recorder: event.NewAPIRecorder(mgr.GetEventRecorderFor(holdControllerName)), //nolint:staticcheck // crossplane-runtime's recorder still takes the old events API.
		}
		toConfig := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			mg, ok := o.(resource.ModernManaged)
			if !ok {
				return nil
			}
			ref := mg.GetProviderConfigReference()
			if ref == nil || ref.Kind != v1alpha1.ProviderConfigKind {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
		})
		err := ctrl.NewControllerManagedBy(mgr).
			Named(holdControllerName).
			WithOptions(o.ForControllerRuntime()).
			For(&v1alpha1.ProviderConfig{}).
			Watches(&v1alpha1.BaseImage{}, toConfig).
			Watches(&v1alpha1.SeedVolume{}, toConfig).
			Watches(&v1alpha1.KVMDomain{}, toConfig).
			Complete(h)
		if err != nil {
			panic(errors.Wrap(err, "cannot set up the ProviderConfig hold controller"))
		}
	}
	o.Gate.Register(start, v1alpha1.BaseImageGroupVersionKind, v1alpha1.SeedVolumeGroupVersionKind, v1alpha1.KVMDomainGroupVersionKind)
	return nil
}
