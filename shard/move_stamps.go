package shard

// This file holds the phases of a move that write stamps: prepare (the
// target's "incoming"), freeze (the source's "frozen") and activate (the
// target's "active"). Each is a compare-and-swap on the stamp it read; the
// epoch of the stamp read decides what the move may still do (DESIGN.md,
// "Moving a slot"):
//
//	stamp.Move < epoch            untouched by this move: write it (first touch)
//	stamp.Move == epoch, expected written by this move (maybe another call of it): go on
//	anything else                 aborted, or superseded by a later move: stop

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// readStamp reads slot's stamp on cli.
func readStamp(ctx context.Context, cli *clientv3.Client, slot int) (layout.Stamp, error) {
	resp, err := cli.Get(ctx, layout.StampKey(slot))
	if err != nil {
		return layout.Stamp{}, ctxErr(ctx, err)
	}
	return layout.DecodeStamp(resp.Kvs), nil
}

// stampIs holds while slot's stamp is st: its mod revision and, when it
// exists, its value (after a restore a stamp may be re-written at a mod
// revision it had before, with another value).
func stampIs(slot int, st layout.Stamp) []clientv3.Cmp {
	key := layout.StampKey(slot)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", st.Mod)}
	if st.Mod != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(key), "=", string(st.Raw)))
	}
	return cmps
}

// swapStamp writes next as slot's stamp on cli if the stamp is still old;
// it returns next as written (with its mod revision and value), and ok
// false when old was no longer the stamp.
func swapStamp(ctx context.Context, cli *clientv3.Client, slot int, old, next layout.Stamp) (layout.Stamp, bool, error) {
	key, val := layout.StampKey(slot), next.Encode()
	tr, err := cli.Txn(ctx).If(stampIs(slot, old)...).
		Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		return layout.Stamp{}, false, ctxErr(ctx, err)
	}
	next.Mod, next.Raw = tr.Header.Revision, []byte(val)
	return next, tr.Succeeded, nil
}

// ended is the error of a move that finds a stamp of a later epoch, or of
// its own in a state it never writes there.
func (mv *mover) ended(where string, st layout.Stamp) error {
	return fmt.Errorf("%w: the stamp on %s is %s under move %d (this move is %d)", ErrMoveAborted, where, st.State, st.Move, mv.epoch)
}

// stampStep is what a phase decides on reading a stamp: to write next over
// it (write), to go on without writing, or to stop (err).
type stampStep func(st layout.Stamp) (next layout.Stamp, write bool, err error)

// stepStamp reads slot's stamp on cli and writes what step decides over it,
// compare-and-swap, reading again when it changed meanwhile. It returns the
// stamp the phase goes on with (the one written, or the one read when step
// wrote nothing), and whether it wrote it.
func stepStamp(ctx context.Context, cli *clientv3.Client, slot int, step stampStep) (layout.Stamp, bool, error) {
	st, err := readStamp(ctx, cli, slot)
	if err != nil {
		return layout.Stamp{}, false, err
	}
	return stepStampFrom(ctx, cli, slot, st, step)
}

// stepStampFrom is stepStamp from st, the stamp as read already.
func stepStampFrom(ctx context.Context, cli *clientv3.Client, slot int, st layout.Stamp, step stampStep) (layout.Stamp, bool, error) {
	for {
		next, write, err := step(st)
		if err != nil || !write {
			return st, false, err
		}
		written, ok, err := swapStamp(ctx, cli, slot, st, next)
		if err != nil || ok {
			return written, ok, err
		}
		if st, err = readStamp(ctx, cli, slot); err != nil {
			return layout.Stamp{}, false, err
		}
	}
}

// prepare stamps the slot "incoming" on the target (phase 2). A stamp
// already active there under this move means another call of it activated
// it: the move goes straight to its end.
func (mv *mover) prepare(ctx context.Context) error {
	st, wrote, err := stepStamp(ctx, mv.dst, mv.slot, func(st layout.Stamp) (layout.Stamp, bool, error) {
		switch {
		case st.Move == mv.epoch && (st.State == layout.StampIncoming || st.State == layout.StampActive):
			return st, false, nil
		case st.Move >= mv.epoch:
			return st, false, mv.ended(mv.to, st)
		}
		// Over any stamp older than the move, an active one too (left by a
		// restore, say): a stamp that is not active refuses every write.
		return layout.Stamp{State: layout.StampIncoming, From: mv.from, Move: mv.epoch}, true, nil
	})
	switch {
	case err != nil:
		return err
	case st.State == layout.StampActive:
		mv.active, mv.gen = true, st.Gen
	case wrote:
		mv.incoming = st
		mv.report("prepared", 0, 0)
	default:
		mv.incoming = st
	}
	return nil
}

// freeze re-writes the slot's stamp on the source as frozen, keeping its
// generation (phase 3). Compare-and-swap: a RaiseGeneration re-stamping it
// meanwhile is seen, and its generation kept, so the target is raised
// above it.
func (mv *mover) freeze(ctx context.Context) error {
	st, wrote, err := stepStamp(ctx, mv.src, mv.slot, func(st layout.Stamp) (layout.Stamp, bool, error) {
		switch {
		case st.Move == mv.epoch && st.State == layout.StampFrozen:
			return st, false, nil
		case st.Move >= mv.epoch, mv.active && st.State == layout.StampActive:
			// Active on the target under this move, its freeze came first:
			// an active source stamp older than the move is a restore's
			// (RaiseGeneration freezes it).
			return st, false, mv.ended(mv.from, st)
		}
		// Not active, older than the move while the target is active under
		// it: a RaiseGeneration after a restore froze it. Frozen again under
		// this move, it guards the rest of the move's writes there.
		return layout.Stamp{State: layout.StampFrozen, Gen: st.Gen, To: mv.to, Move: mv.epoch}, true, nil
	})
	if err != nil {
		return err
	}
	mv.frozen = st
	if wrote {
		mv.report("frozen", 0, 0)
	}
	return nil
}

// activate raises the target's generation above every generation any
// cluster had and above the source's frozen stamp's, then stamps the slot
// active there with it, only while the target's stamp is this move's
// "incoming" (phase 6). When that compare fails, another call of this move
// activated it (its generation stands), or the move was aborted.
func (mv *mover) activate(ctx context.Context) error {
	g, err := raiseGeneration(ctx, mv.r.root, mv.to, mv.dst, mv.frozen.Gen)
	if err != nil {
		return err
	}
	mv.gen = g
	mv.report("raised", 0, 0)
	_, ok, err := swapStamp(ctx, mv.dst, mv.slot, mv.incoming, layout.Stamp{State: layout.StampActive, Gen: g, Move: mv.epoch})
	if err != nil {
		return err
	}
	if !ok {
		st, err := readStamp(ctx, mv.dst, mv.slot)
		if err != nil {
			return err
		}
		if st.Move != mv.epoch || st.State != layout.StampActive {
			return mv.ended(mv.to, st)
		}
		mv.gen = st.Gen
	}
	mv.active = true
	mv.report("activated", 0, 0)
	return nil
}
