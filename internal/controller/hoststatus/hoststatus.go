// Package hoststatus writes the status of ProviderConfigs and ClusterProviderConfigs: whether
// their host is Ready (SSH reachable, host key matches, libvirt answers; else the precise
// reason), its versions, CPUs and memory, the pools the provider's objects use, what those
// objects take, and lastSeen. It reads each host on its own poll, and at once when the pooled
// connection of its last read goes down or comes back (Signals), through the shared pooled
// connection the managed resources use, and raises events when a host becomes unready, a pool
// falls under 10% free, or a host is cordoned (spec.unschedulable).
//
// After each successful read it sweeps the host for orphans (sweep.go): objects with our
// ownership record whose managed resource is gone, listed in status.host.orphans and removed
// under spec.orphans: Delete after the grace period.
//
// The pure parts are in status.go (condition, figures, events) and orphans.go (which objects
// are orphans, which may go now); what a read asks of the host and remembers between polls is
// in read.go; cached base images are swept through the image cache (images.go).
package hoststatus

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/ratelimiter"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/connection"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostconfig"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// Kind is the kind label of the libvirt calls of status reads (provider_kvm_libvirt_calls_total).
const Kind = "HostStatus"

const (
	// DefaultUnreadyPoll is how often an unready host is read again (at most the poll).
	DefaultUnreadyPoll = 15 * time.Second
	// DefaultTimeout bounds one reconcile.
	DefaultTimeout = time.Minute

	errGet          = "cannot get %s"
	errResolve      = "cannot read the config"
	errUpdateStatus = "cannot update the status of %s"

	msgInsecure = "opened an SSH connection to %s without verifying its host key (insecureSkipHostKeyVerification): anyone who can intercept the connection can impersonate the host; pin the key with knownHosts"
)

// Connections hands out connections to hosts; *host.Connections is one.
type Connections = connection.Connections

// ops are the accessors of one kind of config.
type ops struct {
	kind   string
	new    func() client.Object
	spec   func(client.Object) *v1alpha1.ProviderConfigSpec
	status func(client.Object) *v1alpha1.ProviderConfigStatus
}

var (
	pcOps = ops{
		kind:   v1alpha1.ProviderConfigKind,
		new:    func() client.Object { return &v1alpha1.ProviderConfig{} },
		spec:   func(o client.Object) *v1alpha1.ProviderConfigSpec { return &o.(*v1alpha1.ProviderConfig).Spec },
		status: func(o client.Object) *v1alpha1.ProviderConfigStatus { return &o.(*v1alpha1.ProviderConfig).Status },
	}
	cpcOps = ops{
		kind: v1alpha1.ClusterProviderConfigKind,
		new:  func() client.Object { return &v1alpha1.ClusterProviderConfig{} },
		spec: func(o client.Object) *v1alpha1.ProviderConfigSpec { return &o.(*v1alpha1.ClusterProviderConfig).Spec },
		status: func(o client.Object) *v1alpha1.ProviderConfigStatus {
			return &o.(*v1alpha1.ClusterProviderConfig).Status
		},
	}
)

// Reconciler writes the host status of one kind of config.
type Reconciler struct {
	kube client.Client
	// api reads past the cache: what the orphan sweep confirms before it removes anything.
	api    client.Reader
	ops    ops
	conns  Connections
	memo   *Memo
	record event.Recorder
	log    logging.Logger
	// poll is how often a Ready host is read; unreadyPoll an unready one.
	poll, unreadyPoll time.Duration
	timeout           time.Duration
	// host makes the libvirt client of a connection.
	host func(c *host.Conn, r *hostconfig.Resolved) Host
	// images makes the image cache of a connection for the orphan sweep of cached base
	// images; nil sweeps none.
	images func(c *host.Conn, r *hostconfig.Resolved, alive imagecache.Liveness) ImageSweeper
	// clusterID is the provider's --cluster-id: the orphan sweeps leave objects whose records
	// name another cluster.
	clusterID string
	// signals, when not nil, learns what each read found, so that a change of the connection
	// it used requeues the config (Signals).
	signals *Signals
}

