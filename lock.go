package etcdlock

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lock is one grant of a Mutex (or of a Semaphore or an RWMutex). Its methods
// are safe for concurrent use.
type Lock struct {
	w *waiter

	ctxOnce sync.Once
	ctx     context.Context // w.ctx carrying this grant (Context)

	mu         sync.Mutex
	unlockDone chan struct{} // closed when unlockErr is final
	unlockErr  error
}

// Token returns the grant's fencing token: the create revision of its key,
// with the generation of its cluster above bit 44 for a grant of a
// shard.Session (0 otherwise).
func (l *Lock) Token() Token { return l.w.token() }

// Key returns the grant's etcd key.
func (l *Lock) Key() string { return l.w.key }

// Context returns a context that is canceled when the grant is lost or
// released; context.Cause tells why: ErrReleased (Unlock), ErrSessionExpired
// (the lease is gone or the session's validity clock ran out),
// ErrSessionClosed (Session.Close) or ErrLockLost (the key was deleted by
// someone else while the lease lives). It is not derived from the ctx passed
// to Lock, and carries the grant (LockFromContext): an acquisition of the
// same name on the same session made with it, or with a context derived
// from it, fails with ErrWouldDeadlock instead of waiting behind this grant.
// The first call starts a watch on the grant's key from its create revision
// + 1, so no deletion is missed.
func (l *Lock) Context() context.Context {
	l.w.startMonitor()
	l.ctxOnce.Do(func() { l.ctx = withGrant(l.w.ctx, l) })
	return l.ctx
}

// underGrant returns a child of ctx that also ends when the grant ends (its
// cause then the grant's), for a request whose answer counts only while the
// grant is current, and the function that releases it.
func (l *Lock) underGrant(ctx context.Context) (context.Context, func()) {
	gctx := l.Context()
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(gctx, func() { cancel(context.Cause(gctx)) })
	return c, func() {
		stop()
		cancel(nil)
	}
}

// notHeld returns nil while the grant is current, else an error wrapping
// ErrNotHeld and why the grant ended.
func (l *Lock) notHeld() error {
	if l.w.ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(l.w.ctx))
}

// Guard returns a comparison that holds inside an etcd Txn only while this
// grant is current (its key exists with its create revision), so a write can
// be made conditional on still holding the lock.
func (l *Lock) Guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.w.key), "=", l.w.rev)
}

// Unlock releases the grant. It cancels Context at once with ErrReleased, then
// deletes this grant's key only (guarded by its create revision). It returns
// nil if the grant was current when Unlock was first called, on every later
// call too. If the grant had been lost before, it returns an error wrapping
// ErrNotHeld and the cause of the loss. If ctx ends before the delete is
// confirmed, it returns ctx's error and the session's reaper finishes the
// delete: a canceled ctx never leaves the lock held. If the session ends or
// its client is closed before the delete is confirmed, it returns at once an
// error wrapping ErrNotHeld and ErrSessionExpired (ErrSessionClosed after
// Session.Close): the key goes with the session's lease.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if ch := l.unlockDone; ch != nil {
		l.mu.Unlock()
		select {
		case <-ch:
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.unlockErr
		case <-ctx.Done():
			return l.w.q.errorf(fmt.Errorf("unlock: %w", ctxErr(ctx, ctx.Err())))
		}
	}
	l.unlockDone = make(chan struct{})
	l.mu.Unlock()
	err, final := l.w.release(ctx)
	if final {
		l.finish(err)
	} else {
		// The reaper deletes the key; the grant was current, so later calls
		// report success once it is gone.
		l.w.q.s.book.reap(l.w.key, l.w.rev, func() {
			l.finish(nil)
			l.w.free()
		})
	}
	return err
}

func (l *Lock) finish(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unlockErr = err
	close(l.unlockDone)
}

// asLock wraps the waiter of a successful acquisition in a Lock.
func asLock(w *waiter, err error) (*Lock, error) {
	if err != nil {
		return nil, err
	}
	return &Lock{w: w}, nil
}

// acquisition runs op, one acquisition of name (of kind tag, for verb), on
// the queue of name on s. A session without a router (every session of
// NewSession) runs it here, at once: only a routed session's goes through
// its router (routed, route.go). A plain session of a member cluster of a
// sharded deployment is refused here (errShardMember, member.go).
func acquisition[T any](ctx context.Context, s *Session, name, tag, verb string, try bool, op func(queue) (T, error)) (T, error) {
	var zero T
	if s != nil && s.router != nil {
		return routed(ctx, s, name, tag, verb, try, op)
	}
	q, err := newQueue(s, name, tag, verb)
	if err != nil {
		return zero, err
	}
	if s.member {
		return zero, q.errorf(errShardMember)
	}
	return op(q)
}
