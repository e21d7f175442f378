package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// Observer receives the events of a session and its grants, for metrics
// (package lockmetrics implements it for Prometheus). Methods are called
// synchronously from the library's goroutines and must be fast and safe for
// concurrent use. Embed NopObserver to implement only some methods and stay
// compatible when methods are added.
type Observer interface {
	// Acquired reports the end of a Lock, Acquire, RLock, Campaign or Try
	// call: granted or not, and how long it took.
	Acquired(AcquireEvent)
	// Released reports the end of a grant: released (Cause ErrReleased) or
	// lost (another cause).
	Released(ReleaseEvent)
	// Waiting reports a waiter entering (+1) or leaving (-1) the wait for a
	// key ahead of it.
	Waiting(kind, name string, delta int)
	// SessionEnded reports a session lost or closed.
	SessionEnded(SessionEvent)
	// KeepaliveAcked reports an acknowledged keepalive: its round trip, and
	// how far ahead ValidUntil is after it.
	KeepaliveAcked(rtt, headroom time.Duration)
	// Batched reports one of the session's writes answered as one of size
	// writes in one etcd commit (1: sent alone; see WithoutBatching).
	Batched(size int)
}

// NopObserver is an Observer that does nothing; embed it in your own.
type NopObserver struct{}

// Acquired does nothing.
func (NopObserver) Acquired(AcquireEvent) {}

// Released does nothing.
func (NopObserver) Released(ReleaseEvent) {}

// Waiting does nothing.
func (NopObserver) Waiting(string, string, int) {}

// SessionEnded does nothing.
func (NopObserver) SessionEnded(SessionEvent) {}

// KeepaliveAcked does nothing.
func (NopObserver) KeepaliveAcked(time.Duration, time.Duration) {}

// Batched does nothing.
func (NopObserver) Batched(int) {}

// Results of an acquisition, as AcquireEvent.Result.
const (
	ResultGranted  = "granted"
	ResultTimeout  = "timeout"  // ctx's deadline passed
	ResultCanceled = "canceled" // ctx was canceled
	ResultLocked   = "locked"   // a Try call found the lock taken
	ResultError    = "error"    // anything else (session lost, bad input, ...)
)

// AcquireEvent is one acquisition's outcome.
type AcquireEvent struct {
	Kind   string // "mutex", "election", "semaphore", "rwmutex"
	Mode   string // "read" or "write" for an RWMutex
	Name   string
	Result string // one of the Result constants
	Wait   time.Duration
	Token  Token // when granted
	Err    error // when not granted
}

// ReleaseEvent is the end of one grant.
type ReleaseEvent struct {
	Kind, Mode, Name string
	Token            Token
	Held             time.Duration
	Cause            error // ErrReleased, or why it was lost
}

// SessionEvent is the end of a session.
type SessionEvent struct {
	Lease    clientv3.LeaseID
	Identity string
	Reason   string // a Reason constant
	Err      error  // ErrSessionExpired or ErrSessionClosed
}

// Reasons a session ends, as SessionEvent.Reason.
const (
	ReasonClosed        = "closed"                // Close was called
	ReasonLeaseGone     = "lease_gone"            // the server no longer knows the lease (expired or revoked)
	ReasonValidityClock = "validity_clock"        // no keepalive acknowledged in time
	ReasonClientClosed  = wire.ReasonClientClosed // the etcd client was closed
	ReasonSlowGrant     = "slow_grant"            // the lease grant took longer than the TTL
)

// WithObserver sets the session's Observer (default: none). A nil observer
// makes NewSession fail with ErrInvalidArgument.
func WithObserver(o Observer) SessionOption {
	return func(so *sessionOptions) {
		if o == nil {
			so.fail(fmt.Errorf("%w: nil observer", ErrInvalidArgument))
			return
		}
		so.observer = o
	}
}

// result classifies an acquisition's error.
func result(err error) string {
	switch {
	case err == nil:
		return ResultGranted
	case errors.Is(err, ErrLocked):
		return ResultLocked
	case errors.Is(err, context.DeadlineExceeded):
		return ResultTimeout
	case errors.Is(err, context.Canceled):
		return ResultCanceled
	}
	return ResultError
}

// finishAcquire reports an acquisition that started at start. On success it
// logs the grant and arranges for its end to be reported (reportEnd).
func (q queue) finishAcquire(start time.Time, w *waiter, err error) {
	kind, mode := kindOfTag(q.tag)
	ev := AcquireEvent{Kind: kind, Mode: mode, Name: q.name, Result: result(err), Wait: time.Since(start), Err: err}
	if w != nil {
		ev.Token = w.token()
	}
	q.s.observer().Acquired(ev)
	if err != nil {
		return
	}
	// The grant's fields are made only when a message is logged (grants and
	// releases are logged at Debug, usually off): this runs on every grant.
	logAt := func(lvl zapcore.Level, msg string, more ...zap.Field) {
		if ce := q.s.grantLog.Check(lvl, msg); ce != nil {
			ce.Write(append([]zap.Field{zap.String("name", q.name), zap.String("kind", kind), zap.Int64("token", w.rev)}, more...)...)
		}
	}
	if kind == kindElection {
		logAt(zap.InfoLevel, "leadership gained")
	} else {
		logAt(zap.DebugLevel, "granted", zap.Duration("wait", ev.Wait))
	}
	w.reportEnd(kind, mode, logAt)
}
