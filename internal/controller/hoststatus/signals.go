package hoststatus

import (
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
)

// signalBuffer is how many requests wait for each controller; more are dropped (a request
// already queued is merged by the work queue anyway, and the poll still comes).
const signalBuffer = 256

// ConfigRef names one config: its kind, and its namespace (empty for a ClusterProviderConfig)
// and name.
type ConfigRef struct {
	Kind string
	types.NamespacedName
}

// Seen is what the last read of a config found: the pooled connection it used
// (host.Config.Key) and whether the host was Ready.
type Seen struct {
	Key   string
	Ready bool
}

// Wake returns the configs to read again at once for the connection change s, sorted: those
// whose last read used that connection and whose readiness s contradicts (Ready and the
// connection went down, not Ready and it came up). A config never read since the process
// started is not among them (every config is read when its controller starts).
func Wake(seen map[ConfigRef]Seen, s host.State) []ConfigRef {
	var out []ConfigRef
	for ref, sn := range seen {
		if sn.Key == s.Key && sn.Ready != s.Up {
			out = append(out, ref)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.String() < b.String()
	})
	return out
}

// Signals turns the connection pool's changes (host.WithOnState: a pooled connection opened,
// ended or failed to open) into reconcile requests of the host status controllers, so that a
// host whose connection drops or comes back is read at once, not at the next poll. Make one
// with the pool (its Notify is the pool's WithOnState callback) and hand it to Setup.
type Signals struct {
	mu   sync.Mutex
	seen map[ConfigRef]Seen
	ch   map[string]chan event.TypedGenericEvent[client.Object] // by kind
}

// NewSignals returns Signals for ProviderConfigs and ClusterProviderConfigs.
func NewSignals() *Signals {
	s := &Signals{seen: map[ConfigRef]Seen{}, ch: map[string]chan event.TypedGenericEvent[client.Object]{}}
	for _, k := range []string{v1alpha1.ProviderConfigKind, v1alpha1.ClusterProviderConfigKind} {
		s.ch[k] = make(chan event.TypedGenericEvent[client.Object], signalBuffer)
	}
	return s
}

// Notify requeues the configs the change st concerns (Wake). It never blocks.
func (s *Signals) Notify(st host.State) {
	s.mu.Lock()
	refs := Wake(s.seen, st)
	s.mu.Unlock()
	for _, ref := range refs {
		s.enqueue(ref)
	}
}

// Record remembers what the last read of the config ref found.
func (s *Signals) Record(ref ConfigRef, sn Seen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[ref] = sn
}

// Forget forgets the config ref: it is gone, or its host could not even be named (its config
// could not be read); no change of a connection requeues it.
func (s *Signals) Forget(ref ConfigRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, ref)
}

// Source is the source of the extra requests of the host status controller of kind.
func (s *Signals) Source(kind string) source.TypedSource[reconcile.Request] {
	return source.Channel(s.ch[kind], &handler.EnqueueRequestForObject{})
}

func (s *Signals) enqueue(ref ConfigRef) {
	ch, ok := s.ch[ref.Kind]
	if !ok {
		return
	}
	o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
	select {
	case ch <- event.TypedGenericEvent[client.Object]{Object: o}:
	default:
	}
}