// Setup adds the host status controllers of ProviderConfigs and ClusterProviderConfigs to mgr.
// They read hosts through conns, the pool the managed resources share, with libvirt clients
// sharing lvs, every o.PollInterval while a host is Ready and every DefaultUnreadyPoll (at
// most the poll) while it is not, and at once when signals (when not nil; the pool's
// WithOnState callback is its Notify) says the connection a host's last read used went down
// while it was Ready, or came up while it was not. The orphan sweep of cached base images uses
// images, the process's image cache state. clusterID is the provider's --cluster-id ("" for
// none): the orphan sweeps leave what another cluster sharing the hosts made.
func Setup(mgr ctrl.Manager, o controller.Options, conns Connections, signals *Signals, lvs *lv.Shared, images *imagecache.Shared, clusterID string) error {
	memo := NewMemo(time.Now, DefaultRecheck)
	for _, k := range []ops{pcOps, cpcOps} {
		name := "hoststatus/" + strings.ToLower(k.kind)
		r := &Reconciler{
			kube: mgr.GetClient(), api: mgr.GetAPIReader(), ops: k, conns: conns, memo: memo,
			record:      event.NewAPIRecorder(mgr.GetEventRecorderFor(name)), //nolint:staticcheck // crossplane-runtime's recorder still takes the old events API.
			log:         o.Logger.WithValues("controller", name),
			poll:        o.PollInterval,
			unreadyPoll: min(DefaultUnreadyPoll, o.PollInterval),
			timeout:     DefaultTimeout,
			signals:     signals,
			clusterID:   clusterID,
			host: func(c *host.Conn, res *hostconfig.Resolved) Host {
				h := res.Host.WithDefaults()
				return lv.New(c, lvs, lv.WithSocket(h.Socket), lv.WithURI(h.URI), lv.WithKind(Kind))
			},
			images: func(c *host.Conn, res *hostconfig.Resolved, alive imagecache.Liveness) ImageSweeper {
				h := res.Host.WithDefaults()
				l := lv.New(c, lvs, lv.WithSocket(h.Socket), lv.WithURI(h.URI), lv.WithKind(Kind))
				// No downloads; no overlay pools: every pool's doubts keep a volume.
				return imagecache.New(l, images, imagecache.Downloads{}, imagecache.WithLiveness(alive))
			},
		}
		if r.poll <= 0 {
			r.poll = time.Minute
			r.unreadyPoll = DefaultUnreadyPoll
		}
		b := ctrl.NewControllerManagedBy(mgr).
			Named(name).
			WithOptions(o.ForControllerRuntime()).
			// Spec changes (a cordon, a new key) are read at once; the status this controller
			// writes does not wake it, its poll and its host's connection do.
			For(k.new(), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
		if signals != nil {
			b = b.WatchesRawSource(signals.Source(k.kind))
		}
		if err := b.Complete(ratelimiter.NewReconciler(name, r, o.GlobalRateLimiter)); err != nil {
			return errors.Wrapf(err, "cannot set up the host status controller of %s", k.kind)
		}
	}
	return nil
}

// Reconcile reads the config's host and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	ref := ConfigRef{Kind: r.ops.kind, NamespacedName: req.NamespacedName}
	obj := r.ops.new()
	if err := r.kube.Get(ctx, req.NamespacedName, obj); err != nil {
		if kerrors.IsNotFound(err) {
			r.forget(ref)
			metrics.ForgetHost(configLabel(r.ops.kind, req.Namespace, req.Name)) // a deleted config's gauges go with it
		}
		return reconcile.Result{}, errors.Wrapf(client.IgnoreNotFound(err), errGet, r.ops.kind)
	}
	if meta.WasDeleted(obj) {
		r.forget(ref)
		metrics.ForgetHost(configLabel(r.ops.kind, obj.GetNamespace(), obj.GetName()))
		return reconcile.Result{}, nil
	}
	spec, st := r.ops.spec(obj), r.ops.status(obj)
	old := *st.DeepCopy()

	var prev *v1alpha1.HostOrphans
	if old.Host != nil {
		prev = old.Host.Orphans
	}
	rd := r.read(ctx, obj, spec, prev)
	err := rd.err
	if err == nil {
		err = Missing(rd.status, spec.Defaults.Pool) // the host answers, but lacks what the provider needs
	}
	cond := Condition(rd.stage, err)
	addr := rd.address
	*st = Next(old, spec.Unschedulable, addr, cond, rd.status)
	if err := r.kube.Status().Update(ctx, obj); err != nil {
		return reconcile.Result{}, errors.Wrapf(err, errUpdateStatus, r.ops.kind+"/"+obj.GetName())
	}
	if r.signals != nil {
		if rd.key == "" {
			r.signals.Forget(ref)
		} else {
			r.signals.Record(ref, Seen{Key: rd.key, Ready: cond.Status == corev1.ConditionTrue})
		}
	}
	for _, e := range Events(old, *st) {
		r.record.Event(obj, e)
	}
	r.log.Debug("Read host", "config", r.ops.kind+"/"+obj.GetName(), "address", addr, "ready", describe(*st))
	if cond.Status != corev1.ConditionTrue {
		return reconcile.Result{RequeueAfter: r.unreadyPoll}, nil
	}
	return reconcile.Result{RequeueAfter: r.poll}, nil
}

