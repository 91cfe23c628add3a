package hoststatus

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostconfig"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

const secretBytes = "PRIVATE-KEY-MATERIAL-NEVER-SHOWN"

// fakeConns hands out connections or fails.
type fakeConns struct {
	err error
	got []host.Config
}

func (f *fakeConns) Get(_ context.Context, c host.Config) (*host.Conn, error) {
	f.got = append(f.got, c)
	if f.err != nil {
		return nil, f.err
	}
	return &host.Conn{}, nil
}

// recorder keeps the events raised.
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

func cpc(unschedulable bool) *v1alpha1.ClusterProviderConfig {
	c := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	c.Spec = v1alpha1.ProviderConfigSpec{Transport: v1alpha1.TransportSSH, Host: "h", Port: 22, User: "root",
		Credentials:   &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Namespace: "kvm", Name: "key", Key: "id"}},
		KnownHosts:    &v1alpha1.KnownHosts{SecretRef: v1alpha1.SecretKeySelector{Namespace: "kvm", Name: "key", Key: "known_hosts"}},
		Defaults:      v1alpha1.HostDefaults{Pool: "default"},
		Unschedulable: unschedulable}
	return c
}

func TestReconcile(t *testing.T) {
	mismatch := &host.HostKeyError{Reason: host.HostKeyMismatch, Host: "h", Presented: "ssh-ed25519 SHA256:AAA", Known: []string{"ssh-ed25519 SHA256:BBB"}}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kvm", Name: "key"},
		Data: map[string][]byte{"id": []byte(secretBytes), "known_hosts": []byte("h ssh-ed25519 AAAA")}}
	type want struct {
		result  reconcile.Result
		reason  xpv2.ConditionReason
		status  corev1.ConditionStatus
		domains int32
		cpus    int32
		cordon  bool
		orphans int32
		events  []event.Reason
	}
	// live owns the fake host's domains (their records name UID u1).
	live := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "proxy", UID: "u1"}}
	cases := map[string]struct {
		reason  string
		objs    []runtime.Object
		connErr error
		want    want
	}{
		"Ready": {
			reason: "a host read in full: figures, Ready, next read at the poll",
			objs:   []runtime.Object{cpc(false), key, live},
			want:   want{result: reconcile.Result{RequeueAfter: time.Minute}, reason: ReasonHostReady, status: corev1.ConditionTrue, domains: 2, cpus: 8},
		},
		"Orphans": {
			reason: "domains whose record names a UID no KVMDomain has are orphans: counted, with a warning; Report removes nothing",
			objs:   []runtime.Object{cpc(false), key},
			want: want{result: reconcile.Result{RequeueAfter: time.Minute}, reason: ReasonHostReady, status: corev1.ConditionTrue, domains: 2, cpus: 8,
				orphans: 2, events: []event.Reason{ReasonOrphans}},
		},
		"Cordoned": {
			reason: "spec.unschedulable is recorded in status, with an event",
			objs:   []runtime.Object{cpc(true), key, live},
			want: want{result: reconcile.Result{RequeueAfter: time.Minute}, reason: ReasonHostReady, status: corev1.ConditionTrue, domains: 2, cpus: 8, cordon: true,
				events: []event.Reason{ReasonCordoned}},
		},
		"HostKeyMismatch": {
			reason:  "a wrong pinned key: unready with both fingerprints, a warning, read again soon",
			objs:    []runtime.Object{cpc(false), key},
			connErr: mismatch,
			want:    want{result: reconcile.Result{RequeueAfter: 15 * time.Second}, reason: ReasonHostKeyMismatch, status: corev1.ConditionFalse, events: []event.Reason{ReasonBecameUnready}},
		},
		"MissingSecret": {
			reason: "the key's Secret is missing: ConfigError, nothing dialled",
			objs:   []runtime.Object{cpc(false)},
			want:   want{result: reconcile.Result{RequeueAfter: 15 * time.Second}, reason: ReasonConfigError, status: corev1.ConditionFalse, events: []event.Reason{ReasonBecameUnready}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			_ = corev1.AddToScheme(s)
			kube := fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(tc.objs...).WithStatusSubresource(&v1alpha1.ClusterProviderConfig{}).Build()
			rec := &recorder{}
			conns := &fakeConns{err: tc.connErr}
			r := &Reconciler{kube: kube, api: kube, ops: cpcOps, conns: conns, memo: NewMemo(time.Now, DefaultRecheck), record: rec, log: logging.NewNopLogger(),
				poll: time.Minute, unreadyPoll: 15 * time.Second, timeout: time.Minute,
				host: func(*host.Conn, *hostconfig.Resolved) Host { return newFakeHost() }}
			res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "a"}})
			if err != nil {
				t.Fatalf("%s\nReconcile(): %v", tc.reason, err)
			}
			got := &v1alpha1.ClusterProviderConfig{}
			if err := kube.Get(context.Background(), types.NamespacedName{Name: "a"}, got); err != nil {
				t.Fatal(err)
			}
			c := got.Status.GetCondition(xpv2.TypeReady)
			g := want{result: res, reason: c.Reason, status: c.Status, cordon: got.Status.Unschedulable}
			if got.Status.Host != nil {
				g.domains, g.cpus = got.Status.Host.Managed.Domains, got.Status.Host.CPUs
				if got.Status.Host.Orphans != nil {
					g.orphans = got.Status.Host.Orphans.Count
				}
			}
			for _, e := range rec.events {
				g.events = append(g.events, e.Reason)
			}
			if diff := cmp.Diff(tc.want, g, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nReconcile(): -want, +got:\n%s", tc.reason, diff)
			}
			if tc.connErr != nil && (!strings.Contains(c.Message, "SHA256:AAA") || !strings.Contains(c.Message, "SHA256:BBB")) {
				t.Errorf("%s\nmessage %q does not name both fingerprints", tc.reason, c.Message)
			}
			// Secrets never reach status or events.
			b, _ := json.Marshal(got.Status)
			for _, e := range rec.events {
				b = append(b, e.Message...)
			}
			if strings.Contains(string(b), secretBytes) {
				t.Errorf("%s\nthe private key reached status or events: %s", tc.reason, b)
			}
		})
	}
}

