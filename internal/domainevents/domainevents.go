// Package domainevents turns libvirt's domain lifecycle and guest agent lifecycle events into
// reconcile requests for the KVMDomains the domains belong to, so that a start, a crash, a
// shutdown or an agent coming up is observed within a second, not at the next poll.
//
// The host connections call Attach for every libvirt connection they open (the first, and
// each after a reconnect); Attach subscribes on it and forwards events until the connection
// ends. Then a few KVMDomains last seen on that host are requeued (MaxLostWake): their
// reconciles reopen the connection, and with it the subscription.
//
// Domain names are "<namespace>_<name>" on every host, so a name alone does not tell which
// KVMDomain an event is about: a team's own host (a namespaced ProviderConfig) could define
// domains named after another team's KVMDomains and flood them with requeues. An event is
// therefore forwarded only when it comes from the host its KVMDomain was last connected to
// (Bind, called by each KVMDomain reconcile).
package domainevents

import (
	"context"
	"strings"
	"sync"

	golibvirt "github.com/digitalocean/go-libvirt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// buffer is how many requests wait for the controller; more are dropped (a request that is
// already queued is merged by the work queue anyway, and the poll still comes).
const buffer = 1024

// Watcher forwards domain events of every host as KVMDomain reconcile requests.
type Watcher struct {
	log logging.Logger
	ch  chan event.TypedGenericEvent[client.Object]

	mu    sync.Mutex
	known map[string]map[types.NamespacedName]bool // by host address
	// bound is the host address each KVMDomain's config last resolved to (Bind).
	bound map[types.NamespacedName]string

	defs Definitions
}

// Definitions is told what a host's events say about its domains' definitions, so that it may
// remember them between reads while the events are watched (libvirt.Shared).
type Definitions interface {
	EventsWatched(address string)
	DomainChanged(address, domain string)
	EventsLost(address string)
}

// Option configures a Watcher.
type Option func(*Watcher)

// WithDefinitions tells d of every subscription and lifecycle event.
func WithDefinitions(d Definitions) Option { return func(w *Watcher) { w.defs = d } }

// New returns a Watcher.
func New(log logging.Logger, opts ...Option) *Watcher {
	w := &Watcher{log: log, ch: make(chan event.TypedGenericEvent[client.Object], buffer),
		known: map[string]map[types.NamespacedName]bool{}, bound: map[types.NamespacedName]string{}}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Bind records that the KVMDomain nn is on the host at address (as Attach names it: the
// address of its connection): from then on only that host's events of its domain requeue it.
// A KVMDomain that was never bound (not reconciled since the provider started, when every
// KVMDomain is reconciled anyway) is not requeued by events.
func (w *Watcher) Bind(nn types.NamespacedName, address string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bound[nn] = address
}

// Unbind forgets the KVMDomain nn: it is gone (its deletion finished), and nothing of it is
// requeued by events any more.
func (w *Watcher) Unbind(nn types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.bound, nn)
	for _, known := range w.known {
		delete(known, nn)
	}
}

// on is true when address is the host nn was last bound to.
func (w *Watcher) on(nn types.NamespacedName, address string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bound[nn] == address
}

// Source is the controller-runtime source of the KVMDomain controller's extra requests.
func (w *Watcher) Source() source.TypedSource[reconcile.Request] {
	return source.Channel(w.ch, &handler.EnqueueRequestForObject{})
}

// Resource returns the KVMDomain a domain name belongs to: names are "<namespace>_<name>"
// (internal/names), and Kubernetes names never contain "_". Other domains are not ours.
func Resource(domain string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(domain, "_")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// Attach subscribes to the lifecycle and guest agent events of the libvirt connection l of
// the host at address, and forwards them until ctx ends (the connection closed). It blocks;
// call it in a goroutine of its own.
func (w *Watcher) Attach(ctx context.Context, address string, l *golibvirt.Libvirt) {
	defer w.lost(address)
	lc, err := l.LifecycleEvents(ctx)
	if err != nil {
		w.log.Info("Cannot subscribe to domain lifecycle events: changes are seen at the next poll", "address", address, "error", err)
		return
	}
	if w.defs != nil {
		w.defs.EventsWatched(address)
		defer w.defs.EventsLost(address)
	}
	agent, err := l.SubscribeEvents(ctx, golibvirt.DomainEventIDAgentLifecycle, golibvirt.OptDomain{})
	if err != nil {
		w.log.Debug("Cannot subscribe to guest agent events", "address", address, "error", err)
		agent = nil
	}
	if doms, _, err := l.ConnectListAllDomains(1, 0); err == nil {
		for _, d := range doms {
			w.remember(address, d.Name, true)
		}
	}
	w.log.Debug("Watching domain events", "address", address)
	for lc != nil || agent != nil {
		select {
		case ev, ok := <-lc:
			if !ok {
				lc = nil
				continue
			}
			gone := golibvirt.DomainEventType(ev.Event) == golibvirt.DomainEventUndefined
			if w.defs != nil {
				w.defs.DomainChanged(address, ev.Dom.Name)
			}
			w.notify(address, ev.Dom.Name, !gone)
		case ev, ok := <-agent:
			if !ok {
				agent = nil
				continue
			}
			if m, isAgent := ev.(*golibvirt.DomainEventCallbackAgentLifecycleMsg); isAgent {
				w.notify(address, m.Dom.Name, true)
			}
		case <-ctx.Done():
			return
		}
	}
}

func (w *Watcher) remember(address, domain string, present bool) (types.NamespacedName, bool) {
	nn, ok := Resource(domain)
	if !ok {
		return nn, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.known[address] == nil {
		w.known[address] = map[types.NamespacedName]bool{}
	}
	if present {
		w.known[address][nn] = true
	} else {
		delete(w.known[address], nn)
	}
	return nn, true
}

// notify requeues the KVMDomain of domain, when address is its host.
func (w *Watcher) notify(address, domain string, present bool) {
	if nn, ok := w.remember(address, domain, present); ok && w.on(nn, address) {
		w.enqueue(nn)
	}
}

// MaxLostWake is how many KVMDomains last seen on a host are requeued when its connection ends:
// their reconciles open the next one, and with it the subscription. Not all of them: at a
// thousand domains a libvirtd restart would put a thousand reconciles in the queue at once,
// ahead of every other host's; the others see what changed meanwhile at their next poll.
const MaxLostWake = 16

// lost requeues up to MaxLostWake KVMDomains last seen on address (any of them: map order).
func (w *Watcher) lost(address string) {
	w.mu.Lock()
	var all []types.NamespacedName
	for nn := range w.known[address] {
		if len(all) == MaxLostWake {
			break
		}
		if w.bound[nn] == address {
			all = append(all, nn)
		}
	}
	w.mu.Unlock()
	for _, nn := range all {
		w.enqueue(nn)
	}
}

// Wake requeues the KVMDomain nn, e.g. when its readiness probe, run in the background, has a
// new result (probe.Prober). Like every request of the Watcher it is dropped when the buffer is
// full; the poll still comes.
func (w *Watcher) Wake(nn types.NamespacedName) { w.enqueue(nn) }

func (w *Watcher) enqueue(nn types.NamespacedName) {
	o := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name}}
	select {
	case w.ch <- event.TypedGenericEvent[client.Object]{Object: o}:
	default:
	}
}
