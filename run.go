package etcdlock

// This file holds the loop that Election.Run and Mutex.Run share: three
// phases (a live session, an acquisition, a term), re-opening the session it
// acquires on when that is lost.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// runFloor is the first pause of Run after a failed phase.
const runFloor = 100 * time.Millisecond

// term is one grant a Run holds (a lock, or a leadership's key: Resign is
// its Unlock) and the caller's function to serve under it.
type term struct {
	l     *Lock
	serve func(ctx context.Context) error
}

// runner is the state of one Run call. Only Run's goroutine uses it.
type runner struct {
	caller *Session // the caller's session, never closed by Run
	q      queue    // the caller's queue, for errors
	what   string   // "leadership" or "lock", for the log
	// take is phase 2: it waits on s until the grant is this Run's.
	take func(ctx context.Context, s *Session) (term, error)

	s     *Session // the session Run acquires on: caller, or owned
	owned *Session // a replacement session Run opened; nil before
	log   *zap.Logger
}

// run is the loop of Run: a live session, an acquisition, a term, until ctx
// ends or a term ends Run.
func (r *runner) run(ctx context.Context) error {
	ctx, stop := untilClosed(ctx, r.caller)
	defer stop()
	r.s = r.caller
	defer r.closeOwned()
	b := wire.NewBackoff(runFloor, watchCeil)
	for ctx.Err() == nil {
		// Phase 1: a live session.
		ok, err := r.session(ctx)
		if err != nil {
			return err
		}
		if !ok {
			b.Wait(ctx)
			continue
		}
		// Phase 2: an acquisition, until the grant is this Run's.
		t, err := r.take(ctx, r.s)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if endsRun(err) {
				return err
			}
			r.log.Warn("run: acquisition failed", zap.Error(err))
			b.Wait(ctx)
			continue
		}
		b.Reset()
		// Phase 3: a term: serve, then release.
		if done, err := r.term(ctx, t); done {
			return err
		}
	}
	if closedByCaller(ctx) {
		return r.q.errorf(ErrSessionClosed)
	}
	return nil
}

// endsRun reports an acquisition's error that trying again cannot mend: bad
// input or a nested acquisition. (A closed session ends Run through its
// ctx, untilClosed; a sharded one's Shards closes it on its own Close.)
func endsRun(err error) bool {
	for _, end := range []error{ErrInvalidName, ErrInvalidArgument, ErrKindMismatch, ErrWouldDeadlock} {
		if errors.Is(err, end) {
			return true
		}
	}
	return false
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
	case r.s == r.caller && errors.Is(serr, ErrSessionClosed):
		return false, r.q.errorf(serr)
	case r.s.cli.Ctx().Err() != nil:
		return false, r.q.errorf(fmt.Errorf("%w: client closed", ErrSessionExpired))
	}
	ns, err := newSession(ctx, r.s.cli, r.s.opts)
	if err != nil {
		r.log.Warn("run: cannot open a replacement session", zap.Error(err))
		return false, nil
	}
	ns.root = r.caller.origin()
	ns.member = r.s.member // the same cluster: refused as the caller's was
	r.closeOwned()
	r.owned, r.s = ns, ns
	r.log = ns.log.With(zap.String(r.what, r.q.name))
	r.log.Info("run: opened a replacement session")
	return true, nil
}

func (r *runner) closeOwned() {
	if r.owned != nil {
		_ = r.owned.Close()
	}
}

// term serves one grant, then releases it if it is still held. done says
// Run returns err; else the grant was lost and Run acquires again. The
// release is deferred: when the function panics the grant is released (or
// the term resigned) before the panic goes on to the caller.
func (r *runner) term(ctx context.Context, t term) (done bool, err error) {
	token := zap.Stringer("token", t.l.Token())
	r.log.Info("run: holding", token)
	released := false
	defer func() {
		if !released {
			r.log.Warn("run: the function panicked; releasing", token)
			r.release(t)
		}
	}()
	serr := serveUnder(ctx, t.l, t.serve)
	lostCause := context.Cause(t.l.Context()) // nil while still held
	r.release(t)
	released = true
	switch {
	case closedByCaller(ctx):
		r.log.Info("run: the caller closed its session", token)
		return true, r.q.errorf(ErrSessionClosed)
	case lostCause != nil:
		r.log.Info("run: grant lost", token, zap.NamedError("cause", lostCause), zap.NamedError("fn", serr))
		return false, nil
	case ctx.Err() != nil || serr == nil:
		r.log.Info("run: released", token)
		return true, nil
	}
	r.log.Info("run: released after fn failed", token, zap.Error(serr))
	return true, serr
}

// release releases t's grant, bounded; what does not finish, the
// session's reaper completes.
func (r *runner) release(t term) {
	rctx, cancel := context.WithTimeout(context.Background(), r.s.revokeBound())
	defer cancel()
	if rerr := t.l.Unlock(rctx); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		r.log.Warn("run: release did not finish; the session's reaper completes it", zap.Error(rerr))
	}
}

// errCallerClosed ends Run's context when the caller closes its Session.
var errCallerClosed = sentinel("etcdlock: the caller closed the session")

// untilClosed returns a child of ctx that also ends, with cause
// errCallerClosed, when the caller closes s: Close must end Run at once even
// while it runs on a replacement session (the caller's own one, lost
// before, reports ErrSessionExpired). stop releases it and waits for its
// goroutine.
func untilClosed(ctx context.Context, s *Session) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-s.closing:
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

// serveUnder calls fn with a child of ctx that also ends when grant ends
// (with its cause) and carries it (LockFromContext, ErrWouldDeadlock), and
// waits for it to return.
func serveUnder(ctx context.Context, grant *Lock, fn func(context.Context) error) error {
	gctx := grant.Context()
	fctx, cancel := context.WithCancelCause(withGrant(ctx, grant))
	stop := context.AfterFunc(gctx, func() { cancel(context.Cause(gctx)) })
	defer func() {
		stop()
		cancel(nil)
	}()
	return fn(fctx)
}
