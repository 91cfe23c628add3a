// Package hostconfig turns the ProviderConfig or ClusterProviderConfig that a managed
// resource references into a host.Config: the host's address, its SSH key and pinned
// known_hosts read from Secrets, the defaults for resources on that host, and the policy
// for the images BaseImages on it download.
//
// Errors name the object and the Secret key being read, never the Secret's content.
package hostconfig

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
)

const (
	errNoRef          = "managed resource has no providerConfigRef"
	errUnknownKind    = "unsupported providerConfigRef kind %q: use ProviderConfig or ClusterProviderConfig"
	errGetPC          = "cannot get ProviderConfig %s/%s"
	errGetCPC         = "cannot get ClusterProviderConfig %s"
	errGetSecret      = "cannot get Secret %s/%s"
	errNoSecretKey    = "Secret %s/%s has no key %q"
	errEmptySecretKey = "key %q of Secret %s/%s is empty"
	errNoCredentials  = "%s has transport SSH but no credentials"
	errNoKnownHosts   = "%s has transport SSH but neither knownHosts nor insecureSkipHostKeyVerification"
	errReadKey        = "cannot read the SSH private key"
	errReadPassphrase = "cannot read the SSH key passphrase"
	errReadKnownHosts = "cannot read known_hosts"
	errUnixNamespaced = "%s cannot use transport Unix: only a ClusterProviderConfig may reach the libvirt socket of the provider's own host"
)

// Resolved is what a managed resource needs to reach its host.
type Resolved struct {
	// Host is the connection configuration, secrets included.
	Host host.Config
	// Defaults for fields the managed resource leaves empty.
	Defaults v1alpha1.HostDefaults
	// ImageSources bounds what BaseImages on this host download.
	ImageSources v1alpha1.ImageSourcePolicy
	// Unschedulable is the config's spec.unschedulable: the host is cordoned.
	Unschedulable bool
	// Allocation is the config's spec.allocation: how far domains may commit the host.
	Allocation *v1alpha1.AllocationRatios
	// Source names the config it came from, e.g. "ClusterProviderConfig/default", for
	// messages and events.
	Source string
	// Imports is the config's import policy (see ImportsAllowed).
	Imports v1alpha1.ImportPolicy
	// Attachments grant networks, bridges and pools beyond the defaults (internal/hostgrants).
	Attachments []v1alpha1.AttachmentGrant
	// AllowedNamespaces of a ClusterProviderConfig; nil: every namespace.
	AllowedNamespaces *v1alpha1.NamespaceSelection
	// Namespaced is true for a ProviderConfig, which serves its own namespace only.
	Namespaced bool
	// Limits cap sizes and per-namespace counts on this host (internal/hostlimits).
	Limits v1alpha1.HostLimits
}

// ImportsAllowed is true when the config lets resources in namespace import existing objects.
// A namespaced ProviderConfig serves its own namespace only, so its list of namespaces is not
// consulted.
func (r *Resolved) ImportsAllowed(namespace string) bool {
	if !r.Imports.Allowed {
		return false
	}
	if len(r.Imports.Namespaces) == 0 {
		return true
	}
	for _, n := range r.Imports.Namespaces {
		if n == namespace {
			return true
		}
	}
	return false
}

// Resolve reads the config that mg references and the Secrets it names.
func Resolve(ctx context.Context, c client.Reader, mg resource.ModernManaged) (*Resolved, error) {
	return ResolveRef(ctx, c, mg.GetNamespace(), mg.GetProviderConfigReference())
}