// forget tells the signals, if any, that ref is gone.
func (r *Reconciler) forget(ref ConfigRef) {
	if r.signals != nil {
		r.signals.Forget(ref)
	}
}

// hostRead is what one read of a config's host found.
type hostRead struct {
	// stage is how far the read got.
	stage Stage
	// address and key are the host's address and its pooled connection's key (host.Config.Key),
	// once the config was read.
	address, key string
	// status is the host's status when the read succeeded.
	status *v1alpha1.HostStatus
	// err stopped the read.
	err error
}

// read reads the host of obj. A successful read is followed by the orphan sweep (prev: the
// orphans of the last read).
func (r *Reconciler) read(ctx context.Context, obj client.Object, spec *v1alpha1.ProviderConfigSpec, prev *v1alpha1.HostOrphans) hostRead {
	ref := &xpv2.ProviderConfigReference{Kind: r.ops.kind, Name: obj.GetName()}
	res, err := hostconfig.ResolveRef(ctx, r.kube, obj.GetNamespace(), ref)
	if err != nil {
		return hostRead{stage: StageConfig, err: errors.Wrap(err, errResolve)}
	}
	addr, key := res.Host.Address(), res.Host.Key()
	ctx = metrics.WithKind(host.ContextWithOnOpen(ctx, func(info host.OpenInfo) {
		if info.Insecure {
			r.record.Event(obj, event.Warning(connection.ReasonInsecureConnection, errors.Errorf(msgInsecure, info.Address)))
		}
	}), Kind)
	conn, err := r.conns.Get(ctx, res.Host)
	if err != nil {
		r.memo.Forget(addr)
		return hostRead{stage: StageConnect, address: addr, key: key, err: err}
	}
	pools := r.pools(ctx, obj.GetNamespace(), ref, spec.Defaults.Pool)
	h := r.host(conn, res)
	rd, err := r.memo.Read(ctx, h, addr, pools)
	if err != nil {
		r.memo.Forget(addr)
		return hostRead{stage: StageRead, address: addr, key: key, err: err}
	}
	hs := Figures(addr, rd, metav1.Now())
	metrics.Host(configLabel(r.ops.kind, obj.GetNamespace(), obj.GetName()), Gauges(rd))
	var images func(imagecache.Liveness) ImageSweeper
	if r.images != nil {
		images = func(alive imagecache.Liveness) ImageSweeper { return r.images(conn, res, alive) }
	}
	hs.Orphans = r.sweep(ctx, obj, spec, h, images, addr, rd, prev)
	return hostRead{stage: StageRead, address: addr, key: key, status: hs}
}

// pools are the pools whose figures the status shows: the config's default pool and every
// pool a managed resource that uses the config names. A list that cannot be read only leaves
// its pools out (the default pool is always read).
func (r *Reconciler) pools(ctx context.Context, namespace string, ref *xpv2.ProviderConfigReference, def string) []string {
	if def == "" {
		def = "default"
	}
	set := map[string]bool{def: true}
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	for _, l := range []client.ObjectList{&v1alpha1.KVMDomainList{}, &v1alpha1.SeedVolumeList{}, &v1alpha1.BaseImageList{}} {
		if err := r.kube.List(ctx, l, opts...); err != nil {
			r.log.Debug("Cannot list managed resources for their pools", "list", fmt.Sprintf("%T", l), "error", err)
			continue
		}
		for _, u := range poolUses(l) {
			if u.ref != nil && u.ref.Kind == ref.Kind && u.ref.Name == ref.Name && u.pool != "" {
				set[u.pool] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// poolUse is a managed resource's config and the pool it names.
type poolUse struct {
	ref  *xpv2.ProviderConfigReference
	pool string
}

// poolUses are the configs and pools of the managed resources of a list.
func poolUses(l client.ObjectList) []poolUse {
	var out []poolUse
	switch l := l.(type) {
	case *v1alpha1.KVMDomainList:
		for i := range l.Items {
			out = append(out, poolUse{l.Items[i].GetProviderConfigReference(), l.Items[i].Spec.ForProvider.Pool})
		}
	case *v1alpha1.SeedVolumeList:
		for i := range l.Items {
			out = append(out, poolUse{l.Items[i].GetProviderConfigReference(), l.Items[i].Spec.ForProvider.Pool})
		}
	case *v1alpha1.BaseImageList:
		for i := range l.Items {
			out = append(out, poolUse{l.Items[i].GetProviderConfigReference(), l.Items[i].Spec.ForProvider.Pool})
		}
	}
	return out
}
