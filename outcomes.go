package etcdlock

// This file holds the session's side of the retry mechanism (wire.Backoff,
// wire.Classify): the backoffs of its retry loops, and what a session does
// on a failed write's outcome: leaseLost on wire.LeaseGone, retryUnknown on
// wire.Unknown.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/wire"
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

// leaseLost ends the session because a request found its lease gone, and
// returns ErrSessionExpired.
func (s *Session) leaseLost() error {
	s.markLeaseGone(ReasonLeaseGone)
	return ErrSessionExpired
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
func (s *Session) retryUnknown(ctx context.Context, b *wire.Backoff, err error, what string, giveUp func()) error {
	if ctx.Err() != nil {
		giveUp()
		return ctxErr(ctx, err)
	}
	if serr := s.live(); serr != nil {
		giveUp()
		return serr
	}
	s.log.Debug("write of unknown outcome, retrying", zap.String("key", what), zap.Error(err))
	if !b.Wait(ctx) {
		giveUp()
		return ctxErr(ctx, ctx.Err())
	}
	return nil
}
