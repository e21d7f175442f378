package etcdlock

// This file holds Election.Run: a loop of three phases (a live session, a
// campaign, a term), which re-opens the session it campaigns on when it is
// lost.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// runFloor is the first pause of Run after a failed phase.
const runFloor = 100 * time.Millisecond

// Run keeps this process in the election until ctx ends, the way most
// services want a leader: it campaigns with value; once leading it calls lead
// with a context that ends when leadership is lost or ctx ends; it waits for
// lead to return; then it resigns if it still leads (so a deploy hands
// leadership over at once, not after a TTL), and campaigns again if
// leadership had been lost. One Run never has two lead calls running at once.
//
// Run returns nil when ctx ends or lead returns nil, and lead's error
// otherwise (lead returning while it still leads), always after resigning.
// It returns at once an error wrapping ErrInvalidArgument (nil lead, nil
// session), ErrInvalidName or ErrKindMismatch, and ErrSessionClosed if the
// caller closes the Session. When the Session is lost, Run opens replacement
// sessions on the same client with the same options; it owns and closes them
// and never closes the caller's Session; it returns ErrSessionExpired only
// when the client itself is closed. Other failures are logged and retried
// with jittered backoff.
func (e *Election) Run(ctx context.Context, value string, lead func(ctx context.Context) error) error {
	q, err := e.queue("run")
	if err != nil {
		return err
	}
	if lead == nil {
		return q.errorf(fmt.Errorf("%w: nil lead function", ErrInvalidArgument))
	}
	ctx, stop := e.untilClosed(ctx)
	defer stop()
	r := &runner{e: e, q: q, s: e.s, log: e.s.log.With(zap.String("election", e.name))}
	defer r.closeOwned()
	b := newBackoff(runFloor, watchCeil)
	for ctx.Err() == nil {
		// Phase 1: a live session.
		ok, err := r.session(ctx)
		if err != nil {
			return err
		}
		if !ok {
			b.wait(ctx)
			continue
		}
		// Phase 2: a campaign, until this process leads.
		l, err := NewElection(r.s, e.name).Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrInvalidName) || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrKindMismatch) {
				return err
			}
			r.log.Warn("run: campaign failed", zap.Error(err))
			b.wait(ctx)
			continue
		}
		b.reset()
		// Phase 3: a term: lead, then resign.
		if done, err := r.term(ctx, l, lead); done {
			return err
		}
	}
	if closedByCaller(ctx) {
		return q.errorf(ErrSessionClosed)
	}
	return nil
}

// runner is the state of one Run call. Only Run's goroutine uses it.
type runner struct {
	e     *Election
	q     queue
	s     *Session // the session Run campaigns on: e.s, or owned
	owned *Session // a replacement session Run opened; nil before
	log   *zap.Logger
}

// session makes sure r.s is live, opening a replacement session on the same
// client with the same options when it was lost. It returns false when Run
// must pause and try again, and an error when Run must end: the caller
// closed its Session, or the client is closed.
func (r *runner) session(ctx context.Context) (bool, error) {
	serr := r.s.Err()
	switch {
	case serr == nil:
		return true, nil
	case r.s == r.e.s && errors.Is(serr, ErrSessionClosed):
		return false, r.q.errorf(serr)
	case r.s.cli.Ctx().Err() != nil:
		return false, r.q.errorf(fmt.Errorf("%w: client closed", ErrSessionExpired))
	}
	ns, err := newSession(ctx, r.s.cli, r.s.opts)
	if err != nil {
		r.log.Warn("run: cannot open a replacement session", zap.Error(err))
		return false, nil
	}
	r.closeOwned()
	r.owned, r.s = ns, ns
	r.log = ns.log.With(zap.String("election", r.e.name))
	r.log.Info("run: opened a replacement session")
	return true, nil
}

func (r *runner) closeOwned() {
	if r.owned != nil {
		_ = r.owned.Close()
	}
}

// term runs lead for one term of leadership, then resigns if it still leads.
// done says Run returns err; else leadership was lost and Run campaigns
// again.
func (r *runner) term(ctx context.Context, l *Leadership, lead func(context.Context) error) (done bool, err error) {
	r.log.Info("run: leading", zap.Stringer("token", l.Token()))
	h := r.e.health.Load()
	if h != nil {
		h.Set(l)
	}
	lerr := leadTerm(ctx, l, lead)
	if h != nil {
		h.Set(nil)
	}
	lostCause := context.Cause(l.Context()) // nil while still leading
	rctx, cancel := context.WithTimeout(context.Background(), r.s.revokeBound())
	if rerr := l.Resign(rctx); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		r.log.Warn("run: resign did not finish; the session's reaper completes it", zap.Error(rerr))
	}
	cancel()
	token := zap.Stringer("token", l.Token())
	switch {
	case closedByCaller(ctx):
		r.log.Info("run: the caller closed its session", token)
		return true, r.q.errorf(ErrSessionClosed)
	case lostCause != nil:
		r.log.Info("run: leadership lost", token, zap.NamedError("cause", lostCause), zap.NamedError("lead", lerr))
		return false, nil
	case ctx.Err() != nil || lerr == nil:
		r.log.Info("run: resigned", token)
		return true, nil
	}
	r.log.Info("run: resigned after lead failed", token, zap.Error(lerr))
	return true, lerr
}

// errCallerClosed ends Run's context when the caller closes its Session.
var errCallerClosed = errors.New("etcdlock: the caller closed the session")

// untilClosed returns a child of ctx that also ends, with cause
// errCallerClosed, when the caller closes e's Session: Close must end Run at
// once even while it runs on a replacement session (the caller's own one,
// lost before, reports ErrSessionExpired). stop releases it and waits for its
// goroutine.
func (e *Election) untilClosed(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-e.s.closing:
			cancel(errCallerClosed)
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
	}
}

func closedByCaller(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCallerClosed)
}

// leadTerm calls lead with a context that ends when ctx ends or leadership
// is lost (with the loss as its cause), and waits for it to return.
func leadTerm(ctx context.Context, l *Leadership, lead func(context.Context) error) error {
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, leadershipKey{}, l))
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer func() {
		stop()
		cancel(nil)
	}()
	return lead(lctx)
}

type leadershipKey struct{}

// LeadershipFromContext returns the Leadership of the term that Run's lead
// function was called for, from the context Run passed to it, so that lead
// can fence its writes with Token or change its value with Proclaim. ok is
// false for any other context.
func LeadershipFromContext(ctx context.Context) (l *Leadership, ok bool) {
	l, ok = ctx.Value(leadershipKey{}).(*Leadership)
	return l, ok
}
