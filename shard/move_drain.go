package shard

// This file holds the drain of a move (phase 4): which names of the slot
// the source holds, how long their keys stay, and ForceAfter's break of
// what is left. Its reads cost what the slot holds, not what the cluster
// holds: the slot's names are found before the freeze, with one paged
// keys-only scan, and the freeze's window only adds the names created
// between that scan and the freeze (DESIGN.md, "Moving a slot").

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// slotNames is the set of the slot's names on the source, and the revision
// it was read at.
type slotNames struct {
	rev   int64
	names map[string]bool
}

// nameOfAnyKey returns the name of any key of the layout under layout.KeyRoot: a
// queue key, a barrier, a completion record or a break marker. An escaped
// name holds '%' only before two hex digits, so the first "%/" or "%!"
// ends it.
func nameOfAnyKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, layout.KeyRoot)
	if !ok {
		return "", false
	}
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == '%' && (rest[i+1] == '/' || rest[i+1] == '!') {
			return layout.UnescapeName(rest[:i])
		}
	}
	return "", false
}

// add records key's name if it is of the slot.
func (n *slotNames) add(slot int, key []byte) {
	if name, ok := nameOfAnyKey(string(key)); ok && SlotOf(name) == slot {
		n.names[name] = true
	}
}

// scan finds the slot's names on the source: one paged, keys-only read of
// every key of the layout. Only the slot's names are kept.
func (mv *mover) scan(ctx context.Context) error {
	mv.names = slotNames{names: map[string]bool{}}
	rev, err := etcdx.ReadPrefix(ctx, mv.src, layout.KeyRoot, func(kv *mvccpb.KeyValue) { mv.names.add(mv.slot, kv.Key) }, clientv3.WithKeysOnly())
	mv.names.rev = rev
	if err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

// tokenOfKey returns the token of queue key kv, as the core reads it (the
// key's generation and create revision).
func tokenOfKey(kv *mvccpb.KeyValue) etcdlock.Token {
	name, _ := layout.NameOfKey(string(kv.Key))
	if st := etcdlock.StateOf(name, []*mvccpb.KeyValue{kv}, 0); len(st.Holders) > 0 {
		return st.Holders[0].Token
	}
	return etcdlock.Token(kv.CreateRevision)
}

// catchUp adds the names created on the source after the scan and up to
// the freeze, from a watch of that window (a scan again when the window was
// compacted away). After the freeze no key of the slot is created there.
// The watch's range runs from the slot's stamp to the end of the layout's
// keys ("etcdlock-shards/" sorts before "etcdlock/"), so it also sees the
// freeze itself: the window ends with that event.
func (mv *mover) catchUp(ctx context.Context) error {
	if mv.names.rev >= mv.frozen.Mod {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := mv.src.Watch(wctx, layout.StampKey(mv.slot), clientv3.WithRange(clientv3.GetPrefixRangeEnd(layout.KeyRoot)),
		clientv3.WithRev(mv.names.rev+1), clientv3.WithFilterDelete())
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return mv.scan(ctx)
		}
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision >= mv.frozen.Mod {
				return nil
			}
			mv.names.add(mv.slot, ev.Kv.Key)
		}
	}
	return ctxErr(ctx, ctx.Err())
}

// namesPerRead is how many names one guarded read of the drain covers.
const namesPerRead = 64

// slotKeys reads the queue keys of the slot's names on the source, each
// read a Txn that holds only while the source's stamp is this move's frozen
// one; it returns them and the revision of the first read (every deletion
// after it is seen by a watch from the next revision).
func (mv *mover) slotKeys(ctx context.Context) (map[string]*mvccpb.KeyValue, int64, error) {
	names := make([]string, 0, len(mv.names.names))
	for n := range mv.names.names {
		names = append(names, n)
	}
	sort.Strings(names)
	keys, first := map[string]*mvccpb.KeyValue{}, int64(0)
	for len(names) > 0 {
		n := min(len(names), namesPerRead)
		ops := make([]clientv3.Op, n)
		for i, name := range names[:n] {
			ops[i] = clientv3.OpGet(layout.NamePrefix(name), clientv3.WithPrefix())
		}
		tr, err := mv.src.Txn(ctx).If(mv.frozenCmp()...).Then(ops...).Commit()
		if err != nil {
			return nil, 0, ctxErr(ctx, err)
		}
		if !tr.Succeeded {
			return nil, 0, mv.stampMoved(ctx)
		}
		if first == 0 {
			first = tr.Header.Revision
		}
		for _, r := range tr.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				keys[string(kv.Key)] = kv
			}
		}
		names = names[n:]
	}
	if first == 0 {
		first = mv.frozen.Mod
	}
	return keys, first, nil
}

// frozenCmp holds while the source's stamp is this move's frozen one.
func (mv *mover) frozenCmp() []clientv3.Cmp { return stampIs(mv.slot, mv.frozen) }

