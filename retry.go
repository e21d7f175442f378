package etcdlock

// This file holds the one retry mechanism of the package: a backoff for the
// pause between attempts, and classify, which names what a failed request
// tells about its write. Every retry loop is one switch on classify's
// outcome and one backoff.

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdlock/etcdlock/internal/etcdx"
)

// The backoffs of the package's retry loops.
const (
	// requestFloor and requestCeil bound the pause between attempts of a
	// request: enqueue, touch, release, queue reads.
	requestFloor = 20 * time.Millisecond
	requestCeil  = time.Second
	// watchFloor and watchCeil bound the pause before re-opening a watch or
	// a stream, and between the reaper's and the observers' attempts.
	watchFloor = 50 * time.Millisecond
	watchCeil  = 2 * time.Second
)

// backoff is the pause between attempts of a retry loop: jittered, doubling
// from floor up to ceil, back at floor after reset. Build it with
// newBackoff. It is not safe for concurrent use; each loop has its own.
type backoff struct {
	floor, ceil time.Duration
	next        time.Duration // the pause before jitter
}

func newBackoff(floor, ceil time.Duration) *backoff {
	return &backoff{floor: floor, ceil: ceil, next: floor}
}

// wait pauses for the next delay, jittered, and doubles it. It returns false,
// early, when ctx ends.
func (b *backoff) wait(ctx context.Context) bool { return b.waitOr(ctx, nil, nil) }

// waitOr is wait that also returns false, early, when stop1 or stop2 is
// closed (a nil channel never is).
func (b *backoff) waitOr(ctx context.Context, stop1, stop2 <-chan struct{}) bool {
	t := time.NewTimer(jitter(b.next))
	defer t.Stop()
	b.next = min(2*b.next, b.ceil)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop1:
	case <-stop2:
	}
	return false
}

// reset makes the next pause the floor again, after progress.
func (b *backoff) reset() { b.next = b.floor }

// outcome is what a request's error says about its write.
type outcome int

const (
	// applied: the request was answered (err == nil); what it did is in
	// its response.
	applied outcome = iota
	// leaseGone: the session's lease no longer exists, and with it every
	// key of the session. Retrying cannot help; the session is over.
	leaseGone
	// refused: the request was refused for good and wrote nothing: the
	// user may not touch these keys (PermissionDenied), the request is
	// malformed or the credentials are wrong (InvalidArgument), or the auth
	// token could not be renewed (Unauthenticated; clientv3 already retried
	// with a fresh one).
	refused
	// unknown: the request may have been applied, now or at any later time
	// (DESIGN.md, "Writes of unknown outcome"); it may be retried.
	unknown
)

// classify returns the outcome of a request that returned err. It has no
// side effect: a caller that sees leaseGone ends the session (leaseLost).
func classify(err error) outcome {
	switch {
	case err == nil:
		return applied
	case etcdx.IsLeaseNotFound(err):
		return leaseGone
	case permanent(err), errors.Is(err, errSlotMoved):
		return refused
	}
	return unknown
}

// permanent reports an error that retrying cannot fix (see refused).
func permanent(err error) bool {
	switch codeOf(err) {
	case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated:
		return true
	}
	return false
}

// codeOf returns the gRPC code of err: of a gRPC status anywhere in its
// chain, or of clientv3's form of one (rpctypes.EtcdError).
func codeOf(err error) codes.Code {
	if ee := (rpctypes.EtcdError{}); errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}

// leaseLost ends the session because a request found its lease gone, and
// returns ErrSessionExpired.
func (s *Session) leaseLost() error {
	s.markLeaseGone(ReasonLeaseGone)
	return ErrSessionExpired
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryUnknown pauses before the next attempt of a write whose outcome was
// unknown (err) and returns nil; or, when ctx or the session ended first,
// calls giveUp (the write's keys go to the reaper) and returns why. what
// names the write in the debug log.
func (s *Session) retryUnknown(ctx context.Context, b *backoff, err error, what string, giveUp func()) error {
	if ctx.Err() != nil {
		giveUp()
		return ctxErr(ctx, err)
	}
	if serr := s.live(); serr != nil {
		giveUp()
		return serr
	}
	s.log.Debug("write of unknown outcome, retrying", zap.String("key", what), zap.Error(err))
	if !b.wait(ctx) {
		giveUp()
		return ctxErr(ctx, ctx.Err())
	}
	return nil
}
