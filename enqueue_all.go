package etcdlock

// This file holds the Txn of LockAll and TryLockAll: one key per name,
// created together or not at all.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// allTxn is one LockAll's enqueue Txn, sent until it is answered. Every key
// compares its own absence and its session's barrier of its name, exactly
// as a lone enqueue does (queue.enqueue), so a late copy of it creates
// nothing once the reaper raised any of those barriers; a TryLockAll's
// compares the emptiness of every name instead of its key's absence (which
// it implies).
type allTxn struct {
	s   *Session
	qs  []queue
	sks []slotKey
	sgs []slotGuard // the slot guard each key was last sent with (sharded)
	try bool
	// uncertain: an attempt's outcome is unknown, so it may be applied
	// (again) later; explain: the Txn also reports, when refused, the keys
	// and barriers (as enqueueTxn's).
	uncertain, explain bool
}

func newAllTxn(qs []queue, try bool, identity string) *allTxn {
	e := &allTxn{s: qs[0].s, qs: qs, try: try, sks: make([]slotKey, len(qs)), sgs: make([]slotGuard, len(qs))}
	for i, q := range qs {
		e.sks[i] = q.newKey("").as(identity)
	}
	return e
}

// enqueue sends the Txn until it is answered, and returns the waiters (in
// the order of qs), the keys ahead of each (one entry per waiter), and
// whether those are known (false when a retry found an earlier attempt
// applied: every entry is then nil and each waiter reads its own).
func (e *allTxn) enqueue(ctx context.Context) ([]*waiter, [][]*mvccpb.KeyValue, bool, error) {
	b := wire.NewBackoff(requestFloor, requestCeil)
	for {
		if err := e.s.runHook(hookBeforeEnqueue, nil); err != nil {
			e.gone()
			return nil, nil, false, err
		}
		sents := make([]int64, len(e.qs))
		resp, err := e.send(ctx, sents)
		if err = e.s.runHook(hookEnqueued, err); err == nil {
			ws, aheads, known, aerr := e.answered(ctx, resp, sents)
			switch {
			case ws != nil:
				return ws, aheads, known, nil
			case aerr == nil:
				continue // nothing written: send it again
			case errors.Is(aerr, ErrLocked) || errors.Is(aerr, ErrKindMismatch) || errors.Is(aerr, errRefusedAll):
				return nil, nil, false, aerr // nothing written; the keys are given up
			}
			err = aerr
		}
		switch wire.Classify(err) {
		case wire.LeaseGone:
			e.gone()
			return nil, nil, false, e.s.leaseLost()
		case wire.Refused:
			e.gone()
			if errors.Is(err, rpctypes.ErrGRPCTooManyOps) || errors.Is(err, rpctypes.ErrTooManyOps) {
				err = fmt.Errorf("%w: %d names are more than the server takes in one Txn (its --max-txn-ops): %w", ErrInvalidArgument, len(e.qs), err)
			}
			return nil, nil, false, err
		}
		e.markUncertain()
		if err := e.s.retryUnknown(ctx, b, err, e.sks[0].key, e.gone); err != nil {
			return nil, nil, false, err
		}
	}
}

// markUncertain notes that an attempt's outcome is unknown.
func (e *allTxn) markUncertain() {
	e.uncertain = true
	for i := range e.sks {
		e.sks[i].uncertain = true
	}
}

// gone gives up every key (see queue.gone).
func (e *allTxn) gone() {
	for i, q := range e.qs {
		q.gone(e.sks[i])
	}
}

// errRefusedAll: a LockAll's Txn was refused and nothing explains it.
var errRefusedAll = errors.New("enqueue refused for no known reason")

// send sends one attempt; sents receives the barrier revision each key
// compares.
func (e *allTxn) send(ctx context.Context, sents []int64) (*clientv3.TxnResponse, error) {
	op := wire.Txn{Dir: e.qs[0].dir, Dirs: make([]string, len(e.qs))}
	var bputs, stampReads []clientv3.Op
	for i, q := range e.qs {
		op.Dirs[i] = q.dir
		key := e.sks[i].key
		bcmp, bput, sent := e.s.book.barrierGuard(q.dir)
		sents[i] = sent
		bputs = append(bputs, bput...)
		e.sgs[i] = q.slotGuard()
		e.sks[i].gen = e.sgs[i].gen
		stampReads = append(stampReads, e.sgs[i].read...)
		// A TryLockAll's emptiness of the name covers its key's absence
		// (the key is under q.dir): one compare fewer per name keeps a
		// sharded set of shard.MaxLockAllNames within --max-txn-ops.
		absent := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if e.try {
			absent = clientv3.Compare(clientv3.CreateRevision(q.dir), "=", 0).WithPrefix()
		}
		op.Cmps = append(op.Cmps, absent, bcmp)
		op.Cmps = append(op.Cmps, e.sgs[i].cmps...)
		if !e.try {
			op.Thens = append(op.Thens, clientv3.OpGet(q.dir, clientv3.WithPrefix(), // with values: watchDelays
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)))
		}
		op.Thens = append(op.Thens, clientv3.OpPut(key, e.s.value(e.sks[i], time.Time{}), clientv3.WithLease(e.s.lease)))
		if e.explain || e.uncertain || e.try {
			op.Elses = append(op.Elses, clientv3.OpGet(key),
				clientv3.OpGet(barrierKey(q.dir, e.s.lease), clientv3.WithKeysOnly()))
			if e.try {
				op.Elses = append(op.Elses, clientv3.OpGet(q.dir, clientv3.WithFirstCreate()...))
			}
		}
	}
	op.Thens = append(op.Thens, bputs...)
	if op.Elses != nil {
		op.Elses = append(op.Elses, stampReads...) // after every name's own reads
	}
	return e.s.book.commit(ctx, e.uncertain, op)
}

