package host

import (
	"fmt"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// HostDownError says calls to a host fail at once because its last connection attempts
// failed and its backoff has not passed (the host's circuit breaker is open), or because the
// next attempt is in progress. It holds no secret: the address and the last attempt's error,
// which never carries keys.
type HostDownError struct {
	// Address is user@host:port, or unix:SOCKET.
	Address string
	// Failures counts the connection attempts that failed in a row.
	Failures int
	// Since is when the first of them failed.
	Since time.Time
	// Last is the error of the last attempt.
	Last error
	// RetryAt is when the next attempt may start.
	RetryAt time.Time
	// Dialing is true when the next attempt is in progress.
	Dialing bool
}

func (e *HostDownError) Error() string {
	attempts := "attempt"
	if e.Failures != 1 {
		attempts = "attempts"
	}
	next := "the next attempt is in progress"
	if !e.Dialing {
		next = "the next attempt starts at " + e.RetryAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("libvirt host %s is unreachable: %d connection %s failed since %s, the last one with: %v; %s",
		e.Address, e.Failures, attempts, e.Since.UTC().Format(time.RFC3339), e.Last, next)
}

// Unwrap returns the last attempt's error.
func (e *HostDownError) Unwrap() error { return e.Last }

// IsHostDown is true when err is a *HostDownError.
func IsHostDown(err error) bool {
	var e *HostDownError
	return errors.As(err, &e)
}

// failed returns the breaker after one more failed attempt (e nil: none before) at now: the
// backoff is initial, doubled per earlier failure, at most maxBackoff.
func (e *HostDownError) failed(address string, err error, now time.Time, initial, maxBackoff time.Duration) *HostDownError {
	n := &HostDownError{Address: address, Failures: 1, Since: now, Last: err}
	if e != nil {
		n.Failures, n.Since = e.Failures+1, e.Since
	}
	n.RetryAt = now.Add(backoff(n.Failures, initial, maxBackoff))
	return n
}

// backoff is initial doubled failures-1 times, at most maxBackoff.
func backoff(failures int, initial, maxBackoff time.Duration) time.Duration {
	d := initial
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, max(maxBackoff, initial))
}

// snapshot is a copy of the breaker for one caller.
func (e *HostDownError) snapshot(dialing bool) *HostDownError {
	c := *e
	c.Dialing = dialing
	return &c
}
