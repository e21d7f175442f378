package etcdlock

// This file holds the revision-ordered waiter queue that every recipe is
// built on (DESIGN.md, "The queue"): its keys, enqueue, release and the frame
// every acquisition runs in. Each acquisition puts one key under the lock's
// prefix, attached to the session's lease; its name is the session's lease
// and a slot number; its create revision is its place in line and its
// fencing token. A waiter watches only the key(s) its policy names
// (wait.go), so a release wakes one waiter.
//
// A key's life cycle is in waiter.go.

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// lossLookup bounds the read that tells why a waiter's key is gone (lost).
const lossLookup = 3 * time.Second

// queue is one name's queue for one kind of recipe.
type queue struct {
	s    *Session
	name string
	dir  string // namePrefix(name)
	tag  string
	verb string // the acquiring verb, for errors: "lock", "campaign", ...
}

func newQueue(s *Session, name, tag, verb string) (queue, error) {
	if s == nil {
		return queue{}, newError(verb, name, fmt.Errorf("%w: nil session", ErrInvalidArgument))
	}
	if err := validateName(name); err != nil {
		return queue{}, newError(verb, "", err)
	}
	return queue{s: s, name: name, dir: namePrefix(name), tag: tag, verb: verb}, nil
}

// errorf wraps err of the queue's acquiring verb.
func (q queue) errorf(err error) error { return newError(q.verb, q.name, err) }

// opError wraps err of another operation (op) on the queue's name.
func (q queue) opError(op string, err error) error { return newError(op, q.name, err) }

// slotKey is an acquisition's key and the session slot it occupies.
type slotKey struct {
	key   string
	scope string
	slot  int
	at    time.Time // when the key was named: the value's enqueue time
	value string    // an election's value, stored with the key; "" otherwise
	// identity, when set (WithHolderIdentity), is stored with the key
	// instead of the session's.
	identity string
	// gen is the generation of the name's slot the key is written under
	// (0 on a cluster that is not sharded); set before each write.
	gen int64
	// uncertain: a write of this key had an unknown outcome, so it may be
	// applied (again) later; the slot is reused only once the reaper made
	// sure it cannot (gone).
	uncertain bool
}

// with returns sk to be stored with value instead.
func (sk slotKey) with(value string) slotKey {
	sk.value = value
	return sk
}

// as returns sk to be stored with the holder identity id ("": the
// session's).
func (sk slotKey) as(id string) slotKey {
	sk.identity = id
	return sk
}

// newKey takes a slot of the session in this queue and returns its key,
// to be stored with value.
func (q queue) newKey(value string) slotKey {
	scope := q.dir + q.tag
	slot := q.s.book.takeSlot(scope)
	return slotKey{key: waiterKey(q.dir, q.tag, q.s.lease, slot), scope: scope, slot: slot, at: time.Now(), value: value}
}

// gone is called once sk's key is known to be deleted (or never written) and
// the acquisition gives it up. The slot is freed at once if every write of
// the key had a known outcome; else the reaper first makes sure that none of
// them can still be applied (raiseBarrier), and deletes what they created.
func (q queue) gone(sk slotKey) {
	free := func() { q.s.book.freeSlot(sk.scope, sk.slot) }
	if sk.uncertain {
		q.s.book.reapUnknown(q.dir, sk.key, free)
		return
	}
	free()
}

// drop gives up a key that may exist, of unknown create revision: the
// reaper deletes it (see gone), then frees the slot.
func (q queue) drop(sk slotKey) {
	sk.uncertain = true
	q.gone(sk)
}

// acquisition is the frame every Lock and Try path runs in. It fails at once
// when ctx or the session has ended; runs body on a context that also ends
// with the session (so a client cut off from the cluster fails with
// ErrSessionExpired instead of hanging until ctx ends); grants body's waiter
// only while ctx and the session are still live (else removes its key);
// wraps the error with the queue's name; and reports to the Observer.
func (q queue) acquisition(ctx context.Context, body func(context.Context) (*waiter, error)) (w *waiter, err error) {
	start := time.Now()
	defer func() { q.finishAcquire(start, w, err) }()
	if err := q.admit(ctx); err != nil {
		return nil, q.errorf(err)
	}
	opCtx, done := q.s.bound(ctx)
	defer done()
	w, err = body(opCtx)
	if err != nil {
		return nil, q.errorf(q.s.cause(ctx, err))
	}
	return q.grant(ctx, w)
}

