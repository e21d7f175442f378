package etcdlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Mutex is a fair, distributed mutual-exclusion lock on one name. Waiters are
// granted in the order they called Lock (first come, first served), each
// watching only the waiter ahead of it. A Mutex is safe for concurrent use;
// every Lock call is its own acquisition, so two goroutines sharing a Mutex
// exclude each other like two processes do.
//
// A grant lives as long as the session's lease. A lease can expire while its
// holder is paused (GC, swap, SIGSTOP, a suspended VM), so a lock that
// protects data is only as good as the check of Lock.Token at the resource
// (see Fence and Lock.Guard).
type Mutex struct {
	s    *Session
	name string
}

// NewMutex returns the mutex called name on session s. It does not talk to
// etcd. An invalid name or a nil session is reported by Lock and TryLock
// (ErrInvalidName, ErrInvalidArgument).
func NewMutex(s *Session, name string) *Mutex { return &Mutex{s: s, name: name} }

// Name returns the mutex's name.
func (m *Mutex) Name() string { return m.name }

// Lock waits, in FIFO order, until the lock is granted to this call, and
// returns the grant. It returns an error wrapping ctx's error and cause when
// ctx ends first, ErrSessionExpired (or ErrSessionClosed) when the session is
// lost while waiting, ErrLockLost when the waiter's key is deleted by someone
// else, ErrKindMismatch when the name is used by another kind of recipe, and
// ErrInvalidName or ErrInvalidArgument for bad input. It returns a grant only
// while the session's ValidUntil is ahead. A failed Lock leaves no key behind:
// the key is deleted at once, or by the session's reaper as soon as the
// cluster answers. Watch failures and etcd leader elections never cost a
// waiter its place.
func (m *Mutex) Lock(ctx context.Context) (*Lock, error) {
	q, err := newQueue(m.s, m.name, tagMutex, "lock")
	if err != nil {
		return nil, err
	}
	return asLock(q.acquire(ctx, "", exclusive{}))
}

// TryLock takes the lock only if nobody holds it or waits for it, in one
// round trip. It returns an error wrapping ErrLocked at once otherwise, and
// writes nothing then. Other errors are those of Lock.
func (m *Mutex) TryLock(ctx context.Context) (*Lock, error) {
	q, err := newQueue(m.s, m.name, tagMutex, "lock")
	if err != nil {
		return nil, err
	}
	return asLock(q.tryEnqueue(ctx, ""))
}

// Lock is one grant of a Mutex (or of a Semaphore or an RWMutex). Its methods
// are safe for concurrent use.
type Lock struct {
	w *waiter

	mu         sync.Mutex
	unlockDone chan struct{} // closed when unlockErr is final
	unlockErr  error
}

// Token returns the grant's fencing token: the create revision of its key.
func (l *Lock) Token() Token { return Token(l.w.rev) }

// Key returns the grant's etcd key.
func (l *Lock) Key() string { return l.w.key }

// Context returns a context that is canceled when the grant is lost or
// released; context.Cause tells why: ErrReleased (Unlock), ErrSessionExpired
// (the lease is gone or the session's validity clock ran out),
// ErrSessionClosed (Session.Close) or ErrLockLost (the key was deleted by
// someone else while the lease lives). It is not derived from the ctx passed
// to Lock. The first call starts a watch on the grant's key from its create
// revision + 1, so no deletion is missed.
func (l *Lock) Context() context.Context {
	l.w.startMonitor()
	return l.w.ctx
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
		l.w.q.s.reap(l.w.key, l.w.rev, func() {
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

// release ends a grant: it cancels the waiter's context with ErrReleased
// and deletes its key, guarded by its create revision, retrying failed
// deletes until ctx ends. final is false when the delete's outcome is still
// unknown then (the caller hands the key to the reaper).
//
// The guard is not optional: the key's name is reused by a later acquisition
// of the session once this one's slot is freed, and an attempt whose outcome
// was unknown can still be applied after that; guarded, it cannot delete the
// later key.
func (w *waiter) release(ctx context.Context) (err error, final bool) {
	if w.ctx.Err() != nil {
		// Lost before: the key is gone, or goes with the session's lease.
		w.free()
		return w.q.errorf(fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(w.ctx))), true
	}
	w.lose(ErrReleased)
	unknown := false // an earlier attempt may have deleted the key
	backoff := 20 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return w.q.errorf(fmt.Errorf("unlock: %w", ctxErr(ctx, err))), false
		}
		actx, kv, done := w.q.s.attempt(ctx, unknown)
		resp, err := kv.Txn(actx).
			If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev)).
			Then(clientv3.OpDelete(w.key)).
			Commit()
		done()
		if err == nil || w.q.s.failed(err) != nil {
			w.free() // deleted now, or already gone
		}
		switch {
		case err == nil && (resp.Succeeded || unknown):
			return nil, true
		case err == nil:
			// The key was already gone: the grant was lost before this call.
			cause := ErrLockLost
			lctx, cancel := context.WithTimeout(context.Background(), lossLookup)
			if gone, _ := w.q.s.leaseGone(lctx); gone {
				cause = ErrSessionExpired
			}
			cancel()
			return w.q.errorf(fmt.Errorf("%w: %w", ErrNotHeld, cause)), true
		case w.q.s.failed(err) != nil:
			return w.q.errorf(fmt.Errorf("%w: %w", ErrNotHeld, ErrSessionExpired)), true
		case permanent(err):
			// Never succeeds (no permission to delete): the key goes with the lease.
			return w.q.errorf(fmt.Errorf("unlock: %w", err)), true
		}
		if serr := w.sessionEnded(err); serr != nil {
			// No later attempt can succeed: the key goes with the lease.
			w.free()
			return w.q.errorf(fmt.Errorf("%w: %w", ErrNotHeld, serr)), true
		}
		unknown = true
		w.q.s.log.Debug("unlock: delete failed, retrying", zap.String("key", w.key), zap.Error(err))
		if !w.sleepRelease(ctx, jitter(backoff)) {
			if serr := w.sessionEnded(nil); serr != nil {
				w.free()
				return w.q.errorf(fmt.Errorf("%w: %w", ErrNotHeld, serr)), true
			}
			return w.q.errorf(fmt.Errorf("unlock: %w", ctxErr(ctx, ctx.Err()))), false
		}
		backoff = min(2*backoff, time.Second)
	}
}

// sessionEnded returns the error that makes a release's retries pointless:
// the session's own (ErrSessionExpired or ErrSessionClosed) once it ended,
// and ErrSessionExpired once its client is closed (cli.Ctx done, or err is
// the client's "connection is closing" error) before the session noticed.
// It returns nil while retrying can still delete the key.
func (w *waiter) sessionEnded(err error) error {
	s := w.q.s
	if serr := s.Err(); serr != nil {
		return serr
	}
	if s.cli.Ctx().Err() != nil ||
		(err != nil && status.Code(err) == codes.Canceled && strings.Contains(err.Error(), "the client connection is closing")) {
		return ErrSessionExpired
	}
	return nil
}

// sleepRelease waits d between release attempts. It returns false early when
// ctx ends, the session ends or its client is closed.
func (w *waiter) sleepRelease(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-w.q.s.Done():
	case <-w.q.s.cli.Ctx().Done():
	}
	return false
}
