package etcdlock

// This file holds LockAll and TryLockAll: several mutexes of one session
// enqueued in one Txn (DESIGN.md, "Several names at once").

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// MaxLockAllNames is the largest number of names one LockAll or TryLockAll
// takes. Their Txn carries up to three operations per name in each branch,
// and etcd refuses a Txn of more than --max-txn-ops (default 128)
// operations in a branch. More names fail with ErrInvalidArgument before
// anything is written; a server configured with a lower limit refuses the
// Txn whole, which fails the same way, with nothing written.
const MaxLockAllNames = 42

// LockAll takes the mutexes called names on session s together and returns
// when every one is granted. Their keys are enqueued in one etcd
// transaction, so they share one revision; every key waits only for keys of
// lower revision, so no two LockAll calls, and no LockAll and plain Locks
// (each held alone), can ever wait for each other in a cycle, whatever order
// the names come in. Each name keeps its own FIFO queue and its own token
// (the shared revision; still larger than every earlier token of the name).
//
// On any failure, or when ctx ends, every key is deleted before LockAll
// returns, or by the session's reaper as soon as the cluster answers (when
// it does not answer in time, or the enqueue's outcome was unknown: the
// reaper first makes sure no late copy of it can create a key): it never
// returns a part of the set. Errors are those of Mutex.Lock, and
// ErrInvalidArgument for no names, a name given twice, or more than
// MaxLockAllNames; ErrWouldDeadlock when ctx carries this session's grant of
// one of the names.
func LockAll(ctx context.Context, s *Session, names ...string) (*Locks, error) {
	return lockAll(ctx, s, names, false)
}

// TryLockAll is LockAll all or nothing, in one round trip: when any of the
// names is held or waited on it returns an error wrapping ErrLocked (or
// ErrKindMismatch) at once and writes nothing. Other errors are those of
// LockAll.
func TryLockAll(ctx context.Context, s *Session, names ...string) (*Locks, error) {
	return lockAll(ctx, s, names, true)
}

// lockAllQueues checks LockAll's arguments and returns the names' queues.
func lockAllQueues(s *Session, names []string) ([]queue, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: nil session", ErrInvalidArgument)
	case len(names) == 0:
		return nil, fmt.Errorf("%w: no names", ErrInvalidArgument)
	case len(names) > MaxLockAllNames:
		return nil, fmt.Errorf("%w: %d names, more than %d (MaxLockAllNames)", ErrInvalidArgument, len(names), MaxLockAllNames)
	}
	qs := make([]queue, len(names))
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		q, err := newQueue(s, name, tagMutex, "lock all")
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, q.errorf(fmt.Errorf("%w: name given twice", ErrInvalidArgument))
		}
		seen[name] = true
		qs[i] = q
	}
	return qs, nil
}

// lockAll is the frame of LockAll and TryLockAll, as queue.acquisition is
// of one name's.
func lockAll(ctx context.Context, s *Session, names []string, try bool) (*Locks, error) {
	for {
		ls, qs, err := lockAllOnce(ctx, s, names, try)
		if !errors.Is(err, errSlotMoved) && !anyForcedAway(ctx, qs, err) {
			return ls, err
		}
	}
}

// anyForcedAway reports whether err is the loss of a key of qs to a move's
// ForceAfter (see queue.forcedAway): the names share a cluster, not
// always a slot, so each is asked.
func anyForcedAway(ctx context.Context, qs []queue, err error) bool {
	for _, q := range qs {
		if q.s != nil && q.forcedAway(ctx, err) {
			return true
		}
	}
	return false
}

// routeAll puts every queue of qs on the session of routed session s that
// holds its name (see routed); they must all be on one cluster.
func routeAll(ctx context.Context, s *Session, qs []queue, try bool) error {
	for i := range qs {
		cs, err := s.route(ctx, qs[i].name, try)
		if err != nil {
			return qs[i].errorf(err)
		}
		if qs[i].s = cs; cs != qs[0].s {
			return qs[i].errorf(fmt.Errorf("%w: the names live on different clusters (%s, %s): give them one shard key, as in \"{team}/a\" and \"{team}/b\"",
				ErrInvalidArgument, qs[0].s.stamps.id, cs.stamps.id))
		}
	}
	return nil
}

// lockAllRoute puts qs on their cluster session when s is routed (routeAll),
// and refuses a plain session of a member cluster; else it does nothing.
func lockAllRoute(ctx context.Context, s *Session, qs []queue, try bool) error {
	switch {
	case s.router != nil:
		// Before routing, which may wait for a move that waits for the
		// caller's own grant (see routed).
		for _, q := range qs {
			if err := q.wouldDeadlock(ctx); err != nil {
				return q.errorf(err)
			}
		}
		if err := routeAll(ctx, s, qs, try); err != nil {
			return allError(err)
		}
	case s.member:
		return allError(qs[0].errorf(errShardMember))
	}
	return nil
}