// admit fails an acquisition before it writes anything: ctx or the session
// ended, or ctx carries the session's grant of the name (wouldDeadlock).
func (q queue) admit(ctx context.Context) error {
	if err := q.s.wanted(ctx); err != nil {
		return err
	}
	return q.wouldDeadlock(ctx)
}

// grant returns w unless ctx or the session ended first (no grant after the
// caller gave up), or its token cannot carry its generation
// (ErrTokenOverflow). The key is removed then.
func (q queue) grant(ctx context.Context, w *waiter) (*waiter, error) {
	if err := q.s.grantable(ctx, w); err != nil {
		w.abandon(err)
		return nil, q.errorf(err)
	}
	return w, nil
}

// acquire enqueues and waits until pol grants. On any failure the key is
// removed before it returns, or by the session's reaper when the cluster
// does not answer.
func (q queue) acquire(ctx context.Context, value string, pol policy) (*waiter, error) {
	return q.acquisition(ctx, func(ctx context.Context) (*waiter, error) {
		w, ahead, known, err := q.enqueue(ctx, value, pol)
		if err != nil {
			return nil, err
		}
		if err := w.wait(ctx, pol, ahead, known); err != nil {
			w.abandon(err)
			return nil, err
		}
		return w, nil
	})
}

// checkKind fails with ErrKindMismatch when a key ahead belongs to another
// kind of recipe (or a semaphore of another size). It checks every key the
// policy read, not only the nearest: a refused joiner's key may sit between
// a holder and me until it is removed. A policy grants only when its read
// saw the whole queue ahead of me, so no grant passes an incompatible key.
func (q queue) checkKind(ahead []*mvccpb.KeyValue) error {
	for _, kv := range ahead {
		if tag := tagOf(q.dir, string(kv.Key)); !tagsCompatible(tag, q.tag) {
			return kindMismatch(tag)
		}
	}
	return nil
}

func kindMismatch(tag string) error {
	kind, _ := kindOfTag(tag)
	if kind == kindSemaphore {
		return fmt.Errorf("%w: name is used by a semaphore of %s", ErrKindMismatch, tag[1:])
	}
	return fmt.Errorf("%w: name is used by a %s", ErrKindMismatch, kind)
}

// retryUnknown is the tail of a write's retry loop after an outcome that is
// unknown: the key becomes uncertain, and the loop goes on after a pause
// (nil) unless ctx or the session ended (the error to return; the slot is
// then given up).
func (q queue) retryUnknown(ctx context.Context, sk *slotKey, b *wire.Backoff, err error) error {
	sk.uncertain = true
	return q.s.retryUnknown(ctx, b, err, sk.key, func() { q.gone(*sk) })
}

// resolveRefusal handles the Else branch of a key-creating Txn whose compares
// failed: mine is what it read of the key, barrier what it read of the
// session's barrier, stamp what it read of the slot's stamp (sharded
// sessions; errSlotMoved when the slot is no longer active here). It returns a waiter when an earlier attempt of this
// acquisition created the key; again when the Txn must be sent again at once
// (the barrier moved, or a key of this name outlived its acquisition and sk
// now names another slot); neither when the caller's own compares refused
// it; or the error of a barrier request.
func (q queue) resolveRefusal(ctx context.Context, sk *slotKey, sent int64, sg slotGuard, mine, barrier, stamp []*mvccpb.KeyValue) (w *waiter, again bool, err error) {
	if len(mine) > 0 {
		if sk.uncertain {
			// An earlier attempt of this acquisition was applied (the slot's
			// name is nobody else's), under the generation it wrote.
			sk.gen = decodeValue(mine[0].Value).Gen
			return q.newWaiter(*sk, mine[0].CreateRevision), false, nil
		}
		// Never expected: a key of this name that outlived its acquisition.
		// Leave it to the reaper and use another name.
		q.drop(*sk)
		*sk = q.newKey(sk.value).as(sk.identity)
		return nil, true, nil
	}
	// The barrier moved (the reaper retired writes of the session): this
	// attempt wrote nothing.
	moved, err := q.s.book.barrierMoved(ctx, q.dir, sent, barrier)
	if moved || err != nil {
		return nil, moved, err
	}
	// Or the slot's stamp moved (a move froze it, or raised its generation).
	again, err = sg.refused(q, stamp)
	return nil, again, err
}

