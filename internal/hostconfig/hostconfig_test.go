package hostconfig

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
)

const (
	privateKey = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-key-material\n"
	passphrase = "correct horse battery staple"
	knownHosts = "[10.0.0.5]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPin"
)

func notFound(name string) error { return kerrors.NewNotFound(schema.GroupResource{}, name) }

// objects is a tiny in-memory store for a MockClient's Get.
type objects map[client.ObjectKey]client.Object

func (o objects) get(_ context.Context, key client.ObjectKey, obj client.Object) error {
	src, ok := o[key]
	if !ok {
		return notFound(key.Name)
	}
	switch dst := obj.(type) {
	case *v1alpha1.ProviderConfig:
		*dst = *src.(*v1alpha1.ProviderConfig).DeepCopy()
	case *v1alpha1.ClusterProviderConfig:
		*dst = *src.(*v1alpha1.ClusterProviderConfig).DeepCopy()
	case *corev1.Secret:
		*dst = *src.(*corev1.Secret).DeepCopy()
	}
	return nil
}

func secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func sshSpec(ns string) v1alpha1.ProviderConfigSpec {
	return v1alpha1.ProviderConfigSpec{
		Transport: v1alpha1.TransportSSH, Host: "10.0.0.5", Port: 2222, User: "root",
		LibvirtSocket: "/run/libvirt/libvirt-sock", URI: "qemu:///system",
		Credentials: &v1alpha1.SSHCredentials{
			SecretRef:           v1alpha1.SecretKeySelector{Namespace: ns, Name: "ssh", Key: "key"},
			PassphraseSecretRef: &v1alpha1.SecretKeySelector{Namespace: ns, Name: "ssh", Key: "pass"},
		},
		KnownHosts: &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Namespace: ns, Name: "ssh", Key: "known_hosts"}},
		Defaults:   v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeQEMU, Pool: "default", Network: "default"},
	}
}

func domain(kind, name string) *v1alpha1.KVMDomain {
	d := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "vm"}}
	if kind != "" {
		d.SetProviderConfigReference(&xpv2.ProviderConfigReference{Kind: kind, Name: name})
	}
	return d
}

