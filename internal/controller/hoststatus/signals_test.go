package hoststatus

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostconfig"
)

func TestWake(t *testing.T) {
	a := ConfigRef{Kind: v1alpha1.ClusterProviderConfigKind, NamespacedName: types.NamespacedName{Name: "a"}}
	b := ConfigRef{Kind: v1alpha1.ClusterProviderConfigKind, NamespacedName: types.NamespacedName{Name: "b"}}
	team := ConfigRef{Kind: v1alpha1.ProviderConfigKind, NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "a"}}
	cases := map[string]struct {
		reason string
		seen   map[ConfigRef]Seen
		state  host.State
		want   []ConfigRef
	}{
		"ReadyAndDown": {
			reason: "a Ready config whose connection went down is read at once",
			seen:   map[ConfigRef]Seen{a: {Key: "k1", Ready: true}},
			state:  host.State{Key: "k1"},
			want:   []ConfigRef{a},
		},
		"UnreadyAndUp": {
			reason: "an unready config whose connection came up (another reconcile reopened it) is read at once",
			seen:   map[ConfigRef]Seen{a: {Key: "k1"}},
			state:  host.State{Key: "k1", Up: true},
			want:   []ConfigRef{a},
		},
		"ReadyAndUp": {
			reason: "a connection opened for a Ready config changes nothing it says (its own read opened it)",
			seen:   map[ConfigRef]Seen{a: {Key: "k1", Ready: true}},
			state:  host.State{Key: "k1", Up: true},
		},
		"UnreadyAndDown": {
			reason: "a failed attempt for an unready config changes nothing it says (its own read's attempt)",
			seen:   map[ConfigRef]Seen{a: {Key: "k1"}},
			state:  host.State{Key: "k1"},
		},
		"OtherConnection": {
			reason: "a config whose last read used another connection (another key, another host) is left alone",
			seen:   map[ConfigRef]Seen{a: {Key: "k1", Ready: true}, b: {Key: "k2", Ready: true}},
			state:  host.State{Key: "k2"},
			want:   []ConfigRef{b},
		},
		"EveryConfigOfTheConnection": {
			reason: "every config that uses the connection, of either kind, in a stable order",
			seen:   map[ConfigRef]Seen{team: {Key: "k1", Ready: true}, b: {Key: "k1", Ready: true}, a: {Key: "k1", Ready: true}},
			state:  host.State{Key: "k1"},
			want:   []ConfigRef{a, b, team},
		},
		"NeverRead": {
			reason: "no config read yet: nothing",
			state:  host.State{Key: "k1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Wake(tc.seen, tc.state), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nWake(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// queued drains what Signals queued for kind's controller.
func queued(s *Signals, kind string) []types.NamespacedName {
	var out []types.NamespacedName
	for {
		select {
		case e := <-s.ch[kind]:
			out = append(out, client.ObjectKeyFromObject(e.Object))
		default:
			return out
		}
	}
}

// TestReconcileSignals: a reconcile records the pooled connection its read used and whether
// the host was Ready, so that the pool's change of that connection requeues the config in its
// kind's controller; a config that cannot be read or is gone is forgotten.
func TestReconcileSignals(t *testing.T) {
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kvm", Name: "key"},
		Data: map[string][]byte{"id": []byte(secretBytes), "known_hosts": []byte("h ssh-ed25519 AAAA")}}
	nn := types.NamespacedName{Name: "a"}
	cases := map[string]struct {
		reason  string
		objs    []runtime.Object
		connErr error
		// state is the pool's change told after the reconcile (its Key: the connection the read used).
		up bool
		// wantSeen: whether the config is recorded, and Ready.
		wantSeen, wantReady bool
		wantQueued          []types.NamespacedName
	}{
		"ReadyThenDown": {
			reason:   "a Ready host whose connection drops is requeued",
			objs:     []runtime.Object{cpc(false), key},
			wantSeen: true, wantReady: true,
			wantQueued: []types.NamespacedName{nn},
		},
		"ReadyThenUp": {
			reason:   "a Ready host's connection opening again requeues nothing",
			objs:     []runtime.Object{cpc(false), key},
			up:       true,
			wantSeen: true, wantReady: true,
		},
		"UnreadyThenUp": {
			reason:     "a host whose dial failed is requeued once its connection opens",
			objs:       []runtime.Object{cpc(false), key},
			connErr:    &host.LibvirtOpenError{URI: "qemu:///system", Err: context.DeadlineExceeded},
			up:         true,
			wantSeen:   true,
			wantQueued: []types.NamespacedName{nn},
		},
		"UnreadyThenDown": {
			reason:   "a host whose dial failed is not requeued by a further failure",
			objs:     []runtime.Object{cpc(false), key},
			connErr:  &host.LibvirtOpenError{URI: "qemu:///system", Err: context.DeadlineExceeded},
			wantSeen: true,
		},
		"ConfigUnreadable": {
			reason: "a config whose Secret is missing names no connection: forgotten",
			objs:   []runtime.Object{cpc(false)},
		},
		"Gone": {
			reason: "a config that is gone is forgotten",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			_ = corev1.AddToScheme(s)
			kube := fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(tc.objs...).WithStatusSubresource(&v1alpha1.ClusterProviderConfig{}).Build()
			sig := NewSignals()
			ref := ConfigRef{Kind: v1alpha1.ClusterProviderConfigKind, NamespacedName: nn}
			// What an earlier read recorded: a Gone or unreadable config must be forgotten.
			sig.Record(ref, Seen{Key: "earlier", Ready: true})
			conns := &fakeConns{err: tc.connErr}
			r := &Reconciler{kube: kube, api: kube, ops: cpcOps, conns: conns, memo: NewMemo(time.Now, DefaultRecheck), record: &recorder{}, log: logging.NewNopLogger(),
				poll: time.Minute, unreadyPoll: 15 * time.Second, timeout: time.Minute, signals: sig,
				host: func(*host.Conn, *hostconfig.Resolved) Host { return newFakeHost() }}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: nn}); err != nil {
				t.Fatalf("%s\nReconcile(): %v", tc.reason, err)
			}
			sn, ok := sig.seen[ref]
			if ok != tc.wantSeen || sn.Ready != tc.wantReady {
				t.Fatalf("%s\nrecorded %v %+v, want recorded %v, Ready %v", tc.reason, ok, sn, tc.wantSeen, tc.wantReady)
			}
			if !ok {
				return
			}
			if len(conns.got) != 1 || sn.Key != conns.got[0].Key() {
				t.Fatalf("%s\nrecorded key %q, not that of the connection the read asked for (%d asked)", tc.reason, sn.Key, len(conns.got))
			}
			sig.Notify(host.State{Key: "another connection", Up: tc.up})
			sig.Notify(host.State{Key: sn.Key, Up: tc.up})
			if diff := cmp.Diff(tc.wantQueued, queued(sig, v1alpha1.ClusterProviderConfigKind), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nrequeued: -want, +got:\n%s", tc.reason, diff)
			}
			if got := queued(sig, v1alpha1.ProviderConfigKind); len(got) != 0 {
				t.Errorf("%s\nthe ProviderConfig controller got %v", tc.reason, got)
			}
		})
	}
}