// stride is the number of responses per name in the Then (thens) and Else
// (elses) branches.
func (e *allTxn) stride() (thens, elses int) {
	if e.try {
		return 1, 3
	}
	return 2, 2
}

// answered returns the waiters of an answered Txn (or of an earlier attempt
// it found applied); none and no error when the Txn must be sent again; or
// the error that ends the call (ErrLocked of a refused TryLockAll, the
// error of a barrier request).
func (e *allTxn) answered(ctx context.Context, resp *clientv3.TxnResponse, sents []int64) ([]*waiter, [][]*mvccpb.KeyValue, bool, error) {
	if resp.Succeeded {
		rev := resp.Header.Revision
		tn, _ := e.stride()
		ws := make([]*waiter, len(e.qs))
		aheads := make([][]*mvccpb.KeyValue, len(e.qs))
		for i, q := range e.qs {
			if sents[i] == 0 {
				e.s.book.learnBarrier(q.dir, rev) // created with the key
			}
			ws[i] = q.newWaiter(e.sks[i], rev)
			ws[i].seen = rev
			if !e.try {
				aheads[i] = resp.Responses[i*tn].GetResponseRange().Kvs
			}
		}
		return ws, aheads, true, nil
	}
	if len(resp.Responses) == 0 {
		e.explain = true // sent without Else: ask again, with it
		return nil, nil, false, nil
	}
	return e.refused(ctx, resp, sents)
}

// refused resolves a refused Txn (see answered and queue.resolveRefusal):
// an earlier attempt applied (every key then exists, created together), a
// key of a slot that outlived its acquisition (renamed), a barrier that
// moved (sent again), or a TryLockAll's name held or waited on.
func (e *allTxn) refused(ctx context.Context, resp *clientv3.TxnResponse, sents []int64) ([]*waiter, [][]*mvccpb.KeyValue, bool, error) {
	_, en := e.stride()
	again := false
	for i := range e.qs {
		if mine := resp.Responses[i*en].GetResponseRange().Kvs; len(mine) > 0 {
			if e.uncertain {
				return e.adopt(resp, mine[0].CreateRevision), make([][]*mvccpb.KeyValue, len(e.qs)), false, nil
			}
			e.qs[i].drop(e.sks[i]) // never expected: leave it to the reaper
			e.sks[i] = e.qs[i].newKey("").as(e.sks[i].identity)
			e.sks[i].uncertain = e.uncertain
			again = true
		}
	}
	for i, q := range e.qs {
		moved, err := e.s.book.barrierMoved(ctx, q.dir, sents[i], resp.Responses[i*en+1].GetResponseRange().Kvs)
		if err != nil {
			return nil, nil, false, err
		}
		again = again || moved
	}
	for i, q := range e.qs {
		if again {
			break
		}
		moved, err := e.sgs[i].refused(q, stampOf(resp, len(e.qs)*en+i))
		if err != nil {
			return nil, nil, false, err // errSlotMoved: enqueue gives the keys up
		}
		again = moved
	}
	if again {
		return nil, nil, false, nil
	}
	e.gone()
	if e.try {
		for i, q := range e.qs {
			if kvs := resp.Responses[i*en+2].GetResponseRange().Kvs; len(kvs) > 0 {
				return nil, nil, false, q.errorf(refusal(q.dir, q.tag, kvs[0]))
			}
		}
		return nil, nil, false, ErrLocked
	}
	return nil, nil, false, errRefusedAll
}

// adopt returns the waiters of an earlier attempt that was applied at rev,
// each under the generation its key was written with (resp's Else reads).
func (e *allTxn) adopt(resp *clientv3.TxnResponse, rev int64) []*waiter {
	_, en := e.stride()
	ws := make([]*waiter, len(e.qs))
	for i, q := range e.qs {
		if mine := resp.Responses[i*en].GetResponseRange().Kvs; len(mine) > 0 {
			e.sks[i].gen = decodeValue(mine[0].Value).Gen
		}
		ws[i] = q.newWaiter(e.sks[i], rev)
	}
	return ws
}