func lockAllOnce(ctx context.Context, s *Session, names []string, try bool) (ls *Locks, qs []queue, err error) {
	qs, err = lockAllQueues(s, names)
	if err != nil {
		return nil, nil, allError(err)
	}
	if err := lockAllRoute(ctx, s, qs, try); err != nil {
		return nil, nil, err
	}
	s = qs[0].s
	start := time.Now()
	var ws []*waiter
	defer func() {
		for i, q := range qs {
			if err != nil {
				q.finishAcquire(start, nil, err)
			} else {
				q.finishAcquire(start, ws[i], nil)
			}
		}
	}()
	if err := s.wanted(ctx); err != nil {
		return nil, qs, allError(err)
	}
	for _, q := range qs {
		if err := q.wouldDeadlock(ctx); err != nil {
			return nil, qs, q.errorf(err)
		}
	}
	opCtx, done := s.bound(ctx)
	defer done()
	ws, err = acquireAll(opCtx, qs, try)
	if err == nil {
		// No grant after the caller gave up, nor past the token space
		// (queue.grant), nor of a set one of whose names was lost while
		// another was awaited.
		if err = s.grantable(ctx, ws...); err == nil {
			err = confirmAll(opCtx, ws)
		}
		if err != nil {
			abandonAll(ws, err)
		}
	}
	if err != nil {
		return nil, qs, allError(s.cause(ctx, err))
	}
	return newLocks(ws), qs, nil
}

// confirmAll checks in one Txn that every key of ws is still there with
// its create revision. A name granted at once has no watch on its key
// while LockAll waits for another, so a break (or a forced move) of it is
// seen only here. It returns nil when every key is; an error wrapping
// ErrLockLost naming the first name lost; or the read's error.
func confirmAll(ctx context.Context, ws []*waiter) error {
	if len(ws) < 2 {
		return nil
	}
	cmps, reads := make([]clientv3.Cmp, len(ws)), make([]clientv3.Op, len(ws))
	for i, w := range ws {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev)
		reads[i] = clientv3.OpGet(w.key, clientv3.WithKeysOnly())
	}
	resp, err := confirmRead(ctx, ws[0].q.s, cmps, reads)
	if err != nil {
		return err
	}
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().Kvs; !resp.Succeeded && (len(kvs) == 0 || kvs[0].CreateRevision != ws[i].rev) {
			// Lost with the session's lease (ErrSessionExpired), or alone.
			if cause := ws[i].lost(); !errors.Is(cause, ErrLockLost) {
				return ws[i].q.errorf(cause)
			}
			return ws[i].q.errorf(fmt.Errorf("%w: %q was lost while the set was awaited", ErrLockLost, ws[i].q.name))
		}
	}
	return nil
}

// confirmRead sends confirmAll's Txn (it writes nothing) over the
// session's paths (the keeper's connection first, the balanced one on a
// retry), again after each failure, until it is answered, refused, or ctx
// or the session ends.
func confirmRead(ctx context.Context, s *Session, cmps []clientv3.Cmp, reads []clientv3.Op) (*clientv3.TxnResponse, error) {
	b := wire.NewBackoff(requestFloor, requestCeil)
	for retry := false; ; retry = true {
		actx, kv, done := s.book.attempt(ctx, retry)
		resp, err := kv.Txn(actx).If(cmps...).Else(reads...).Commit()
		done()
		if err == nil {
			return resp, nil
		}
		if wire.Classify(err) == wire.Refused {
			return nil, err
		}
		if err := s.retryUnknown(ctx, b, err, "the set's keys", func() {}); err != nil {
			return nil, err
		}
	}
}

// allError wraps err of LockAll, unless it names its lock already.
func allError(err error) error {
	if _, ok := err.(*Error); ok {
		return err
	}
	return newError("lock all", "", err)
}

// acquireAll enqueues one key per queue in one Txn and waits until each is
// granted (exclusive; in turn: every key is in its queue meanwhile, so the
// order of the waits changes nothing). On failure every key is removed.
func acquireAll(ctx context.Context, qs []queue, try bool) ([]*waiter, error) {
	e := newAllTxn(qs, try, holderOf(ctx))
	ws, aheads, known, err := e.enqueue(ctx)
	if err != nil {
		return nil, err
	}
	if try {
		return ws, nil
	}
	for i, w := range ws {
		if err := w.wait(ctx, exclusive{}, aheads[i], known); err != nil {
			abandonAll(ws, err)
			return nil, w.q.errorf(err)
		}
	}
	return ws, nil
}

// abandonAll abandons every waiter of a failed LockAll, all at once (an
// abandon that the cluster does not answer leaves its key to the reaper).
func abandonAll(ws []*waiter, cause error) {
	parallel(len(ws), func(i int) { ws[i].abandon(cause) })
}
