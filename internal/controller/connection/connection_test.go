package connection

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// recorder is a fake event.Recorder that keeps what it was given.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Event(_ runtime.Object, e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}
func (r *recorder) WithAnnotations(...string) event.Recorder { return r }
func (r *recorder) reasons() []event.Reason {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Reason
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return out
}

// store serves a ClusterProviderConfig and its Secret to a MockClient.
func store(cpc *v1alpha1.ClusterProviderConfig, sec *corev1.Secret) test.MockGetFn {
	return func(_ context.Context, key client.ObjectKey, obj client.Object) error {
		switch o := obj.(type) {
		case *v1alpha1.ClusterProviderConfig:
			if key.Name == cpc.Name {
				*o = *cpc.DeepCopy()
				return nil
			}
		case *corev1.Secret:
			if key.Name == sec.Name && key.Namespace == sec.Namespace {
				*o = *sec.DeepCopy()
				return nil
			}
		}
		return kerrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
}

func managed() *v1alpha1.SeedVolume {
	mg := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "seed"}}
	mg.SetProviderConfigReference(&xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: "host"})
	return mg
}

// TestConnectTracksUsageFirst: usage is recorded before anything else, and a tracking
// failure stops the connect.
func TestConnectTracksUsageFirst(t *testing.T) {
	tracked := 0
	c := &Connector{
		Kube: &test.MockClient{MockGet: test.NewMockGetFn(nil)},
		Usage: resource.ModernTrackerFn(func(context.Context, resource.ModernManaged) error {
			tracked++
			return kerrors.NewForbidden(schema.GroupResource{}, "x", nil)
		}),
		Conns: host.NewConnections(),
	}
	_, err := c.Connect(context.Background(), managed())
	want := errors.Wrap(kerrors.NewForbidden(schema.GroupResource{}, "x", nil), errTrackUsage)
	if diff := cmp.Diff(want, err, test.EquateErrors()); diff != "" || tracked != 1 {
		t.Fatalf("Connect(): want the tracking error after one Track call (tracked %d):\n-want, +got:\n%s", tracked, diff)
	}
}

// TestConnectDeletingIgnoresUsage: a resource being deleted goes on to resolve its config when
// its usage cannot be recorded (a terminating namespace forbids creating it).
func TestConnectDeletingIgnoresUsage(t *testing.T) {
	c := &Connector{
		Kube: &test.MockClient{MockGet: test.NewMockGetFn(kerrors.NewNotFound(schema.GroupResource{}, "host"))},
		Usage: resource.ModernTrackerFn(func(context.Context, resource.ModernManaged) error {
			return kerrors.NewForbidden(schema.GroupResource{}, "x", errors.New("unable to create new content in namespace team-a because it is being terminated"))
		}),
		Conns: host.NewConnections(),
	}
	mg := managed()
	now := metav1.Now()
	mg.SetDeletionTimestamp(&now)
	_, err := c.Connect(context.Background(), mg)
	if err == nil || strings.Contains(err.Error(), errTrackUsage) || !strings.Contains(err.Error(), errResolve) {
		t.Fatalf("Connect() of a deleted resource: want the config's resolution error, not %q; got %v", errTrackUsage, err)
	}
}