func TestResolve(t *testing.T) {
	wantHost := host.Config{
		Transport: host.TransportSSH, Host: "10.0.0.5", Port: 2222, User: "root",
		PrivateKey: []byte(privateKey), Passphrase: []byte(passphrase), KnownHosts: []byte(knownHosts),
		Socket: "/run/libvirt/libvirt-sock", URI: "qemu:///system",
	}
	allKeys := map[string]string{"key": privateKey, "pass": passphrase, "known_hosts": knownHosts}
	cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "host-1"}, Spec: sshSpec("crossplane-system")}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "local"}, Spec: sshSpec("")}
	insecure := cpc.DeepCopy()
	insecure.Spec.KnownHosts = nil
	insecure.Spec.InsecureSkipHostKeyVerification = true
	noKnownHosts := cpc.DeepCopy()
	noKnownHosts.Spec.KnownHosts = nil
	unix := cpc.DeepCopy()
	unix.Spec = v1alpha1.ProviderConfigSpec{Transport: v1alpha1.TransportUnix, LibvirtSocket: "/run/libvirt/libvirt-sock"}
	// The image source policy travels with the rest.
	withPolicy := cpc.DeepCopy()
	withPolicy.Spec.ImageSources = v1alpha1.ImageSourcePolicy{
		Allow:           []v1alpha1.ImageSourceRule{{CIDR: "127.0.0.1/32", Ports: []int32{8090}}, {URLPrefix: "https://mirror.example.org/images/"}},
		Deny:            []v1alpha1.ImageSourceRule{{CIDR: "10.0.0.0/8"}},
		MaxImageSizeMiB: 4096, HeaderTimeoutSeconds: 10, StallTimeoutSeconds: 20,
	}
	// A namespaced ProviderConfig that names another namespace still reads its own.
	sneaky := pc.DeepCopy()
	sneaky.Spec.Credentials.SecretRef.Namespace = "crossplane-system"

	cases := map[string]struct {
		store   objects
		mg      *v1alpha1.KVMDomain
		want    *Resolved
		wantErr error
	}{
		"ClusterProviderConfig": {
			store: objects{
				{Name: "host-1"}: cpc,
				{Namespace: "crossplane-system", Name: "ssh"}: secret("crossplane-system", "ssh", allKeys),
			},
			mg:   domain("ClusterProviderConfig", "host-1"),
			want: &Resolved{Host: wantHost, Defaults: cpc.Spec.Defaults, Source: "ClusterProviderConfig/host-1"},
		},
		"ImageSources": {
			store: objects{
				{Name: "host-1"}: withPolicy,
				{Namespace: "crossplane-system", Name: "ssh"}: secret("crossplane-system", "ssh", allKeys),
			},
			mg: domain("ClusterProviderConfig", "host-1"),
			want: &Resolved{Host: wantHost, Defaults: cpc.Spec.Defaults, ImageSources: withPolicy.Spec.ImageSources,
				Source: "ClusterProviderConfig/host-1"},
		},
		"ProviderConfigReadsOwnNamespace": {
			store: objects{
				{Namespace: "team-a", Name: "local"}: pc,
				{Namespace: "team-a", Name: "ssh"}:   secret("team-a", "ssh", allKeys),
			},
			mg:   domain("ProviderConfig", "local"),
			want: &Resolved{Host: wantHost, Defaults: pc.Spec.Defaults, Source: "ProviderConfig/local", Namespaced: true},
		},
		"ProviderConfigCannotReadOtherNamespace": {
			store: objects{
				{Namespace: "team-a", Name: "local"}:          sneaky,
				{Namespace: "crossplane-system", Name: "ssh"}: secret("crossplane-system", "ssh", allKeys),
			},
			mg:      domain("ProviderConfig", "local"),
			wantErr: errors.Wrap(errors.Wrapf(notFound("ssh"), errGetSecret, "team-a", "ssh"), errReadKey),
		},
		"Insecure": {
			store: objects{
				{Name: "host-1"}: insecure,
				{Namespace: "crossplane-system", Name: "ssh"}: secret("crossplane-system", "ssh", allKeys),
			},
			mg: domain("ClusterProviderConfig", "host-1"),
			want: &Resolved{Host: func() host.Config {
				h := wantHost
				h.KnownHosts, h.InsecureSkipHostKeyVerification = nil, true
				return h
			}(), Defaults: cpc.Spec.Defaults, Source: "ClusterProviderConfig/host-1"},
		},
		"NoKnownHosts": {
			store: objects{
				{Name: "host-1"}: noKnownHosts,
				{Namespace: "crossplane-system", Name: "ssh"}: secret("crossplane-system", "ssh", allKeys),
			},
			mg:      domain("ClusterProviderConfig", "host-1"),
			wantErr: errors.Errorf(errNoKnownHosts, "ClusterProviderConfig/host-1"),
		},
		"UnixNeedsNoSecrets": {
			store: objects{{Name: "host-1"}: unix},
			mg:    domain("ClusterProviderConfig", "host-1"),
			want: &Resolved{Host: host.Config{Transport: host.TransportUnix, Socket: "/run/libvirt/libvirt-sock"},
				Source: "ClusterProviderConfig/host-1"},
		},
		"MissingKey": {
			store: objects{
				{Name: "host-1"}: cpc,
				{Namespace: "crossplane-system", Name: "ssh"}: secret("crossplane-system", "ssh", map[string]string{"key": privateKey}),
			},
			mg:      domain("ClusterProviderConfig", "host-1"),
			wantErr: errors.Wrap(errors.Errorf(errNoSecretKey, "crossplane-system", "ssh", "pass"), errReadPassphrase),
		},
		"MissingConfig": {
			store:   objects{},
			mg:      domain("ClusterProviderConfig", "nope"),
			wantErr: errors.Wrapf(notFound("nope"), errGetCPC, "nope"),
		},
		"UnknownKind": {
			store:   objects{},
			mg:      domain("Elsewhere", "x"),
			wantErr: errors.Errorf(errUnknownKind, "Elsewhere"),
		},
		"NoRef": {
			store:   objects{},
			mg:      domain("", ""),
			wantErr: errors.New(errNoRef),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &test.MockClient{MockGet: tc.store.get}
			got, err := Resolve(context.Background(), c, tc.mg)
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Fatalf("Resolve(): -want error, +got error:\n%s", diff)
			}
			if err != nil {
				for _, s := range []string{privateKey, passphrase} {
					if strings.Contains(err.Error(), s) {
						t.Fatalf("Resolve(): error leaks a secret: %v", err)
					}
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resolve(): -want, +got:\n%s", diff)
			}
		})
	}
}
