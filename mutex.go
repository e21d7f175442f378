package etcdlock

import (
	"context"
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
// else, ErrKindMismatch when the name is used by another kind of recipe,
// ErrWouldDeadlock (at once, nothing written) when ctx carries this
// session's grant of the name (see LockFromContext), and ErrInvalidName or
// ErrInvalidArgument for bad input. It returns a grant only
// while the session's ValidUntil is ahead. A failed Lock leaves no key behind:
// the key is deleted at once, or by the session's reaper as soon as the
// cluster answers. Watch failures and etcd leader elections never cost a
// waiter its place.
func (m *Mutex) Lock(ctx context.Context) (*Lock, error) {
	return asLock(acquisition(ctx, m.s, m.name, tagMutex, "lock", false, func(q queue) (*waiter, error) {
		return q.acquire(ctx, "", exclusive{})
	}))
}

// TryLock takes the lock only if nobody holds it or waits for it, in one
// round trip. It returns an error wrapping ErrLocked at once otherwise, and
// writes nothing then. Other errors are those of Lock.
func (m *Mutex) TryLock(ctx context.Context) (*Lock, error) {
	return asLock(acquisition(ctx, m.s, m.name, tagMutex, "lock", true, func(q queue) (*waiter, error) {
		return q.tryEnqueue(ctx, "")
	}))
}
