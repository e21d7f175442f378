package etcdlock

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
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
