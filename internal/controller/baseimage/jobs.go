package baseimage

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/publishqueue"
)

// A job publishes one image in the background. Uploads of cloud images take minutes, far
// longer than a reconcile may block a worker, so Create starts a job and returns; Observe
// reports its progress. A provider killed mid-upload loses its jobs: the next Observe finds
// debris (never a usable volume) and no job, and Create starts again.
type job struct {
	// nn is the BaseImage the job publishes for.
	nn  types.NamespacedName
	src imagecache.Source
	// policy identifies the imageSources the job downloads under.
	policy string
	cancel context.CancelFunc
	done   chan struct{}
	// attempt counts this job among the attempts in a row for the same source and policy: 1,
	// or one more than the failed job it replaced; lastErr is that job's error.
	attempt int
	lastErr error

	bytesDone, bytesTotal atomic.Int64
	// ticket is the job's place in the publish queue, once it entered it.
	ticket atomic.Pointer[publishqueue.Ticket]

	// Set before done is closed.
	result     imagecache.Result
	err        error
	finishedAt time.Time
}

func (j *job) finished() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// queued tells whether j waits in the publish queue, and its place among the jobs waiting
// (1 is next) and how many wait in all.
func (j *job) queued() (bool, int, int) {
	t := j.ticket.Load()
	if t == nil {
		return false, 0, 0 // not in the queue yet: waiting for the job it replaces
	}
	admitted, place, waiting := t.Position()
	return !admitted && place > 0, place, waiting
}

// jobs tracks the running or last finished job of each BaseImage, by UID.
type jobs struct {
	mu sync.Mutex
	m  map[types.UID]*job
	// finished is told the BaseImage of every job that ends, or that leaves the publish queue
	// to start, so that it is observed at once rather than at its next poll; nil tells nobody.
	finished func(types.NamespacedName)
	// queue bounds how many jobs publish at once, in all, per host and per namespace.
	queue *publishqueue.Queue
}

func newJobs(q *publishqueue.Queue, finished func(types.NamespacedName)) *jobs {
	if q == nil {
		q = publishqueue.New(publishqueue.Limits{})
	}
	return &jobs{m: map[types.UID]*job{}, finished: finished, queue: q}
}

func (js *jobs) get(uid types.UID) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.m[uid]
}

// start runs publish for uid (the BaseImage nn) against host unless a job for the same source and policy is already
// running. A job for another source (the spec was edited) or policy (the config's
// imageSources were) is cancelled first. A job that replaces a failed one of the same source
// and policy counts as its next attempt (see retryDelay). The job waits its turn in the
// publish queue first; uploadTimeout counts from its start, not from its arrival.
func (js *jobs) start(uid types.UID, nn types.NamespacedName, host string, src imagecache.Source, policy string, publish func(ctx context.Context, progress imagecache.ProgressFunc) (imagecache.Result, error)) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	var prev *job
	attempt, lastErr := 1, error(nil)
	if j, ok := js.m[uid]; ok {
		if j.src == src && j.policy == policy && !j.finished() {
			return j
		}
		j.cancel()
		prev = j
		if j.src == src && j.policy == policy && j.finished() && j.err != nil {
			attempt, lastErr = j.attempt+1, j.err
		}
	}
	qctx, cancel := context.WithCancel(context.Background())
	j := &job{nn: nn, src: src, policy: policy, cancel: cancel, done: make(chan struct{}), attempt: attempt, lastErr: lastErr}
	js.m[uid] = j
	go func() {
		defer cancel()
		if prev != nil {
			// The cancelled job cleans up its claim, data and owner record as it ends; the same
			// BaseImage's next publish (maybe of the same volume) starts after that.
			select {
			case <-prev.done:
			case <-qctx.Done():
			}
		}
		j.result, j.err = js.run(qctx, j, host, publish)
		j.finishedAt = time.Now()
		close(j.done)
		if js.finished != nil {
			js.finished(nn)
		}
	}()
	return j
}

// run waits for j's turn in the publish queue (until ctx ends), then publishes within
// uploadTimeout and frees its place.
func (js *jobs) run(ctx context.Context, j *job, host string, publish func(ctx context.Context, progress imagecache.ProgressFunc) (imagecache.Result, error)) (imagecache.Result, error) {
	t := js.queue.Enter(host, j.nn.Namespace, func() {
		if js.finished != nil {
			js.finished(j.nn) // out of the queue: Observe says it publishes now
		}
	})
	j.ticket.Store(t)
	defer t.Done()
	if err := t.Wait(ctx); err != nil {
		return imagecache.Result{}, errors.Wrap(err, errQueueLeft)
	}
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	return publish(ctx, func(done, total int64) {
		j.bytesDone.Store(done)
		j.bytesTotal.Store(total)
	})
}

// errQueueLeft: a job cancelled while it waited in the publish queue.
const errQueueLeft = "left the publish queue before its turn"

// forget cancels and drops uid's job.
func (js *jobs) forget(uid types.UID) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if j, ok := js.m[uid]; ok {
		j.cancel()
		delete(js.m, uid)
	}
}

// running returns the BaseImages of the jobs that have not finished, by UID.
func (js *jobs) running() map[types.UID]types.NamespacedName {
	js.mu.Lock()
	defer js.mu.Unlock()
	out := map[types.UID]types.NamespacedName{}
	for uid, j := range js.m {
		if !j.finished() {
			out[uid] = j.nn
		}
	}
	return out
}

// currentUID answers the UID of BaseImage nn as the API server has it ("" when it does not
// exist).
type currentUID func(ctx context.Context, nn types.NamespacedName) (types.UID, error)

// reapOrphans cancels the running jobs of BaseImages that are gone from the API server without
// a Delete of ours (their finalizer removed by hand, their namespace force-deleted) or that
// were replaced by a new object of the same name. A cancelled publish removes its claim, its
// partial data and its owner record as it ends, so nothing half-written stays on the host.
// It returns the UIDs it cancelled; a BaseImage it cannot look up is left alone.
func reapOrphans(ctx context.Context, js *jobs, current currentUID) []types.UID {
	var reaped []types.UID
	for uid, nn := range js.running() {
		got, err := current(ctx, nn)
		if err != nil || got == uid {
			continue
		}
		js.forget(uid)
		reaped = append(reaped, uid)
	}
	return reaped
}

// reapInterval is how often running jobs are checked for a BaseImage that is gone.
const reapInterval = 30 * time.Second

// reaper runs reapOrphans every reapInterval until ctx ends.
func reaper(js *jobs, current currentUID) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(reapInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				reapOrphans(ctx, js, current)
			}
		}
	}
}