// stampMoved is the error of a guarded write on the source whose stamp
// compare failed: the move was aborted or superseded.
func (mv *mover) stampMoved(ctx context.Context) error {
	st, err := readStamp(ctx, mv.src, mv.slot)
	if err != nil {
		return err
	}
	return mv.ended(mv.from, st)
}

// drain waits until the slot has no queue key on the source (phase 4): the
// names found by scan and catchUp, read once after the freeze, then a
// watch of the source's deletions. No key of the slot is created there
// after the freeze, so once the set read is gone the slot is empty. After
// ForceAfter it breaks what is left.
func (mv *mover) drain(ctx context.Context) error {
	if err := mv.catchUp(ctx); err != nil {
		return err
	}
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
	dw := drainWatch{
		keys: mv.src.Watch(wctx, layout.KeyRoot, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()),
		// The frozen stamp too: an abort (or any later writer) ends the drain.
		stamp: mv.src.Watch(wctx, layout.StampKey(mv.slot), clientv3.WithRev(mv.frozen.Mod+1)),
		force: force,
	}
	for len(keys) > 0 {
		mv.report("draining", len(keys), countNames(keys))
		if again, werr, err := mv.drainStep(ctx, dw, keys); again {
			return mv.drainAgain(ctx, werr)
		} else if err != nil {
			return err
		}
	}
	mv.report("drained", 0, 0)
	return nil
}

// drainWatch is what a drain waits on.
type drainWatch struct {
	keys, stamp clientv3.WatchChan
	force       <-chan time.Time
}

// drainStep waits for the next thing that changes the drain: deletions of
// keys (taken out of keys), a write of the frozen stamp (the move ended),
// ForceAfter (what is left is broken), a failed watch (again: the drain
// starts again, werr says why), or ctx's end.
func (mv *mover) drainStep(ctx context.Context, dw drainWatch, keys map[string]*mvccpb.KeyValue) (again bool, werr, err error) {
	select {
	case resp, ok := <-dw.stamp:
		if len(resp.Events) > 0 {
			return false, nil, mv.stampMoved(ctx)
		}
		if !ok || resp.Err() != nil {
			return true, resp.Err(), nil
		}
	case resp, ok := <-dw.keys:
		if !ok || resp.Err() != nil {
			return true, resp.Err(), nil
		}
		for _, ev := range resp.Events {
			delete(keys, string(ev.Kv.Key))
		}
	case <-dw.force:
		return false, nil, mv.force(ctx, keys)
	case <-ctx.Done():
		return false, nil, ctxErr(ctx, ctx.Err())
	}
	return false, nil, nil
}

// drainAgain restarts the drain after its watch failed (a compaction, a
// lost leader): a new read, a new watch.
func (mv *mover) drainAgain(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx, ctx.Err())
	}
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) && !strings.Contains(err.Error(), "no leader") {
		return err
	}
	return mv.drain(ctx)
}

func countNames(keys map[string]*mvccpb.KeyValue) int {
	names := map[string]bool{}
	for k := range keys {
		name, _ := layout.NameOfKey(k)
		names[name] = true
	}
	return len(names)
}

// force breaks every key left, last in line first: each delete is guarded
// by the key's create revision and by the source's frozen stamp, and
// writes its name's break marker (so its holder sees ErrLockLost), as
// Break does. A key's grant depends only on the keys ahead of it, which are
// still there when it goes, and the keys behind it are gone already: no
// waiter is granted on the source in passing. The waiters whose keys go
// find the slot frozen and wait for the move.
func (mv *mover) force(ctx context.Context, keys map[string]*mvccpb.KeyValue) error {
	mv.report("forced", len(keys), countNames(keys))
	order := make([]*mvccpb.KeyValue, 0, len(keys))
	for _, kv := range keys {
		order = append(order, kv)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].CreateRevision > order[j].CreateRevision })
	for _, kv := range order {
		k := string(kv.Key)
		tr, err := mv.src.Txn(ctx).If(append(mv.frozenCmp(), clientv3.Compare(clientv3.CreateRevision(k), "=", kv.CreateRevision))...).
			Then(clientv3.OpDelete(k), layout.BrokenOp(k, int64(tokenOfKey(kv)), clientv3.LeaseID(kv.Lease))).
			Else(clientv3.OpGet(layout.StampKey(mv.slot))).Commit()
		if err != nil {
			if etcdx.IsLeaseNotFound(err) {
				continue // the key went with its lease
			}
			return ctxErr(ctx, err)
		}
		if tr.Succeeded {
			continue
		}
		if st := layout.DecodeStamp(tr.Responses[0].GetResponseRange().Kvs); st.Mod != mv.frozen.Mod || string(st.Raw) != string(mv.frozen.Raw) {
			return mv.stampMoved(ctx)
		}
	}
	return nil
}
