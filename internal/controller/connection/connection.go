// Package connection is the first step of every managed resource controller's reconcile: it
// records that the resource uses its ProviderConfig, reads that config and its Secrets, and
// hands back a pooled connection to the libvirt host.
//
// When the config sets insecureSkipHostKeyVerification, each newly opened SSH connection
// raises a warning event on the managed resource whose reconcile opened it.
package connection

import (
	"context"
	"net"
	"reflect"

	"github.com/digitalocean/go-libvirt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/meta"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/hostconfig"
	"github.com/provider-kvm/provider-kvm/internal/hostgrants"
	"github.com/provider-kvm/provider-kvm/internal/hostlimits"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

const (
	errTrackUsage   = "cannot track ProviderConfig usage"
	errResolve      = "cannot read the ProviderConfig"
	errConnect      = "cannot connect to the libvirt host of %s"
	errGetNamespace = "cannot read Namespace %s to match the namespace selectors of %s (the provider needs get on namespaces, see docs/platform-teams.md)"

	msgInsecure = "opened an SSH connection to %s without verifying its host key (insecureSkipHostKeyVerification on %s): anyone who can intercept the connection can impersonate the host; pin the key with knownHosts"
)

// ReasonInsecureConnection is the reason of the warning event raised for every SSH connection
// opened without host key verification.
const ReasonInsecureConnection event.Reason = "InsecureHostKey"

// Connections hands out connections to hosts; *host.Connections is one.
type Connections interface {
	Get(ctx context.Context, c host.Config) (*host.Conn, error)
}

// Connector connects managed resources to their hosts.
type Connector struct {
	Kube     client.Reader
	Usage    resource.ModernTracker
	Conns    Connections
	Recorder event.Recorder
	// Libvirt is what the libvirt clients of the process share (pool locks, domain handles).
	Libvirt *lv.Shared
	// Namespaces reads a resource's Namespace when the config selects namespaces by label; an
	// uncached reader, so the provider needs only get on namespaces (nil: Kube).
	Namespaces client.Reader
}

// Session is a managed resource's handle on its host.
type Session struct {
	conn   *host.Conn
	lv     *lv.Shared
	onOpen func(host.OpenInfo)
	// kind of the managed resource, the kind label of the libvirt calls counted for it.
	kind string

	// Defaults for fields the managed resource leaves empty.
	Defaults v1alpha1.HostDefaults
	// ImageSources bounds what BaseImages on this host download.
	ImageSources v1alpha1.ImageSourcePolicy
	// Source names the config, e.g. ClusterProviderConfig/default.
	Source string
	// Socket and URI of libvirt on the host, for connections of their own (see
	// libvirt.WithSocket).
	Socket, URI string
	// Unschedulable is true when the config cordons its host (spec.unschedulable): new
	// objects are not placed there.
	Unschedulable bool
	// Allocation is the config's spec.allocation: how far the provider's domains may commit
	// the host (internal/placement).
	Allocation *v1alpha1.AllocationRatios
	// ImportsAllowed is true when the config lets this resource import existing objects.
	ImportsAllowed bool
	// Grant is what the resource's namespace may use of the host: networks, bridges (with
	// their address ranges) and pools. Empty for a resource being deleted.
	Grant hostgrants.Grant
	// Limits cap sizes and per-namespace counts on the host, and the free space its pools
	// keep (spec.limits).
	Limits hostlimits.Limits
}

// Connect tracks mg's usage of its config, resolves the config and opens (or reuses) the
// pooled connection. A failure here leaves the resource Synced=False with the error.
//
// A resource being deleted connects even when its usage cannot be recorded: the namespace
// controller deletes a terminating namespace's ProviderConfigUsages and then forbids creating
// new ones, so an offboarded team's resources could otherwise never delete their VMs, and the
// namespace would stay Terminating for ever.
func (c *Connector) Connect(ctx context.Context, mg resource.ModernManaged) (*Session, error) {
	if err := c.Usage.Track(ctx, mg); err != nil && !meta.WasDeleted(mg) {
		return nil, errors.Wrap(err, errTrackUsage)
	}
	r, err := hostconfig.Resolve(ctx, c.Kube, mg)
	if err != nil {
		return nil, errors.Wrap(err, errResolve)
	}
	grant, err := c.grant(ctx, mg, r)
	if err != nil {
		return nil, err
	}
	h := r.Host.WithDefaults()
	s := &Session{lv: c.Libvirt, kind: Kind(mg), Defaults: r.Defaults, ImageSources: r.ImageSources, Source: r.Source, Socket: h.Socket, URI: h.URI,
		ImportsAllowed: r.ImportsAllowed(mg.GetNamespace()), Grant: grant}
	s.onOpen = func(info host.OpenInfo) {
		if info.Insecure && c.Recorder != nil {
			c.Recorder.Event(mg, event.Warning(ReasonInsecureConnection, errors.Errorf(msgInsecure, info.Address, r.Source)))
		}
	}
	s.Unschedulable = r.Unschedulable
	s.Allocation = r.Allocation
	s.Limits = hostlimits.Limits{HostLimits: r.Limits, Source: r.Source}
	if s.conn, err = c.Conns.Get(s.context(ctx), r.Host); err != nil {
		return nil, errors.Wrapf(err, errConnect, r.Source)
	}
	return s, nil
}

// grant refuses a namespace the config does not admit (spec.allowedNamespaces), before any
// connection to the host, and returns what the namespace may use of the host. A resource being
// deleted is never refused: it removes what it made, even after its namespace lost access.
func (c *Connector) grant(ctx context.Context, mg resource.Managed, r *hostconfig.Resolved) (hostgrants.Grant, error) {
	if meta.WasDeleted(mg) {
		return hostgrants.Grant{}, nil
	}
	spec := v1alpha1.ProviderConfigSpec{Defaults: r.Defaults, Attachments: r.Attachments, AllowedNamespaces: r.AllowedNamespaces}
	ns := hostgrants.Namespace{Name: mg.GetNamespace()}
	if hostgrants.NeedsLabels(spec) {
		rd := c.Namespaces
		if rd == nil {
			rd = c.Kube
		}
		n := &corev1.Namespace{}
		if err := rd.Get(ctx, types.NamespacedName{Name: ns.Name}, n); err != nil {
			return hostgrants.Grant{}, errors.Wrapf(err, errGetNamespace, ns.Name, r.Source)
		}
		ns.Labels = n.GetLabels()
	}
	if err := hostgrants.Admit(r.Source, r.AllowedNamespaces, ns); err != nil {
		return hostgrants.Grant{}, err
	}
	return hostgrants.For(r.Source, spec, ns, r.Namespaced)
}

// Do runs fn with the host's libvirt client, bounded by ctx. If the connection dropped since
// Connect, Do reopens it (and warns again when that connection is insecure).
func (s *Session) Do(ctx context.Context, fn func(l *libvirt.Libvirt) error) error {
	return s.conn.Do(s.context(ctx), fn)
}

// context is ctx with the session's hooks: the warning on an insecure new connection, and the
// kind label of the libvirt calls counted (internal/metrics).
func (s *Session) context(ctx context.Context) context.Context {
	return metrics.WithKind(host.ContextWithOnOpen(ctx, s.onOpen), s.kind)
}

// Kind is the kind of a managed resource (its Go type's name when its TypeMeta is empty, as
// it is for objects read from the cache): the kind label of the libvirt calls its reconcile
// makes.
func Kind(mg resource.Managed) string {
	if k := mg.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	t := reflect.TypeOf(mg)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// DialContext dials addr from the host, e.g. to probe a guest that only the host can reach.
func (s *Session) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.conn.DialContext(s.context(ctx), network, addr)
}

// Libvirt returns the typed libvirt client of the session's host: the one way every external
// client reaches libvirt (connections of its own, for downloads, use the config's socket and
// URI).
func (s *Session) Libvirt() *lv.Client {
	return lv.New(s, s.lv, lv.WithSocket(s.Socket), lv.WithURI(s.URI), lv.WithKind(s.kind))
}

// Conn returns the underlying pooled connection.
func (s *Session) Conn() *host.Conn { return s.conn }

// Address names the host: user@host:port or unix:SOCKET.
func (s *Session) Address() string { return s.conn.Address() }

// NewConnector returns the Connector a managed resource controller uses: usage is tracked
// with ProviderConfigUsages, connections come from conns, warnings go to rec, and the libvirt
// clients share lvs (one per process).
func NewConnector(kube client.Client, conns Connections, rec event.Recorder, lvs *lv.Shared) *Connector {
	return &Connector{Libvirt: lvs,
		Kube: kube, Usage: resource.NewProviderConfigUsageTracker(kube, &v1alpha1.ProviderConfigUsage{}),
		Conns: conns, Recorder: rec,
	}
}

// Manager is what NewForManager needs of a controller manager.
type Manager interface {
	GetClient() client.Client
	GetAPIReader() client.Reader
}

// NewForManager is NewConnector with the manager's client, and its uncached reader for
// Namespaces (read only when a config selects namespaces by label).
func NewForManager(mgr Manager, conns Connections, rec event.Recorder, lvs *lv.Shared) *Connector {
	c := NewConnector(mgr.GetClient(), conns, rec, lvs)
	c.Namespaces = mgr.GetAPIReader()
	return c
}
