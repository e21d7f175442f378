package etcdlock

import (
	"strconv"
	"strings"
)

// The sentinel errors of etcdlock. Every error the package returns wraps one of
// these (or a context error), so callers test with errors.Is; most come
// wrapped in an *Error that names the operation and the lock.
var (
	// ErrLocked is returned by TryLock when the lock is held or waited on.
	ErrLocked = sentinel("etcdlock: locked")
	// ErrNotHeld is returned by Unlock, Resign and Proclaim of a grant that was
	// lost before the call, and by Proclaim, Completed, MarkCompleted and RunOnce when
	// the grant ends before etcd answers; the error also wraps the cause of
	// the loss.
	ErrNotHeld = sentinel("etcdlock: not held")
	// ErrReleased is the cause of Lock.Context and Leadership.Context after
	// Unlock and Resign.
	ErrReleased = sentinel("etcdlock: released")
	// ErrSessionExpired means the session's lease ran out, was revoked, its
	// validity clock ran out, or its client was closed.
	ErrSessionExpired = sentinel("etcdlock: session expired")
	// ErrSessionClosed means Session.Close was called.
	ErrSessionClosed = sentinel("etcdlock: session closed")
	// ErrLockLost is the cause when a grant's key was deleted by someone else
	// while the session's lease lives.
	ErrLockLost = sentinel("etcdlock: lock lost")
	// ErrStaleToken is returned by Fence for a token below the highest admitted,
	// or a token <= 0.
	ErrStaleToken = sentinel("etcdlock: stale token")
	// ErrNoLeader is returned by Election.Leader when nobody leads.
	ErrNoLeader = sentinel("etcdlock: no leader")
	// ErrInvalidName is returned for an empty name, a name over 1024 bytes, or
	// a name that is not valid UTF-8.
	ErrInvalidName = sentinel("etcdlock: invalid name")
	// ErrInvalidArgument is returned for a nil session or client, a bad TTL, an
	// empty identity, a nil logger, a semaphore size below 1, and similar.
	ErrInvalidArgument = sentinel("etcdlock: invalid argument")
	// ErrKindMismatch is returned when a name is already used by another kind
	// of recipe (or by a semaphore of another size).
	ErrKindMismatch = sentinel("etcdlock: kind mismatch")
	// ErrAlreadyCompleted is returned by RunOnce and TryRunOnce when the name's
	// completion record already holds the run's id or a later one: fn was
	// not called.
	ErrAlreadyCompleted = sentinel("etcdlock: already completed")
	// ErrChanged is returned by ClearCompletion when the record it was
	// given is no longer the name's record: nothing was deleted.
	ErrChanged = sentinel("etcdlock: changed meanwhile")
	// ErrWouldDeadlock is returned at once, with nothing written, by an
	// acquisition (Lock, TryLock, LockAll, TryLockAll, RLock, an RWMutex's
	// Lock, Campaign, a semaphore of one) made with a context that carries a
	// current grant of the same name from the same session (Lock.Context,
	// Locks.Context, the context Run and RunOnce hand to fn, or a context
	// derived from them): it could only wait behind the caller's own grant.
	ErrWouldDeadlock = sentinel("etcdlock: would deadlock")
	// ErrTokenOverflow is returned by an acquisition of a shard.Session on
	// a cluster whose revision is past 2^44-1: its token could not
	// carry the generation. Nothing is held then.
	ErrTokenOverflow = sentinel("etcdlock: token overflow")
	// ErrSlotMoving is returned by Election.Leader for an election of a shard.Session
	// when nobody leads on the cluster the map gives the name's slot while
	// that slot is not settled there (a move of it is recorded, or its
	// stamp there is not active): the leader may be elsewhere, or about to
	// be, so nobody leading cannot be known until the move ends.
	ErrSlotMoving = sentinel("etcdlock: slot moving")
)

// Error is the error of an operation of the package: on a named lock,
// semaphore or election, or on a session (Name ""). Its message names the operation and the name, then the cause,
// and says "etcdlock:" once:
//
//	etcdlock: unlock "billing/nightly": not held: lock lost
//
// It wraps the cause, so errors.Is finds the sentinel and errors.As finds the
// Error (for its Name).
type Error struct {
	Op   string // the operation: "lock", "unlock", "acquire", "campaign", "proclaim", ...
	Name string // the name it was on; "" for a session, or when the name itself was bad
	Err  error  // the cause: wraps a sentinel or a context error
}

func newError(op, name string, err error) error { return &Error{Op: op, Name: name, Err: err} }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(e.Op)
	if e.Name != "" {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(e.Name))
	}
	b.WriteString(": ")
	// The sentinels say "etcdlock:" too, so that each reads well alone;
	// within an Error they need not.
	b.WriteString(trimOwn(e.Err))
	return b.String()
}

// trimOwn returns err's text with "etcdlock: " taken off the front of the
// text of each error of this package in err's tree, and nowhere else: a
// wrapped error of the caller keeps its text as it is. The package's errors
// are the *Error values, the sentinels (made by sentinel) and the session's
// close cause. The tree is walked in the order its wrappers print their
// children, each found in the text after the one before it.
func trimOwn(err error) string {
	msg := err.Error()
	var b strings.Builder
	at := 0
	// pass copies msg up to the end of t (searched from at), taking the
	// prefix off t when trim is set; a t not found is left as it is.
	pass := func(t string, trim bool) {
		i := strings.Index(msg[at:], t)
		if i < 0 {
			return
		}
		b.WriteString(msg[at : at+i])
		if trim {
			b.WriteString(strings.TrimPrefix(t, prefix))
		} else {
			b.WriteString(t)
		}
		at += i + len(t)
	}
	var walk func(error)
	walk = func(e error) {
		switch u := e.(type) {
		case *Error, *ownError, closedCause:
			pass(u.Error(), true)
		case interface{ Unwrap() error }:
			if c := u.Unwrap(); c != nil {
				walk(c)
			}
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				if c != nil {
					walk(c)
				}
			}
		default: // someone else's: passed over as it is
			pass(e.Error(), false)
		}
	}
	walk(err)
	b.WriteString(msg[at:])
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

const prefix = "etcdlock: "

// sentinel is errors.New for the package's own errors, whose text starts
// with prefix: an Error takes the prefix off their text, and off no other.
func sentinel(text string) error { return &ownError{text} }

type ownError struct{ text string }

func (e *ownError) Error() string { return e.text }
