package etcdlock

// This file holds the validity clock: until when the session's lease is
// certainly alive on the server, as far as this process can know, fed by
// the keeper's acknowledged keepalives (DESIGN.md, "The validity clock").

import (
	"context"
	"time"
)

// margin is subtracted from every validity deadline: TTL/100 + 50ms.
func (s *Session) margin() time.Duration { return s.ttl/100 + 50*time.Millisecond }

// ValidUntil returns the time until which the lease is certainly alive on the
// server, as far as this process can know: the send time of the last
// acknowledged keepalive plus the TTL, minus a margin of TTL/100 + 50ms. The
// session is lost at that moment unless a later keepalive is acknowledged.
func (s *Session) ValidUntil() time.Time {
	if s.router != nil {
		return s.router.validUntil()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validMono
}

// live returns nil while the session is live and its validity clock (both
// monotonic and wall) is ahead; else the error that ended it.
func (s *Session) live() error {
	if s.router != nil {
		return s.Err() // its cluster sessions have the clocks
	}
	s.mu.Lock()
	err := s.err
	now := time.Now()
	ran := !now.Before(s.validMono) || !now.Round(0).Before(s.validWall)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if ran {
		s.expire(ErrSessionExpired, ReasonValidityClock)
		return ErrSessionExpired
	}
	return nil
}

// wanted returns nil while ctx and the session go on, else why not.
func (s *Session) wanted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx, err)
	}
	return s.live()
}

// grantable returns nil when ws may be granted on s: ctx and s go on, and
// each token can carry its generation.
func (s *Session) grantable(ctx context.Context, ws ...*waiter) error {
	if err := s.wanted(ctx); err != nil {
		return err
	}
	for _, w := range ws {
		if err := checkTokenSpace(w.sk.gen, w.rev); err != nil {
			return err
		}
	}
	return nil
}

// checkExpiry ends the session if its validity clock ran out.
func (s *Session) checkExpiry() {
	_ = s.live()
}

// onAck records a keepalive reply with the TTL the server reported.
func (s *Session) onAck(ttl int64) (next time.Time, ok bool) {
	s.mu.Lock()
	if s.err != nil || len(s.sent) == 0 {
		s.mu.Unlock()
		return time.Time{}, false
	}
	sentAt := s.sent[0]
	s.sent = s.sent[1:]
	if ttl <= 0 {
		s.mu.Unlock()
		s.markLeaseGone(ReasonLeaseGone)
		return time.Time{}, false
	}
	valid := sentAt.Add(time.Duration(ttl)*time.Second - s.margin())
	if valid.After(s.validMono) {
		s.validMono, s.validWall = valid, valid.Round(0)
		s.expiry.Reset(time.Until(valid))
	}
	more := len(s.sent) > 0
	headroom := time.Until(s.validMono)
	s.mu.Unlock()
	s.observer().KeepaliveAcked(time.Since(sentAt), headroom)
	if more {
		return time.Time{}, false
	}
	return sentAt.Add(s.renewEvery()), true
}

// renewEvery is the time between keepalives: WithRenewEvery's, else TTL/3.
func (s *Session) renewEvery() time.Duration {
	if s.opts.renew > 0 {
		return s.opts.renew
	}
	return s.ttl / 3
}

// recordSend notes that a keepalive is about to be sent; false if the session
// is over and must not send again.
func (s *Session) recordSend(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || !now.Before(s.validMono) || !now.Round(0).Before(s.validWall) {
		return false // lost, or about to be: never renew what was declared lost
	}
	s.sent = append(s.sent, now)
	return true
}

// keptSession is the session as its keeper sees it (wire.Kept): the
// validity clock's side of the keepalives, under exported names that are
// not Session's. Its value is the same for every conversion of one session.
type keptSession struct{ *Session }

func (k keptSession) RecordSend(now time.Time) bool             { return k.recordSend(now) }
func (k keptSession) OnAck(ttl int64) (next time.Time, ok bool) { return k.onAck(ttl) }
func (k keptSession) ResetInflight()                            { k.resetInflight() }
func (k keptSession) CheckExpiry()                              { k.checkExpiry() }

// Expire ends the session as lost (ErrSessionExpired) for reason.
func (k keptSession) Expire(reason string) { k.expire(ErrSessionExpired, reason) }

// resetInflight forgets unanswered keepalives (their stream is gone).
func (s *Session) resetInflight() {
	s.mu.Lock()
	s.sent = nil
	s.mu.Unlock()
}
