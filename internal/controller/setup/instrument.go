package setup

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// The reasons crossplane-runtime's managed reconciler gives a failed step (its events and
// the Synced condition); failures are counted by them.
const (
	ReasonCannotConnect = "CannotConnectToProvider"
	ReasonCannotObserve = "CannotObserveExternalResource"
	ReasonCannotCreate  = "CannotCreateExternalResource"
	ReasonCannotUpdate  = "CannotUpdateExternalResource"
	ReasonCannotDelete  = "CannotDeleteExternalResource"
)

// Recorder is what instrument records into; metrics.Default is one.
type Recorder interface {
	ReconcileFailed(kind, reason string)
	External(kind, op string, d time.Duration)
}

// instrument wraps a connector so that failed steps are counted by reason, and Observe,
// Create, Update and Delete are timed, for kind.
func instrument[T resource.Managed](c managed.TypedExternalConnector[T], kind string, rec Recorder) managed.TypedExternalConnector[T] {
	return managed.TypedExternalConnectorFn[T](func(ctx context.Context, mg T) (managed.TypedExternalClient[T], error) {
		ec, err := c.Connect(ctx, mg)
		if err != nil {
			rec.ReconcileFailed(kind, ReasonCannotConnect)
			return nil, err
		}
		return &instrumented[T]{TypedExternalClient: ec, kind: kind, rec: rec}, nil
	})
}

type instrumented[T resource.Managed] struct {
	managed.TypedExternalClient[T]
	kind string
	rec  Recorder
}

func (i *instrumented[T]) done(op, reason string, start time.Time, err error) {
	i.rec.External(i.kind, op, time.Since(start))
	if err != nil {
		i.rec.ReconcileFailed(i.kind, reason)
	}
}

func (i *instrumented[T]) Observe(ctx context.Context, mg T) (managed.ExternalObservation, error) {
	start := time.Now()
	o, err := i.TypedExternalClient.Observe(ctx, mg)
	i.done("Observe", ReasonCannotObserve, start, err)
	return o, err
}

func (i *instrumented[T]) Create(ctx context.Context, mg T) (managed.ExternalCreation, error) {
	start := time.Now()
	c, err := i.TypedExternalClient.Create(ctx, mg)
	i.done("Create", ReasonCannotCreate, start, err)
	return c, err
}

func (i *instrumented[T]) Update(ctx context.Context, mg T) (managed.ExternalUpdate, error) {
	start := time.Now()
	u, err := i.TypedExternalClient.Update(ctx, mg)
	i.done("Update", ReasonCannotUpdate, start, err)
	return u, err
}

func (i *instrumented[T]) Delete(ctx context.Context, mg T) (managed.ExternalDelete, error) {
	start := time.Now()
	d, err := i.TypedExternalClient.Delete(ctx, mg)
	i.done("Delete", ReasonCannotDelete, start, err)
	return d, err
}

// PollJitter is the largest share of the poll interval a Ready resource's next poll moves by,
// either way, so that resources created together (a Composition's) do not poll their host in
// step for ever.
const PollJitter = 0.1

// Jittered moves the steady-state poll hook answers (the configured interval, for a Ready
// resource) by up to frac of it either way; shorter polls (a resource not Ready, just
// updated) are left alone. rnd returns a number in [0, 1).
func Jittered(hook func(resource.Managed, time.Duration) time.Duration, frac float64, rnd func() float64) func(resource.Managed, time.Duration) time.Duration {
	return func(mg resource.Managed, poll time.Duration) time.Duration {
		d := hook(mg, poll)
		if d != poll || poll <= MinNotReadyPoll || frac <= 0 {
			return d
		}
		j := time.Duration((rnd()*2 - 1) * frac * float64(poll))
		return poll + j
	}
}

// randFloat is math/rand/v2's Float64, the source Now uses.
func randFloat() float64 { return rand.Float64() } //nolint:gosec // jitter, not a secret

var _ Recorder = metrics.Default