// enqueue puts a new key at the end of the queue in one Txn that also returns
// the keys ahead of it (the Get runs before the Put). The Txn writes only if
// the key is new and the session's barrier of this queue is where the session
// last saw it (barrier.go), so a late copy of it can never create a key the
// library gave up on. known is false when a retry found the key already
// written (unknown outcome of the first try): the keys ahead must then be read.
func (q queue) enqueue(ctx context.Context, value string, pol policy) (*waiter, []*mvccpb.KeyValue, bool, error) {
	e := enqueueTxn{q: q, sk: q.newKey(value).as(holderOf(ctx))}
	// With values: a key's lock-delay (watchDelays).
	e.get = []clientv3.OpOption{clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
	if n := pol.lookback(); n > 0 {
		e.get = append(e.get, clientv3.WithLimit(n))
	}
	b := wire.NewBackoff(requestFloor, requestCeil)
	for {
		if err := q.s.runHook(hookBeforeEnqueue, nil); err != nil {
			q.gone(e.sk)
			return nil, nil, false, err
		}
		bcmp, bput, sent := q.s.book.barrierGuard(q.dir)
		sg := q.slotGuard()
		e.sk.gen = sg.gen
		resp, err := e.send(ctx, append(sg.cmps, bcmp), bput, sg.read)
		if err = q.s.runHook(hookEnqueued, err); err == nil {
			w, ahead, known, aerr := e.answered(ctx, resp, sent, sg)
			if w != nil {
				return w, ahead, known, nil
			}
			if aerr == nil {
				continue // nothing written: send it again
			}
			err = aerr
		}
		switch wire.Classify(err) {
		case wire.LeaseGone:
			q.gone(e.sk) // the lease is gone, and with it any key of it
			return nil, nil, false, q.s.leaseLost()
		case wire.Refused:
			q.gone(e.sk) // this attempt wrote nothing
			return nil, nil, false, err
		}
		if err := q.retryUnknown(ctx, &e.sk, b, err); err != nil {
			return nil, nil, false, err
		}
	}
}

// enqueueTxn is one acquisition's enqueue Txn, sent until it is answered.
type enqueueTxn struct {
	q   queue
	sk  slotKey
	get []clientv3.OpOption // the read of the keys ahead
	// explain: the Txn also reports, when its compare fails, the key and the
	// barrier. Only after an unknown outcome or a failed compare: every
	// member decodes and applies each byte of the Txn.
	explain bool
}

func (e *enqueueTxn) send(ctx context.Context, guards []clientv3.Cmp, bput, stampRead []clientv3.Op) (*clientv3.TxnResponse, error) {
	q := e.q
	op := wire.Txn{Dir: q.dir,
		Cmps: append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.sk.key), "=", 0)}, guards...),
		Thens: append([]clientv3.Op{clientv3.OpGet(q.dir, e.get...),
			clientv3.OpPut(e.sk.key, q.s.value(e.sk, time.Time{}), clientv3.WithLease(q.s.lease))}, bput...)}
	if e.explain || e.sk.uncertain {
		op.Elses = append([]clientv3.Op{clientv3.OpGet(e.sk.key), clientv3.OpGet(barrierKey(q.dir, q.s.lease), clientv3.WithKeysOnly())}, stampRead...)
	}
	return q.s.book.commit(ctx, e.sk.uncertain, op)
}

// answered returns the waiter of an answered Txn (or of an earlier attempt
// it found applied), with the keys ahead when it learned them (known); no
// waiter and no error when the Txn must be sent again; or the error of a
// barrier request.
func (e *enqueueTxn) answered(ctx context.Context, resp *clientv3.TxnResponse, sent int64, sg slotGuard) (*waiter, []*mvccpb.KeyValue, bool, error) {
	if resp.Succeeded {
		if sent == 0 {
			e.q.s.book.learnBarrier(e.q.dir, resp.Header.Revision) // created with the key
		}
		w := e.q.newWaiter(e.sk, resp.Header.Revision)
		w.seen = w.rev
		return w, resp.Responses[0].GetResponseRange().Kvs, true, nil
	}
	if len(resp.Responses) == 0 {
		e.explain = true // sent without Else: ask again, with it
		return nil, nil, false, nil
	}
	w, _, err := e.q.resolveRefusal(ctx, &e.sk, sent, sg,
		resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs, stampOf(resp, 2))
	return w, nil, false, err
}
