package shard

// This file holds the phases of a move that carry the slot's completion
// records (RunOnce) and switch the map: copy (phase 5), drop (phase 7) and
// switch (phase 8). Each write on a member cluster compares that cluster's
// stamp with the one this move wrote there, so a call that wakes late, when
// the slot has moved on, writes nothing (DESIGN.md, "Moving a slot").

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// records reads the completion records of the slot's names on the source,
// under its frozen stamp. After the drain no grant of the slot exists
// there, and a record is written only under a current grant, so they no
// longer change.
func (mv *mover) records(ctx context.Context) ([]*mvccpb.KeyValue, error) {
	names := make([]string, 0, len(mv.names.names))
	for n := range mv.names.names {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*mvccpb.KeyValue
	for first := true; first || len(names) > 0; first = false { // one guarded read at least
		n := min(len(names), namesPerRead)
		ops := make([]clientv3.Op, n)
		for i, name := range names[:n] {
			ops[i] = clientv3.OpGet(layout.CompletionKey(name))
		}
		tr, err := mv.src.Txn(ctx).If(mv.frozenCmp()...).Then(ops...).Commit()
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if !tr.Succeeded {
			return nil, mv.stampMoved(ctx)
		}
		for _, r := range tr.Responses {
			out = append(out, r.GetResponseRange().Kvs...)
		}
		names = names[n:]
	}
	return out, nil
}

// copyCompletions copies the slot's completion records to the target, each
// Put guarded by the target's stamp being this move's "incoming" (phase 5).
func (mv *mover) copyCompletions(ctx context.Context) error {
	recs, err := mv.records(ctx)
	if err != nil {
		return err
	}
	for _, kv := range recs {
		tr, err := mv.dst.Txn(ctx).If(stampIs(mv.slot, mv.incoming)...).
			Then(clientv3.OpPut(string(kv.Key), string(kv.Value))).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if !tr.Succeeded {
			st, err := readStamp(ctx, mv.dst, mv.slot)
			if err != nil {
				return err
			}
			return mv.ended(mv.to, st)
		}
	}
	return nil
}

// dropCompletions deletes the slot's completion records on the source once
// the target is active (phase 7), each guarded by its mod revision and by
// the source's frozen stamp: a call that wakes after the slot came back to
// the source deletes nothing of its new records.
func (mv *mover) dropCompletions(ctx context.Context) error {
	if mv.names.names == nil { // another call activated: find the names
		if err := mv.scan(ctx); err != nil {
			return err
		}
	}
	err := mv.dropOnce(ctx)
	if errors.Is(err, ErrMoveAborted) {
		// A RaiseGeneration (after a restore of the source) re-wrote the
		// frozen stamp: freeze it again under this move, and drop again.
		if ferr := mv.freeze(ctx); ferr == nil {
			err = mv.dropOnce(ctx)
		}
	}
	return err
}

func (mv *mover) dropOnce(ctx context.Context) error {
	recs, err := mv.records(ctx)
	if err != nil {
		return err
	}
	for _, kv := range recs {
		tr, err := mv.src.Txn(ctx).If(append(mv.frozenCmp(), clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))...).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if !tr.Succeeded {
			return mv.stampMoved(ctx)
		}
	}
	return nil
}

// switchMap gives the slot to the target in the root's map and deletes the
// move record, in one Txn that holds only while the record is this move's
// (phase 8). A record gone meanwhile is fine only when the map names the
// target (another call of this move finished it).
func (mv *mover) switchMap(ctx context.Context) error {
	root := mv.r.root
	for {
		resp, err := root.Get(ctx, layout.MapKey)
		if err != nil {
			return ctxErr(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: the slot map is gone", etcdlock.ErrInvalidArgument)
		}
		m, err := layout.DecodeMap(resp.Kvs[0], etcdlock.ErrInvalidArgument)
		if err != nil {
			return err
		}
		m.Owner[mv.slot] = mv.to
		tr, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.MapKey), "=", m.Rev),
			clientv3.Compare(clientv3.ModRevision(layout.MoveKey(mv.slot)), "=", mv.rec)).
			Then(clientv3.OpPut(layout.MapKey, m.Encode()), clientv3.OpDelete(layout.MoveKey(mv.slot))).
			Else(clientv3.OpGet(layout.MoveKey(mv.slot)), clientv3.OpGet(layout.MapKey)).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if tr.Succeeded {
			return nil
		}
		if err := mv.switched(tr); err != errMapChanged {
			return err
		}
	}
}

// errMapChanged: the switch's Txn failed only because the map changed
// (another slot's move): try again.
var errMapChanged = errors.New("the map changed")

// switched tells, from the Else reads of a failed switch (the move record,
// the map, at one revision), how it ends: nil when the record is gone and
// the map names the target (another call of this move switched it);
// ErrMoveAborted when the record is gone otherwise, or is another move's;
// errMapChanged when the record is still this move's.
func (mv *mover) switched(tr *clientv3.TxnResponse) error {
	rkvs, mkvs := tr.Responses[0].GetResponseRange().Kvs, tr.Responses[1].GetResponseRange().Kvs
	if len(rkvs) > 0 {
		if rkvs[0].CreateRevision == mv.epoch {
			return errMapChanged
		}
		return fmt.Errorf("%w: slot %d is under another move now", ErrMoveAborted, mv.slot)
	}
	if len(mkvs) > 0 {
		if m, err := layout.DecodeMap(mkvs[0], etcdlock.ErrInvalidArgument); err == nil && m.Owner[mv.slot] == mv.to {
			return nil
		}
	}
	return fmt.Errorf("%w: the move record of slot %d is gone and the map does not name %s", ErrMoveAborted, mv.slot, mv.to)
}