// TestReconcileOrphans: the sweep through a reconcile. A list of managed resources that
// fails makes no decision (the orphans of the last read stay, nothing is removed); Delete with
// no grace removes the orphans and counts them.
func TestReconcileOrphans(t *testing.T) {
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kvm", Name: "key"},
		Data: map[string][]byte{"id": []byte(secretBytes), "known_hosts": []byte("h ssh-ed25519 AAAA")}}
	prev := &v1alpha1.HostOrphans{Count: 7, Names: []string{"domain x_y"}, Deleted: 1}
	cases := map[string]struct {
		reason    string
		listErr   error
		policy    v1alpha1.OrphanPolicy
		want      *v1alpha1.HostOrphans
		undefined int
		events    []event.Reason
		// api holds what the API server has past the cache (nil: the same as the cache).
		api []runtime.Object
		// swept are the pools whose cached images were swept (the fake removes one each).
		swept []string
	}{
		"CacheLags": {
			reason: "the cache lists no KVMDomain, but the API server has the records' owner: nothing is removed",
			policy: v1alpha1.OrphansDelete,
			api:    []runtime.Object{&v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "proxy", UID: "u1"}}},
			want:   &v1alpha1.HostOrphans{Count: 2, Names: []string{"domain team-a_proxy", "domain team-b_db"}, Deleted: 2},
			swept:  []string{"default"},
			events: []event.Reason{ReasonOrphanRemoved},
		},
		"ListFails": {
			reason:  "a list that cannot be read is never taken for empty: no decision, the last orphans stay",
			listErr: errors.New("boom"),
			policy:  v1alpha1.OrphansDelete,
			want:    prev,
		},
		"Report": {
			reason: "Report names the orphans and removes nothing",
			policy: v1alpha1.OrphansReport,
			want:   &v1alpha1.HostOrphans{Count: 2, Names: []string{"domain team-a_proxy", "domain team-b_db"}, Deleted: 1},
		},
		"Delete": {
			reason:    "Delete with no grace removes both orphan domains and sweeps the pool's cached images, with an event each",
			policy:    v1alpha1.OrphansDelete,
			want:      &v1alpha1.HostOrphans{Count: 0, Deleted: 4},
			undefined: 2,
			swept:     []string{"default"},
			events:    []event.Reason{ReasonOrphanRemoved, ReasonOrphanRemoved, ReasonOrphanRemoved},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			_ = corev1.AddToScheme(s)
			c := cpc(false)
			c.Spec.Orphans = tc.policy
			c.Spec.OrphanGracePeriod = &metav1.Duration{}
			c.Status.Host = &v1alpha1.HostStatus{Orphans: prev.DeepCopy()}
			kube := fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(c, key).WithStatusSubresource(&v1alpha1.ClusterProviderConfig{}).
				WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, cl client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
					if _, ok := l.(*v1alpha1.KVMDomainList); ok && tc.listErr != nil {
						return tc.listErr
					}
					return cl.List(ctx, l, opts...)
				}}).Build()
			rec := &recorder{}
			h := newFakeHost()
			var api client.Reader = kube
			if tc.api != nil {
				api = fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(tc.api...).Build()
			}
			r := &Reconciler{kube: kube, api: api, ops: cpcOps, conns: &fakeConns{}, memo: NewMemo(time.Now, DefaultRecheck), record: rec, log: logging.NewNopLogger(),
				poll: time.Minute, unreadyPoll: 15 * time.Second, timeout: time.Minute,
				host: func(*host.Conn, *hostconfig.Resolved) Host { return h }}
			is := &fakeImages{}
			r.images = func(*host.Conn, *hostconfig.Resolved, imagecache.Liveness) ImageSweeper { return is }
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "a"}}); err != nil {
				t.Fatalf("%s\nReconcile(): %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.swept, is.pools); diff != "" {
				t.Errorf("%s\npools whose cached images were swept: -want, +got:\n%s", tc.reason, diff)
			}
			got := &v1alpha1.ClusterProviderConfig{}
			if err := kube.Get(context.Background(), types.NamespacedName{Name: "a"}, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status.Host.Orphans); diff != "" {
				t.Errorf("%s\nstatus.host.orphans: -want, +got:\n%s", tc.reason, diff)
			}
			undefined := h.calls["UndefineDomain team-a_proxy"] + h.calls["UndefineDomain team-b_db"]
			if undefined != tc.undefined {
				t.Errorf("%s\ndomains undefined: %d, want %d", tc.reason, undefined, tc.undefined)
			}
			var evs []event.Reason
			for _, e := range rec.events {
				if e.Reason == ReasonOrphanRemoved {
					evs = append(evs, e.Reason)
				}
			}
			if diff := cmp.Diff(tc.events, evs); diff != "" {
				t.Errorf("%s\nremoval events: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// fakeImages is an image sweep that removes one volume per pool.
type fakeImages struct{ pools []string }

func (f *fakeImages) Sweep(_ context.Context, pool string) ([]string, map[string]error, error) {
	f.pools = append(f.pools, pool)
	return []string{"pkvm-base-x.qcow2"}, nil, nil
}

// TestReconcileOrphansNamespaced: a ProviderConfig with orphans: Delete removes only orphans
// whose record names its namespace, and never sweeps cached images (shared by every
// namespace).
func TestReconcileOrphansNamespaced(t *testing.T) {
	s := runtime.NewScheme()
	_ = v1alpha1.SchemeBuilder.AddToScheme(s)
	_ = corev1.AddToScheme(s)
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "key"},
		Data: map[string][]byte{"id": []byte(secretBytes), "known_hosts": []byte("h ssh-ed25519 AAAA")}}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "own"}, Spec: cpc(false).Spec}
	pc.Spec.Credentials.SecretRef.Namespace, pc.Spec.KnownHosts.SecretRef.Namespace = "", ""
	pc.Spec.Orphans, pc.Spec.OrphanGracePeriod = v1alpha1.OrphansDelete, &metav1.Duration{}
	kube := fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(pc, key).WithStatusSubresource(&v1alpha1.ProviderConfig{}).Build()
	h := newFakeHost()
	h.metadata["team-b_db"] = `<owner><managedBy>provider-kvm</managedBy><uid>u2</uid><namespace>team-b</namespace><name>db</name></owner>`
	is := &fakeImages{}
	r := &Reconciler{kube: kube, api: kube, ops: pcOps, conns: &fakeConns{}, memo: NewMemo(time.Now, DefaultRecheck), record: &recorder{}, log: logging.NewNopLogger(),
		poll: time.Minute, unreadyPoll: 15 * time.Second, timeout: time.Minute,
		host:   func(*host.Conn, *hostconfig.Resolved) Host { return h },
		images: func(*host.Conn, *hostconfig.Resolved, imagecache.Liveness) ImageSweeper { return is }}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-b", Name: "own"}}); err != nil {
		t.Fatalf("Reconcile(): %v", err)
	}
	got := &v1alpha1.ProviderConfig{}
	if err := kube.Get(context.Background(), types.NamespacedName{Namespace: "team-b", Name: "own"}, got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&v1alpha1.HostOrphans{Count: 0, Deleted: 1}, got.Status.Host.Orphans); diff != "" {
		t.Errorf("status.host.orphans: -want, +got:\n%s", diff)
	}
	if h.calls["UndefineDomain team-b_db"] != 1 || h.calls["UndefineDomain team-a_proxy"] != 0 {
		t.Errorf("undefined: %v; want team-b_db only", h.calls)
	}
	if len(is.pools) != 0 {
		t.Errorf("a ProviderConfig swept the cached images of %v", is.pools)
	}
}