// ResolveRef reads the config ref names, as a managed resource in namespace that references
// it would, and the Secrets it names. The host status controller resolves a config itself
// this way.
func ResolveRef(ctx context.Context, c client.Reader, namespace string, ref *xpv2.ProviderConfigReference) (*Resolved, error) { //nolint:gocyclo // both config kinds and each Secret read in sequence; each step only returns its error
	if ref == nil || ref.Name == "" {
		return nil, errors.New(errNoRef)
	}

	var (
		spec        v1alpha1.ProviderConfigSpec
		secretNSDef string // namespace for Secret refs that do not name one
		source      string
	)
	switch ref.Kind {
	case v1alpha1.ProviderConfigKind:
		pc := &v1alpha1.ProviderConfig{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, pc); err != nil {
			return nil, errors.Wrapf(err, errGetPC, namespace, ref.Name)
		}
		spec, secretNSDef = pc.Spec, pc.GetNamespace()
		source = v1alpha1.ProviderConfigKind + "/" + ref.Name
		// Admission rejects both; checked here too for objects admitted before the rules.
		if spec.Transport == v1alpha1.TransportUnix {
			return nil, errors.Errorf(errUnixNamespaced, source)
		}
		if spec.Imports != nil {
			spec.Imports = &v1alpha1.ImportPolicy{Allowed: spec.Imports.Allowed}
		}
	case v1alpha1.ClusterProviderConfigKind:
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := c.Get(ctx, types.NamespacedName{Name: ref.Name}, cpc); err != nil {
			return nil, errors.Wrapf(err, errGetCPC, ref.Name)
		}
		spec = cpc.Spec
		source = v1alpha1.ClusterProviderConfigKind + "/" + ref.Name
	default:
		return nil, errors.Errorf(errUnknownKind, ref.Kind)
	}

	r := &Resolved{
		Host: host.Config{
			Transport:                       host.Transport(spec.Transport),
			Host:                            spec.Host,
			Port:                            int(spec.Port),
			User:                            spec.User,
			InsecureSkipHostKeyVerification: spec.InsecureSkipHostKeyVerification,
			Socket:                          spec.LibvirtSocket,
			URI:                             spec.URI,
		},
		Defaults:     spec.Defaults,
		ImageSources: spec.ImageSources,
		Source:       source,
		Attachments:  spec.Attachments,
		Limits:       spec.Limits,
		Namespaced:   ref.Kind == v1alpha1.ProviderConfigKind,
	}
	if !r.Namespaced {
		// Admission rejects it in a ProviderConfig, which serves its own namespace only.
		r.AllowedNamespaces = spec.AllowedNamespaces
	}
	if spec.Imports != nil {
		r.Imports = *spec.Imports
	}
	r.Unschedulable = spec.Unschedulable
	r.Allocation = spec.Allocation
	if r.Host.Transport != host.TransportSSH && r.Host.Transport != "" {
		return r, nil
	}

	// A namespaced ProviderConfig may only read its own namespace. Admission already rejects
	// a namespace there; forcing it here keeps that true for objects admitted before the rule.
	nsOf := func(s v1alpha1.SecretKeySelector) string {
		if secretNSDef != "" {
			return secretNSDef
		}
		return s.Namespace
	}

	if spec.Credentials == nil {
		return nil, errors.Errorf(errNoCredentials, source)
	}
	var err error
	if r.Host.PrivateKey, err = secretKey(ctx, c, nsOf(spec.Credentials.SecretRef), spec.Credentials.SecretRef); err != nil {
		return nil, errors.Wrap(err, errReadKey)
	}
	if p := spec.Credentials.PassphraseSecretRef; p != nil {
		if r.Host.Passphrase, err = secretKey(ctx, c, nsOf(*p), *p); err != nil {
			return nil, errors.Wrap(err, errReadPassphrase)
		}
	}
	switch {
	case spec.KnownHosts != nil:
		if r.Host.KnownHosts, err = secretKey(ctx, c, nsOf(spec.KnownHosts.SecretRef), spec.KnownHosts.SecretRef); err != nil {
			return nil, errors.Wrap(err, errReadKnownHosts)
		}
	case !spec.InsecureSkipHostKeyVerification:
		return nil, errors.Errorf(errNoKnownHosts, source)
	}
	return r, nil
}

// secretKey returns the bytes of one key of a Secret. It never returns them in an error.
func secretKey(ctx context.Context, c client.Reader, namespace string, s v1alpha1.SecretKeySelector) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: s.Name}, sec); err != nil {
		return nil, errors.Wrapf(err, errGetSecret, namespace, s.Name)
	}
	v, ok := sec.Data[s.Key]
	if !ok {
		return nil, errors.Errorf(errNoSecretKey, namespace, s.Name, s.Key)
	}
	if len(v) == 0 {
		return nil, errors.Errorf(errEmptySecretKey, s.Key, namespace, s.Name)
	}
	return v, nil
}
