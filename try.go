package etcdlock

// This file holds the Try paths: one Txn that writes a key only when the
// queue allows it, and writes nothing otherwise.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// tryEnqueue writes a key only if the name has no key at all (one Txn; an
// empty range compares as a zero key). It returns ErrLocked, wrapped with the
// holder's key, when the name is taken, and writes nothing then.
func (q queue) tryEnqueue(ctx context.Context, value string) (*waiter, error) {
	return q.tryEnqueueIf(ctx, value, clientv3.Compare(clientv3.CreateRevision(q.dir), "=", 0).WithPrefix())
}

// tryEnqueueIf writes a key only if every cmp holds, in one Txn, and
// otherwise fails with ErrLocked (or ErrKindMismatch), writing nothing.
func (q queue) tryEnqueueIf(ctx context.Context, value string, cmps ...clientv3.Cmp) (*waiter, error) {
	return q.acquisition(ctx, func(ctx context.Context) (*waiter, error) {
		w, first, err := q.tryPut(ctx, value, cmps)
		if err == nil && w == nil {
			return nil, refusal(q.dir, q.tag, first)
		}
		return w, err
	})
}

// tryEnqueueCounting joins the queue only if fewer than n keys are in it,
// all of its kind and size: it reads the queue, then puts its key guarded by
// "no key created since that read" (a waiter's touch or a release does not
// count: neither adds a key). A concurrent join makes it retry a few times.
func (q queue) tryEnqueueCounting(ctx context.Context, n int64) (*waiter, error) {
	return q.acquisition(ctx, func(ctx context.Context) (*waiter, error) {
		for range 5 {
			resp, err := q.readFront(ctx, n)
			if err != nil {
				return nil, err
			}
			if err := q.checkKind(resp.Kvs); err != nil {
				return nil, err
			}
			if resp.Count >= n {
				return nil, fmt.Errorf("%w: %d of %d held or waited on", ErrLocked, resp.Count, n)
			}
			w, _, err := q.tryPut(ctx, "", []clientv3.Cmp{
				clientv3.Compare(clientv3.CreateRevision(q.dir), "<", resp.Header.Revision+1).WithPrefix()})
			if err != nil || w != nil {
				return w, err
			}
			// Someone joined since the read: look again.
		}
		return nil, fmt.Errorf("%w: the queue kept changing", ErrLocked)
	})
}

// readFront reads the queue's first n keys (oldest first), retrying until
// ctx ends while the read fails for a reason that may pass.
func (q queue) readFront(ctx context.Context, n int64) (*clientv3.GetResponse, error) {
	b := wire.NewBackoff(requestFloor, requestCeil)
	for {
		actx, kv, done := q.s.book.attempt(ctx, true)
		resp, err := kv.Get(actx, q.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(n))
		done()
		switch wire.Classify(err) {
		case wire.Applied:
			return resp, nil
		case wire.LeaseGone, wire.Refused:
			return nil, err
		}
		if !b.Wait(ctx) {
			return nil, ctxErr(ctx, err)
		}
	}
}

// refusal is the error of a Try refused with first the queue's first key
// (nil: the queue was empty, or the compare that refused it says no more).
func refusal(dir, tag string, first *mvccpb.KeyValue) error {
	if first == nil {
		return ErrLocked
	}
	if ft := tagOf(dir, string(first.Key)); !tagsCompatible(ft, tag) {
		return kindMismatch(ft)
	}
	holder := decodeValue(first.Value)
	return fmt.Errorf("%w: held by %s (token %d)", ErrLocked, holderName(holder.Identity), first.CreateRevision)
}

func holderName(identity string) string {
	if strings.TrimSpace(identity) == "" {
		return "an unknown holder"
	}
	return identity
}

// tryPut writes a new key of the session only if every cmp holds and the
// session's barrier is where it last saw it, in one Txn, retried while its
// outcome is unknown. It returns the new waiter; or, when a cmp failed and
// nothing of this call exists, no waiter and the queue's first key (nil when
// the queue is empty); or the error that ended it. Without a waiter, the
// slot is given up (gone: the reaper retires an uncertain earlier attempt).
func (q queue) tryPut(ctx context.Context, value string, cmps []clientv3.Cmp) (*waiter, *mvccpb.KeyValue, error) {
	sk := q.newKey(value).as(holderOf(ctx))
	b := wire.NewBackoff(requestFloor, requestCeil)
	for retry := false; ; retry = true {
		bcmp, bput, sent := q.s.book.barrierGuard(q.dir)
		sg := q.slotGuard()
		sk.gen = sg.gen
		resp, err := q.tryTxn(ctx, sk, append(append(slices.Clip(cmps), sg.cmps...), bcmp), bput, sg.read, retry)
		if err = q.s.runHook(hookEnqueued, err); err == nil {
			if resp.Succeeded {
				if sent == 0 {
					q.s.book.learnBarrier(q.dir, resp.Header.Revision) // created with the key
				}
				return q.newWaiter(sk, resp.Header.Revision), nil, nil
			}
			w, again, serr := q.resolveRefusal(ctx, &sk, sent, sg,
				resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs, stampOf(resp, 3))
			switch {
			case w != nil:
				return w, nil, nil
			case serr == nil && again:
				continue
			case serr == nil:
				q.gone(sk)
				var first *mvccpb.KeyValue
				if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					first = kvs[0]
				}
				return nil, first, nil
			}
			err = serr
		}
		switch wire.Classify(err) {
		case wire.LeaseGone:
			q.gone(sk)
			return nil, nil, q.s.leaseLost()
		case wire.Refused:
			q.gone(sk) // this attempt wrote nothing
			return nil, nil, err
		}
		// The Put may have been applied, now or later: retry (the Else
		// branch reports our own key), or retire it if we give up.
		if err := q.retryUnknown(ctx, &sk, b, err); err != nil {
			return nil, nil, err
		}
	}
}

// tryTxn sends one attempt of tryPut's Txn: put key if every cmp holds and
// the key is new; else read the queue's first key, the key and the barrier.
func (q queue) tryTxn(ctx context.Context, sk slotKey, cmps []clientv3.Cmp, bput, stampRead []clientv3.Op, retry bool) (*clientv3.TxnResponse, error) {
	key := sk.key
	return q.s.book.commit(ctx, retry, wire.Txn{Dir: q.dir,
		Cmps:  append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0)),
		Thens: append([]clientv3.Op{clientv3.OpPut(key, q.s.value(sk, time.Time{}), clientv3.WithLease(q.s.lease))}, bput...),
		Elses: append([]clientv3.Op{clientv3.OpGet(q.dir, clientv3.WithFirstCreate()...), clientv3.OpGet(key),
			clientv3.OpGet(barrierKey(q.dir, q.s.lease), clientv3.WithKeysOnly())}, stampRead...)})
}
