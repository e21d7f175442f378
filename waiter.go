package etcdlock

// This file holds a waiter, one acquisition of a queue, and its life cycle:
// newWaiter, the writes to its own key besides the release (stamp, touch),
// and how it ends (free, abandon, lost; the release is in release.go).
//
// A key's life, and who frees its slot (the name is reused only once no
// write of it can still be applied: DESIGN.md, "Writes of unknown outcome"):
//
//	written   enqueue or tryPut answered    -> waiting or held
//	held      the policy granted            -> released, lost or abandoned
//	released  Unlock deleted it (guarded)   release frees the slot; if the
//	                                        delete's outcome stays unknown,
//	                                        the reaper deletes it, then frees
//	lost      deleted by someone else, or   lost frees the slot
//	          the lease is gone
//	abandoned the acquisition failed        abandon removes it now or hands it
//	                                        to the reaper, which frees the slot
//	unknown   a write's outcome is unknown  gone: the reaper raises the
//	          and the acquisition gives up  barrier, deletes what exists, frees

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// waiter is one acquisition: its key, its place, and the context that ends
// when the grant is lost or released.
type waiter struct {
	// Set by newWaiter, then read-only.
	q    queue
	sk   slotKey
	key  string
	rev  int64
	ctx  context.Context // child of the session's context
	lose context.CancelCauseFunc

	// seen is the revision at which the keys ahead were last learned (by
	// the enqueue Txn or a read); only the acquiring goroutine uses it.
	seen int64
	// grantedAt is when a wait ended in the grant (zero for a key granted
	// as it entered the queue); set by the acquiring goroutine before the
	// grant is returned, read-only after.
	grantedAt time.Time
	// delay is the last key ahead with a lock-delay that the wait saw go,
	// watched the keys ahead that the wait watches, records the pass
	// records of the name the last read found, and pass the end of the
	// delay the waiter holds off for (lockdelay.go); only the acquiring
	// goroutine uses them.
	delay   heldOff
	watched []heldOff
	records []*mvccpb.KeyValue
	pass    time.Time
	// valueRev is the mod revision of the value the waiter last wrote into
	// its key (a passed delay, lockdelay.go); 0: its enqueue's. Only the
	// acquiring goroutine uses it.
	valueRev int64

	monitorOnce sync.Once
	freeOnce    sync.Once
}

// token is the waiter's fencing token.
func (w *waiter) token() Token { return tokenOf(w.sk.gen, w.rev) }

// free releases the waiter's slot once its key is gone.
func (w *waiter) free() {
	w.freeOnce.Do(func() {
		w.q.s.book.untrack(w)
		w.q.gone(w.sk)
	})
}

func (q queue) newWaiter(sk slotKey, rev int64) *waiter {
	w := &waiter{q: q, sk: sk, key: sk.key, rev: rev}
	w.ctx, w.lose = context.WithCancelCause(q.s.ctx)
	q.s.book.track(w)
	return w
}

// abandon gives up the acquisition: it ends the waiter's context and deletes
// its key (guarded by its create revision) before it returns, or through the
// session's reaper when the cluster does not answer in time. A waiter with
// a lock-delay still ahead of it first writes the delay's end into its key,
// so that the waiter behind sees it with the deletion (lockdelay.go).
func (w *waiter) abandon(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	w.lose(cause)
	it := reapItem{key: w.key, rev: w.rev, done: w.free}
	if end := w.pendingDelay(); !end.IsZero() {
		it.pass, it.passUntil = w.passValue(end), end
	}
	w.q.s.book.removeNow(it)
}

// stamp writes the grant's moment into its key's value, once, in a goroutine
// of the session, so that inspection can say how long the lock has been held
// (Entry.Granted) without the hand-off waiting for a write. It is guarded
// by the key's create revision and by its mod revision being the waiter's
// own last write (the key unchanged since its enqueue, or its passed
// delay), so it never touches a later key of the
// name nor overwrites a later value (a Proclaim). Best effort: one attempt,
// given up when the grant ends first; a stamp that is lost, or lands after
// a Proclaim, leaves the key without one.
func (w *waiter) stamp() {
	w.q.s.goRun(func() {
		_, err := w.q.s.book.commit(w.ctx, false, wire.Txn{Dir: w.q.dir,
			Cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev),
				clientv3.Compare(clientv3.ModRevision(w.key), "=", max(w.rev, w.valueRev))},
			Thens: []clientv3.Op{clientv3.OpPut(w.key, w.q.s.value(w.sk, w.grantedAt), clientv3.WithIgnoreLease())}})
		if err != nil && w.ctx.Err() == nil {
			w.q.s.log.Debug("grant stamp not written", zap.String("key", w.key), zap.Error(err))
		}
	})
}

// touch rewrites the waiter's key with its value and grant stamp (guarded by
// its create revision), retrying until ctx ends, so that a waiter watching it
// re-reads.
func (w *waiter) touch(ctx context.Context) error {
	b := wire.NewBackoff(requestFloor, requestCeil)
	for retry := false; ; retry = true {
		resp, err := w.q.s.book.commit(ctx, retry, wire.Txn{Dir: w.q.dir,
			Cmps:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev)},
			Thens: []clientv3.Op{clientv3.OpPut(w.key, w.q.s.value(w.sk, w.grantedAt), clientv3.WithIgnoreLease())}})
		switch wire.Classify(err) {
		case wire.Applied:
			if resp.Succeeded {
				return nil
			}
			return w.lost()
		case wire.LeaseGone:
			return w.q.s.leaseLost()
		case wire.Refused:
			return err
		}
		if !b.Wait(ctx) {
			return ctxErr(ctx, ctx.Err())
		}
	}
}

// lost finds out why the waiter's key is gone, ends its context with that
// cause and returns it: ErrSessionExpired when the lease is gone, else
// ErrLockLost. The key's name is free for reuse then.
func (w *waiter) lost() error {
	defer w.free()
	if w.ctx.Err() == nil {
		cause := ErrLockLost
		ctx, cancel := context.WithTimeout(w.q.s.ctx, lossLookup)
		gone, err := w.q.s.leaseGone(ctx)
		cancel()
		switch {
		case gone:
			cause = ErrSessionExpired
		case err != nil:
			w.q.s.log.Warn("cannot tell why a key is gone; reporting it as lost", zap.String("key", w.key), zap.Error(err))
		}
		w.lose(cause)
	}
	return context.Cause(w.ctx)
}
