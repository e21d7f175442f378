package etcdlock

// This file holds the waiter's side of the lock-delay (WithLockDelay): a
// key ahead that went with its lease, and whose session set a delay, passes
// its grant only that long after the waiter saw it go. A liveness cost
// only: no safety argument rests on it (DESIGN.md, "Lock-delay").

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// heldOff is a key ahead that a wait saw deleted, of a session with a
// lock-delay.
type heldOff struct {
	d     time.Duration // the deleted key's lock-delay; 0: none seen
	key   string
	lease clientv3.LeaseID // the deleted key's
	rev   int64            // the deletion's revision
	seen  time.Time        // when the waiter saw it
}

// noteDelete records ev, a deletion of a key ahead, when the key's session
// set a lock-delay (the watch carries the deleted key's value).
func (w *waiter) noteDelete(ev *clientv3.Event) {
	if ev.Type != mvccpb.DELETE || ev.PrevKv == nil {
		return
	}
	if d := decodeValue(ev.PrevKv.Value).lockDelay(); d > 0 {
		w.delay = heldOff{d: d, key: string(ev.Kv.Key), lease: clientv3.LeaseID(ev.PrevKv.Lease), rev: ev.Kv.ModRevision, seen: time.Now()}
	}
}

// holdOff waits out the lock-delay of the last key with one that the wait
// saw go, if that key went with its lease (the lease ran out or was
// revoked); a key released, closed or broken while its lease lived passes
// at once. When the read that tells them apart fails, it waits (the delay
// costs only time). It returns ctx's error, or the grant's cause, if they
// end first.
func (w *waiter) holdOff(ctx context.Context) error {
	h := w.delay
	w.delay = heldOff{}
	if h.d <= 0 || time.Until(h.seen.Add(h.d)) <= 0 {
		return nil
	}
	expired, err := w.wentWithLease(ctx, h)
	if err == nil && !expired {
		return nil
	}
	w.q.s.log.Debug("lock-delay: waiting before the grant", zap.String("after", h.key),
		zap.Duration("delay", h.d), zap.Error(err))
	t := time.NewTimer(time.Until(h.seen.Add(h.d)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx, ctx.Err())
	case <-w.ctx.Done():
		return context.Cause(w.ctx)
	}
}

// wentWithLease reports whether h's key went with its session's lease: the
// session's barrier of this name (attached to the same lease, kept while it
// lives: barrier.go) was gone at the deletion's revision too.
func (w *waiter) wentWithLease(ctx context.Context, h heldOff) (bool, error) {
	actx, kv, done := w.q.s.book.attempt(ctx, true)
	defer done()
	resp, err := kv.Get(actx, barrierKey(w.q.dir, h.lease), clientv3.WithRev(h.rev), clientv3.WithKeysOnly())
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 0, nil
}
