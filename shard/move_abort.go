package shard

// This file holds AbortMove: a move undone while its target is not active.

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// AbortMove undoes the move of slot in progress, in three steps:
//
//  1. fence the target: its stamp of the slot is written frozen under the
//     move's epoch (compare-and-swap), so no call of the move can activate
//     it afterwards, however late it wakes;
//  2. unfreeze the source: its stamp is written active under the move's
//     epoch, with the generation it had or the source's own if that is
//     higher (a RaiseGeneration meanwhile), so a call of the move that has
//     not frozen it yet never will;
//  3. delete the move record; the slot's waiters route again.
//
// The target is fenced before the source is unfrozen, so the slot is never
// active on both. It returns nil when the move is undone. It returns an
// error wrapping:
//   - ErrInvalidArgument for a slot out of range or when no move of the
//     slot is recorded;
//   - ErrMoveInProgress when the target is active under the move already
//     (it got past its drain: resume it with MoveOptions.Resume instead);
//   - ErrUnavailable when the source or the target does not answer (run it
//     again once they do; cluster endpoints can be updated meanwhile);
//   - ctx's or a request's error otherwise (run it again: every step is
//     repeatable).
//
// It is safe for concurrent use, also with MoveSlot calls of the move.
func (r *Shards) AbortMove(ctx context.Context, slot int) error {
	if err := r.abortMove(ctx, slot); err != nil {
		return newError("abort move", "", fmt.Errorf("slot %d: %w", slot, err))
	}
	return nil
}

func (r *Shards) abortMove(ctx context.Context, slot int) error {
	if slot < 0 || slot >= NumSlots {
		return fmt.Errorf("%w: slot %d is not in 0..%d", etcdlock.ErrInvalidArgument, slot, NumSlots-1)
	}
	resp, err := r.root.Get(ctx, layout.MoveKey(slot))
	if err != nil {
		return ctxErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("%w: no move of slot %d is recorded", etcdlock.ErrInvalidArgument, slot)
	}
	_, rec, ok := layout.DecodeMove(resp.Kvs[0])
	if !ok {
		return fmt.Errorf("%w: move record %q", etcdlock.ErrInvalidArgument, resp.Kvs[0].Value)
	}
	mv := &mover{r: r, slot: slot, to: rec.To, from: rec.From, epoch: rec.Epoch, rec: resp.Kvs[0].ModRevision}
	if err := mv.contact(ctx); err != nil {
		return err
	}
	if err := mv.fenceTarget(ctx); err != nil {
		return fmt.Errorf("fence %s: %w", mv.to, err)
	}
	if err := mv.unfreeze(ctx); err != nil {
		return fmt.Errorf("unfreeze %s: %w", mv.from, err)
	}
	_, err = r.root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.MoveKey(slot)), "=", mv.rec)).
		Then(clientv3.OpDelete(layout.MoveKey(slot))).Commit()
	return ctxErr(ctx, err)
}

// fenceTarget writes the target's stamp frozen under the move's epoch,
// unless it is active under it (then the move must be resumed).
func (mv *mover) fenceTarget(ctx context.Context) error {
	_, _, err := stepStamp(ctx, mv.dst, mv.slot, func(st layout.Stamp) (layout.Stamp, bool, error) {
		switch {
		case st.Move == mv.epoch && st.State == layout.StampActive:
			return st, false, fmt.Errorf("%w: the target is active under this move already: resume it", ErrMoveInProgress)
		case st.Move == mv.epoch && st.State == layout.StampFrozen:
			return st, false, nil // fenced by an earlier call
		case st.Move > mv.epoch:
			return st, false, mv.ended(mv.to, st)
		}
		return layout.Stamp{State: layout.StampFrozen, Gen: st.Gen, Move: mv.epoch}, true, nil
	})
	return err
}

// unfreeze writes the source's stamp active under the move's epoch, with
// the generation it had, or the source's own if a raise (after a restore)
// went past it: its revisions may have gone back.
func (mv *mover) unfreeze(ctx context.Context) error {
	gen, _, err := readGeneration(ctx, mv.src)
	if err != nil {
		return err
	}
	_, _, err = stepStamp(ctx, mv.src, mv.slot, func(st layout.Stamp) (layout.Stamp, bool, error) {
		switch {
		case st.Move == mv.epoch && st.State == layout.StampActive:
			return st, false, nil // unfrozen by an earlier call
		case st.Move > mv.epoch:
			return st, false, mv.ended(mv.from, st)
		}
		return layout.Stamp{State: layout.StampActive, Gen: max(st.Gen, gen), Move: mv.epoch}, true, nil
	})
	return err
}
