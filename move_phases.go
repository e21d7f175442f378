package etcdlock

// This file holds MoveSlot's phases 2 to 7 (move.go has the order).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// freeze re-writes the slot's stamp on the source as frozen, keeping the
// generation of its last active stamp (phase 2). Compare-and-swap: a
// RaiseGeneration re-stamping it meanwhile is seen, and its generation
// kept, so the target is raised above it.
func (mv *mover) freeze(ctx context.Context) error {
	key := stampKey(mv.slot)
	for {
		resp, err := mv.src.Get(ctx, key)
		if err != nil {
			return ctxErr(ctx, err)
		}
		st := decodeStamp(resp.Kvs)
		if st.State == stampFrozen && st.To == mv.to {
			break // frozen by the call this one resumes
		}
		frozen := slotStamp{State: stampFrozen, Gen: st.Gen, To: mv.to}
		tr, err := mv.src.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", st.mod)).
			Then(clientv3.OpPut(key, frozen.encode())).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if tr.Succeeded {
			break
		}
	}
	mv.report("frozen", 0, 0)
	return nil
}

// slotKeys reads the source's queue keys of the slot's names, and the
// revision read at.
func (mv *mover) slotKeys(ctx context.Context) (map[string]*mvccpb.KeyValue, int64, error) {
	keys := map[string]*mvccpb.KeyValue{}
	rev, err := readPrefix(ctx, mv.src, keyRoot, func(kv *mvccpb.KeyValue) {
		if pk, ok := parseKey(string(kv.Key)); ok && SlotOf(pk.name) == mv.slot {
			keys[string(kv.Key)] = kv
		}
	})
	return keys, rev, err
}

// drain waits until the slot has no queue key on the source (phase 3):
// one read after the freeze, then a watch of the source's deletions. No
// key of the slot is created there after the freeze, so once the set read
// is gone the slot is empty. After ForceAfter it breaks what is left.
func (mv *mover) drain(ctx context.Context) error {
	keys, rev, err := mv.slotKeys(ctx)
	if err != nil {
		return err
	}
	var force <-chan time.Time
	if mv.o.ForceAfter > 0 {
		t := time.NewTimer(mv.o.ForceAfter)
		defer t.Stop()
		force = t.C
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := mv.src.Watch(wctx, keyRoot, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	for len(keys) > 0 {
		mv.report("draining", len(keys), countNames(keys))
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil {
				return mv.drainAgain(ctx, resp.Err())
			}
			for _, ev := range resp.Events {
				delete(keys, string(ev.Kv.Key))
			}
		case <-force:
			if err := mv.force(ctx, keys); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctxErr(ctx, ctx.Err())
		}
	}
	mv.report("drained", 0, 0)
	return nil
}

// drainAgain restarts the drain after its watch failed (a compaction, a
// lost leader): a new read, a new watch.
func (mv *mover) drainAgain(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx, ctx.Err())
	}
	if err != nil && !strings.Contains(err.Error(), "compacted") && !strings.Contains(err.Error(), "no leader") {
		return err
	}
	return mv.drain(ctx)
}

func countNames(keys map[string]*mvccpb.KeyValue) int {
	names := map[string]bool{}
	for k := range keys {
		names[namePrefixOfKey(k)] = true
	}
	return len(names)
}

// force breaks every key left, each guarded by its create revision and with
// its name's break marker (so its holder sees ErrLockLost), as Break does.
func (mv *mover) force(ctx context.Context, keys map[string]*mvccpb.KeyValue) error {
	mv.report("forced", len(keys), countNames(keys))
	for k, kv := range keys {
		_, err := mv.src.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(k), brokenOp(k, int64(keyToken(kv)), clientv3.LeaseID(kv.Lease))).Commit()
		if err != nil && classify(err) != leaseGone {
			return ctxErr(ctx, err)
		}
	}
	return nil
}

// copyCompletions copies the slot's completion records to the target, then
// deletes them on the source, each guarded by its mod revision (phase 4).
// After the drain no grant of the slot exists on the source, and MarkDone
// writes only under a current grant, so the records no longer change there.
func (mv *mover) copyCompletions(ctx context.Context) error {
	resp, err := mv.src.Get(ctx, keyRoot, clientv3.WithPrefix())
	if err != nil {
		return ctxErr(ctx, err)
	}
	for _, kv := range resp.Kvs {
		esc, ok := strings.CutSuffix(strings.TrimPrefix(string(kv.Key), keyRoot), "%!done")
		name, ok2 := unescapeName(esc)
		if !ok || !ok2 || SlotOf(name) != mv.slot {
			continue
		}
		if _, err := mv.dst.Put(ctx, string(kv.Key), string(kv.Value)); err != nil {
			return ctxErr(ctx, err)
		}
		if _, err := mv.src.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit(); err != nil {
			return ctxErr(ctx, err)
		}
	}
	return nil
}

// activate raises the target's generation above every generation any
// cluster had and above the slot's on the source (phase 5), then stamps
// the slot active there with it (phase 6).
func (mv *mover) activate(ctx context.Context) error {
	resp, err := mv.src.Get(ctx, stampKey(mv.slot))
	if err != nil {
		return ctxErr(ctx, err)
	}
	if mv.gen, err = raiseGeneration(ctx, mv.r.root, mv.to, mv.dst, decodeStamp(resp.Kvs).Gen); err != nil {
		return err
	}
	mv.report("raised", 0, 0)
	if _, err := mv.dst.Put(ctx, stampKey(mv.slot), slotStamp{State: stampActive, Gen: mv.gen}.encode()); err != nil {
		return ctxErr(ctx, err)
	}
	mv.report("activated", 0, 0)
	return nil
}

// switchMap gives the slot to the target in the root's map and deletes the
// move record, in one Txn that holds only while the record is this move's
// (phase 7). A record gone meanwhile means a resumed call finished it.
func (mv *mover) switchMap(ctx context.Context) error {
	root := mv.r.root
	for {
		resp, err := root.Get(ctx, mapKey)
		if err != nil {
			return ctxErr(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: the slot map is gone", ErrInvalidArgument)
		}
		m, err := decodeMap(resp.Kvs[0])
		if err != nil {
			return err
		}
		m.owner[mv.slot] = mv.to
		tr, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(mapKey), "=", m.rev),
			clientv3.Compare(clientv3.ModRevision(moveKey(mv.slot)), "=", mv.rec)).
			Then(clientv3.OpPut(mapKey, m.encode()), clientv3.OpDelete(moveKey(mv.slot))).
			Else(clientv3.OpGet(moveKey(mv.slot), clientv3.WithCountOnly())).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if tr.Succeeded || tr.Responses[0].GetResponseRange().Count == 0 {
			return nil
		}
	}
}