// TestConnectRealHost connects through the real sshd of the test bed, with the config read
// from (fake) Kubernetes objects: insecure connections warn every time one is opened, an
// unreachable host fails fast with a message naming the config.
func TestConnectRealHost(t *testing.T) {
	tb := testbed.Require(t)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: "ssh"},
		Data:       map[string][]byte{"key": tb.Read(t, tb.KeyFile), "known_hosts": tb.Read(t, tb.KnownHostsFile)},
	}
	sel := func(k string) v1alpha1.SecretKeySelector {
		return v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: "ssh", Key: k}
	}
	cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "host"}, Spec: v1alpha1.ProviderConfigSpec{
		Transport: v1alpha1.TransportSSH, Host: tb.SSHHost, Port: int32(tb.SSHPort), User: tb.SSHUser,
		Credentials:   &v1alpha1.SSHCredentials{SecretRef: sel("key")},
		KnownHosts:    &v1alpha1.KnownHosts{SecretRef: sel("known_hosts")},
		LibvirtSocket: tb.LibvirtSocket, URI: "qemu:///system",
		Defaults: v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeQEMU, Pool: tb.Pool, Network: "default"},
	}}
	noTrack := resource.ModernTrackerFn(func(context.Context, resource.ModernManaged) error { return nil })
	listDomains := func(s *Session) error {
		return s.Do(context.Background(), func(l *libvirt.Libvirt) error {
			_, _, err := l.ConnectListAllDomains(1, 0)
			return err
		})
	}

	t.Run("PinnedHostKey", func(t *testing.T) {
		rec := &recorder{}
		conns := host.NewConnections()
		defer conns.Close()
		c := &Connector{Kube: &test.MockClient{MockGet: store(cpc, sec)}, Usage: noTrack, Conns: conns, Recorder: rec}
		s, err := c.Connect(context.Background(), managed())
		if err != nil {
			t.Fatalf("Connect(): %v", err)
		}
		if err := listDomains(s); err != nil {
			t.Fatalf("list domains: %v", err)
		}
		if s.Defaults.Pool != tb.Pool || s.Source != "ClusterProviderConfig/host" {
			t.Errorf("session defaults %+v source %q", s.Defaults, s.Source)
		}
		if got := rec.reasons(); len(got) != 0 {
			t.Errorf("events for a pinned connection: %v", got)
		}
	})

	t.Run("InsecureWarnsOnEveryOpen", func(t *testing.T) {
		insecure := cpc.DeepCopy()
		insecure.Spec.KnownHosts, insecure.Spec.InsecureSkipHostKeyVerification = nil, true
		rec := &recorder{}
		conns := host.NewConnections()
		defer conns.Close()
		c := &Connector{Kube: &test.MockClient{MockGet: store(insecure, sec)}, Usage: noTrack, Conns: conns, Recorder: rec}
		s, err := c.Connect(context.Background(), managed())
		if err != nil {
			t.Fatalf("Connect(): %v", err)
		}
		if _, err := c.Connect(context.Background(), managed()); err != nil { // pooled: no new open
			t.Fatalf("second Connect(): %v", err)
		}
		if got := rec.reasons(); len(got) != 1 || got[0] != ReasonInsecureConnection {
			t.Fatalf("after one open: events %v, want one %s", got, ReasonInsecureConnection)
		}
		tb.Control(t, "kill-ssh-sessions", strconv.Itoa(os.Getpid())) // this package's sessions only: the bed is shared
		deadline := time.Now().Add(20 * time.Second)
		for listDomains(s) != nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if err := listDomains(s); err != nil {
			t.Fatalf("list domains after the SSH session was killed: %v", err)
		}
		if got := rec.reasons(); len(got) != 2 {
			t.Errorf("after a reopen: events %v, want two %s", got, ReasonInsecureConnection)
		}
		for _, e := range rec.events {
			if strings.Contains(e.Message, "PRIVATE KEY") {
				t.Errorf("event leaks the key: %s", e.Message)
			}
		}
	})

	t.Run("UnreachableHost", func(t *testing.T) {
		down := cpc.DeepCopy()
		down.Spec.Port = 1 // nothing listens on 127.0.0.1:1 in the namespace
		conns := host.NewConnections(host.WithDialTimeout(3 * time.Second))
		defer conns.Close()
		c := &Connector{Kube: &test.MockClient{MockGet: store(down, sec)}, Usage: noTrack, Conns: conns}
		_, err := c.Connect(context.Background(), managed())
		if err == nil || !strings.Contains(err.Error(), "cannot connect to the libvirt host of ClusterProviderConfig/host") {
			t.Fatalf("Connect(): want a connect error naming the config, got %v", err)
		}
	})
}
