package connection

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
)

// dialer is a Connections that records that a host was dialed and fails.
type dialer struct{ dialed int }

var errDialed = errors.New("dialed")

func (d *dialer) Get(context.Context, host.Config) (*host.Conn, error) {
	d.dialed++
	return nil, errDialed
}

// TestConnectAllowedNamespaces: a namespace a ClusterProviderConfig does not admit is refused
// before the host is dialed, with a message naming the rule; an admitted one, or a resource
// being deleted, goes on to the host.
func TestConnectAllowedNamespaces(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: "ssh"},
		Data: map[string][]byte{"key": []byte("k"), "kh": []byte("h")}}
	cpc := func(sel *v1alpha1.NamespaceSelection) *v1alpha1.ClusterProviderConfig {
		return &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "host"}, Spec: v1alpha1.ProviderConfigSpec{
			Transport: v1alpha1.TransportSSH, Host: "h", Port: 22, User: "root",
			Credentials:       &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: "ssh", Key: "key"}},
			KnownHosts:        &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: "ssh", Key: "kh"}},
			AllowedNamespaces: sel,
		}}
	}
	gold := &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	nsOf := func(labels map[string]string) test.MockGetFn {
		return func(_ context.Context, key client.ObjectKey, obj client.Object) error {
			n := obj.(*corev1.Namespace) // only Namespaces are read from this reader
			n.Name, n.Labels = key.Name, labels
			return nil
		}
	}
	cases := map[string]struct {
		reason   string
		sel      *v1alpha1.NamespaceSelection
		labels   map[string]string
		deleting bool
		want     error
		dialed   int
	}{
		"EveryNamespace": {
			reason: "without allowedNamespaces every namespace may use the config",
			want:   errors.Wrapf(errDialed, errConnect, "ClusterProviderConfig/host"), dialed: 1,
		},
		"Listed": {
			reason: "a listed namespace may",
			sel:    &v1alpha1.NamespaceSelection{Names: []string{"team-a"}},
			want:   errors.Wrapf(errDialed, errConnect, "ClusterProviderConfig/host"), dialed: 1,
		},
		"Selected": {
			reason: "a namespace whose labels match may",
			sel:    &v1alpha1.NamespaceSelection{Selector: gold}, labels: map[string]string{"tier": "gold"},
			want: errors.Wrapf(errDialed, errConnect, "ClusterProviderConfig/host"), dialed: 1,
		},
		"Refused": {
			reason: "another namespace is refused before the host is dialed",
			sel:    &v1alpha1.NamespaceSelection{Names: []string{"team-z"}, Selector: gold}, labels: map[string]string{"tier": "bronze"},
			want: errors.New("namespace team-a may not use ClusterProviderConfig/host: it is not among the namespaces its spec.allowedNamespaces selects (ask the platform team for access, or use another host)"),
		},
		"RefusedButDeleting": {
			reason:   "a resource being deleted still reaches the host to remove what it made",
			sel:      &v1alpha1.NamespaceSelection{Names: []string{"team-z"}},
			deleting: true,
			want:     errors.Wrapf(errDialed, errConnect, "ClusterProviderConfig/host"), dialed: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &dialer{}
			c := &Connector{
				Kube:       &test.MockClient{MockGet: store(cpc(tc.sel), sec)},
				Namespaces: &test.MockClient{MockGet: nsOf(tc.labels)},
				Usage:      resource.ModernTrackerFn(func(context.Context, resource.ModernManaged) error { return nil }),
				Conns:      d,
			}
			mg := managed()
			if tc.deleting {
				now := metav1.Now()
				mg.SetDeletionTimestamp(&now)
			}
			_, err := c.Connect(context.Background(), mg)
			if diff := cmp.Diff(tc.want, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nConnect(): -want, +got:\n%s", tc.reason, diff)
			}
			if d.dialed != tc.dialed {
				t.Errorf("%s\nhost dialed %d times, want %d", tc.reason, d.dialed, tc.dialed)
			}
		})
	}
}
