package etcdlock

// This file holds the waiter's side of the lock-delay (WithLockDelay): a
// key ahead that went with its lease, and whose session set a delay, passes
// its grant only that long after the waiter saw it go. A waiter that gives
// up while such a delay is ahead of it passes the rest on, in its own key's
// last value, to the waiter behind. A liveness cost only: no safety argument
// rests on it (DESIGN.md, "Lock-delay").

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// heldOff is a key ahead that a wait saw deleted (or found gone), of a
// session with a lock-delay, or that passed one on.
type heldOff struct {
	d      time.Duration // the key's lock-delay; 0: none
	passed time.Time     // the end of a delay the key passed on; zero: none
	key    string
	create int64            // the key's create revision
	lease  clientv3.LeaseID // the key's
	rev    int64            // the deletion's revision; 0: unknown (a read found the key gone)
	seen   time.Time        // when the waiter saw it go
}

// end returns when h no longer holds a grant back, if its key went with
// its lease: the later of d after it was seen to go and the delay passed on.
func (h heldOff) end() time.Time {
	end := h.passed
	if own := h.seen.Add(h.d); h.d > 0 && own.After(end) {
		end = own
	}
	return end
}

// delayOf returns what kv, a key ahead with its value (or a deleted key's
// previous value), may hold off; false when it sets no delay.
func delayOf(kv *mvccpb.KeyValue, rev int64, seen time.Time) (heldOff, bool) {
	v := decodeValue(kv.Value)
	h := heldOff{d: v.lockDelay(), passed: v.passed(), key: string(kv.Key),
		create: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease), rev: rev, seen: seen}
	return h, h.d > 0 || !h.passed.IsZero()
}

// noteDelete records ev, a deletion of a key ahead, when the key's session
// set a lock-delay or the key passed one on (the watch carries the deleted
// key's value).
func (w *waiter) noteDelete(ev *clientv3.Event) {
	if ev.Type != mvccpb.DELETE {
		return
	}
	w.forget(string(ev.Kv.Key))
	if ev.PrevKv == nil {
		return
	}
	if h, ok := delayOf(ev.PrevKv, ev.Kv.ModRevision, time.Now()); ok {
		w.delay = h
	}
}

// watchDelays keeps the keys ahead that plan watches (as a read returned
// them, with their values and the delays they set), so that a deletion the
// wait learns of only by a read does not drop a delay (noteMissed): one the
// key set, or one it passed on after that read (its pass record).
func (w *waiter) watchDelays(plan watchPlan, ahead []*mvccpb.KeyValue) {
	w.watched = w.watched[:0]
	for _, kv := range ahead {
		if k := string(kv.Key); k != plan.key && !plan.set[k] {
			continue
		}
		h, _ := delayOf(kv, 0, time.Time{})
		w.watched = append(w.watched, h)
	}
}

// forget drops key, whose deletion the wait saw, from the watched keys.
func (w *waiter) forget(key string) {
	for i, h := range w.watched {
		if h.key == key {
			w.watched = append(w.watched[:i], w.watched[i+1:]...)
			return
		}
	}
}

// noteMissed, at a grant after a wait that saw no deletion with a delay,
// takes a watched key that is gone from ahead and set a delay, or passed
// one on (in its value as a read saw it, or in its pass record as the last
// read found it), as the key to hold off for, seen now: the wait learned of
// its deletion from a read (after a compaction, or one before its watch
// began), which carries no deleted value and no revision. holdOff then asks
// whether its lease is gone now.
func (w *waiter) noteMissed(ahead []*mvccpb.KeyValue) {
	defer func() { w.watched, w.records = w.watched[:0], w.records[:0] }()
	if w.delay.d > 0 || !w.delay.passed.IsZero() {
		return
	}
	now := time.Now()
	var in map[string]bool // the keys ahead, made once a key may hold off
	records := passRecords(w.records)
	for _, h := range w.watched {
		if p := recordedPass(records, h); p.After(h.passed) {
			h.passed = p
		}
		if h.d <= 0 && h.passed.IsZero() {
			continue // most keys: nothing to weigh, no scan of ahead
		}
		if in == nil {
			in = keySet(ahead)
		}
		if in[h.key] {
			continue
		}
		h.seen = now
		if h.end().After(w.delay.end()) {
			w.delay = h // of several gone (a semaphore's), the latest end
		}
	}
}

// keySet returns the keys of kvs as a set: a semaphore's front waiter
// watches n keys, and looking each up in ahead would cost n².
func keySet(kvs []*mvccpb.KeyValue) map[string]bool {
	set := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		set[string(kv.Key)] = true
	}
	return set
}

// holdOff waits out the lock-delay of the last key with one that the wait
// saw go (see holdOffEnd). It returns ctx's error, or the grant's cause, if
// they end first; the waiter then passes what is left on (abandon).
func (w *waiter) holdOff(ctx context.Context) error {
	h := w.delay
	w.delay = heldOff{}
	if !h.end().After(time.Now()) {
		return nil
	}
	end := w.holdOffEnd(ctx, h)
	if !end.After(time.Now()) {
		return nil
	}
	w.pass = end
	w.writePass(ctx, end)
	w.q.s.log.Debug("lock-delay: waiting before the grant", zap.String("after", h.key),
		zap.Duration("delay", h.d), zap.Time("until", end))
	_ = w.q.s.runHook(hookHoldOff, nil)
	t := time.NewTimer(time.Until(end))
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

// holdOffEnd returns when the grant may pass after h: at the end of a delay
// h's key passed on (by this client's clock; at most maxLockDelay from now,
// as another client's clock wrote it), and, if h's key went with its lease
// (the lease ran out or was revoked), no sooner than d after the waiter saw
// it go; a key released, closed or broken while its lease lived passes at
// once. When the read that tells them apart fails, it counts as gone with
// its lease (the delay costs only time).
func (w *waiter) holdOffEnd(ctx context.Context, h heldOff) time.Time {
	now := time.Now()
	end := h.passed
	if limit := now.Add(maxLockDelay); end.After(limit) {
		end = limit
	}
	own := h.seen.Add(h.d)
	if h.d <= 0 || !own.After(now) || !own.After(end) {
		return end
	}
	expired, err := w.wentWithLease(ctx, h)
	if err == nil && !expired {
		return end
	}
	if err != nil {
		w.q.s.log.Debug("lock-delay: cannot tell how a key went; waiting", zap.String("after", h.key), zap.Error(err))
	}
	return own
}

// wentWithLease reports whether h's key went with its session's lease: the
// session's barrier of this name (attached to the same lease, kept while it
// lives: barrier.go) was gone at the deletion's revision too. For a deletion
// of unknown revision it asks now: a barrier there now means that the lease
// lived at the deletion; one gone may have gone later, and counts as gone.
func (w *waiter) wentWithLease(ctx context.Context, h heldOff) (bool, error) {
	actx, kv, done := w.q.s.book.attempt(ctx, true)
	defer done()
	resp, err := kv.Get(actx, barrierKey(w.q.dir, h.lease), clientv3.WithRev(h.rev), clientv3.WithKeysOnly())
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 0, nil
}

// writePass writes end, the lock-delay the waiter holds off for, into its
// key as soon as the hold-off starts (guarded by its create revision), so
// that however the key goes meanwhile (its caller gives up, Session.Close,
// its lease ends, its process dies) the waiter behind sees the delay with
// the deletion, and a read of the queue sees it (or, once the key is gone,
// its pass record: lockdelay_record.go). Best effort, bounded
// by the delay itself (the grant never waits for it): one that fails
// leaves abandon's.
func (w *waiter) writePass(ctx context.Context, end time.Time) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	it := reapItem{key: w.key, rev: w.rev, pass: w.passValue(end), passUntil: end}
	if rev, err := w.q.s.book.passOn(ctx, &it); err == nil && rev > 0 {
		w.valueRev = rev
	}
}

// pendingDelay returns the end of the lock-delay the waiter holds off for,
// or was passed by the key it saw go and has not weighed yet, if it is
// still ahead; zero if none. A delay of the key's own session that has not
// been weighed is not passed on: the key may have gone by a release, which
// passes at once.
func (w *waiter) pendingDelay() time.Time {
	end := w.pass
	if e := w.delay.passed; e.After(end) {
		end = e
	}
	if !end.After(time.Now()) {
		return time.Time{}
	}
	return end
}

// passValue returns the waiter's key's value with the end of the lock-delay
// it passes on (rounded up to the millisecond: never earlier).
func (w *waiter) passValue(end time.Time) string {
	v := decodeValue([]byte(w.q.s.value(w.sk, w.grantedAt)))
	v.Pass = passMillis(end)
	return v.encode()
}
