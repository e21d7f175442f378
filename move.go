package etcdlock

// This file holds MoveSlot: a slot moves from one cluster to another in
// named phases, each safe to repeat (DESIGN.md, "Moving a slot").

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MoveOptions configures MoveSlot. The zero value waits for the drain as
// long as ctx allows.
type MoveOptions struct {
	// ForceAfter, when > 0, breaks what is left of the slot on the source
	// that long after the drain started (each key deleted guarded by its
	// create revision, as Break does). A holder broken so may still act
	// until it sees the loss: use it only for resources that check tokens.
	ForceAfter time.Duration
	// Resume continues a move of this slot to the same cluster that an
	// earlier call started and did not finish (it crashed, or its ctx
	// ended). Without it such a move is ErrMoveInProgress.
	Resume bool
	// Owner is recorded with the move (default "hostname/pid").
	Owner string
	// Progress, when set, is called at each phase and at each change of
	// the drain.
	Progress func(MoveProgress)
}

// MoveProgress reports a move's phase.
type MoveProgress struct {
	Slot     int
	From, To string
	// Phase is one of "started", "frozen", "draining", "forced", "drained",
	// "raised", "activated", "done".
	Phase string
	// Keys is the number of the slot's queue keys left on the source
	// (draining and forced), Names the number of names they belong to.
	Keys, Names int
	// Generation is the target's new generation (from "raised" on).
	Generation int64
}

// mover is one MoveSlot call; only its goroutine uses it.
type mover struct {
	r        *Shards
	slot     int
	from, to string
	o        MoveOptions
	rec      int64 // the move record's mod revision
	src, dst *clientv3.Client
	gen      int64
}

// MoveSlot moves slot to cluster to, in phases:
//
//  1. record the move in the root (one move per slot at a time);
//  2. freeze the slot on its source: its stamp is re-written as frozen, so
//     every key-creating write sent under the active stamp fails its
//     compare, whenever it arrives; waiters who arrive now wait for the move;
//  3. drain: wait until the slot's queue keys on the source are gone (the
//     source's queues run on in FIFO order; ForceAfter breaks the rest);
//  4. copy the slot's completion records (RunOnce) to the target;
//  5. raise the target's generation above every generation any cluster had
//     (so its tokens are above every token the source granted);
//  6. stamp the slot active on the target;
//  7. switch the map and end the move record.
//
// It returns nil once the map names to. It returns an error wrapping
// ErrInvalidArgument for a slot out of range, an unknown cluster, or a slot
// already on to; ErrMoveInProgress when another move of the slot is
// recorded (see MoveOptions.Resume); and ctx's or a request's error
// otherwise: the move then stays recorded and the slot frozen until it is
// resumed. A failed call changes no map.
func (r *Shards) MoveSlot(ctx context.Context, slot int, to string, o MoveOptions) error {
	if o.Owner == "" {
		o.Owner = defaultIdentity()
	}
	mv := &mover{r: r, slot: slot, to: to, o: o}
	if err := mv.run(ctx); err != nil {
		return newError("move slot", "", fmt.Errorf("slot %d to %s: %w", slot, to, err))
	}
	return nil
}

func (mv *mover) run(ctx context.Context) error {
	if err := mv.begin(ctx); err != nil {
		return err
	}
	if err := mv.freeze(ctx); err != nil {
		return fmt.Errorf("freeze on %s: %w", mv.from, err)
	}
	if err := mv.drain(ctx); err != nil {
		return fmt.Errorf("drain on %s: %w", mv.from, err)
	}
	if err := mv.copyCompletions(ctx); err != nil {
		return fmt.Errorf("copy completion records: %w", err)
	}
	if err := mv.activate(ctx); err != nil {
		return fmt.Errorf("activate on %s: %w", mv.to, err)
	}
	if err := mv.switchMap(ctx); err != nil {
		return fmt.Errorf("switch the map: %w", err)
	}
	mv.report("done", 0, 0)
	return nil
}

func (mv *mover) report(phase string, keys, names int) {
	if mv.o.Progress != nil {
		mv.o.Progress(MoveProgress{Slot: mv.slot, From: mv.from, To: mv.to, Phase: phase, Keys: keys, Names: names, Generation: mv.gen})
	}
}

// begin checks the arguments against the root's map and records the move
// (phase 1), or takes up the recorded one (Resume).
func (mv *mover) begin(ctx context.Context) error {
	if mv.slot < 0 || mv.slot >= NumSlots {
		return fmt.Errorf("%w: slot %d is not in 0..%d", ErrInvalidArgument, mv.slot, NumSlots-1)
	}
	root := mv.r.root
	for {
		resp, err := root.Txn(ctx).Then(clientv3.OpGet(mapKey), clientv3.OpGet(moveKey(mv.slot)),
			clientv3.OpGet(clusterKey(mv.to), clientv3.WithCountOnly())).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		mkvs, rkvs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		if len(mkvs) == 0 {
			return fmt.Errorf("%w: the root holds no slot map", ErrInvalidArgument)
		}
		if resp.Responses[2].GetResponseRange().Count == 0 {
			return fmt.Errorf("%w: unknown cluster %q", ErrInvalidArgument, mv.to)
		}
		if len(rkvs) > 0 {
			return mv.resume(ctx, rkvs[0].Value, rkvs[0].ModRevision)
		}
		m, err := decodeMap(mkvs[0])
		if err != nil {
			return err
		}
		if mv.from = m.owner[mv.slot]; mv.from == mv.to {
			return fmt.Errorf("%w: slot %d is on %s already", ErrInvalidArgument, mv.slot, mv.to)
		}
		rec, _ := json.Marshal(moveRecord{From: mv.from, To: mv.to, At: time.Now().UnixMilli(), Owner: mv.o.Owner})
		tr, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(mapKey), "=", m.rev),
			clientv3.Compare(clientv3.CreateRevision(moveKey(mv.slot)), "=", 0)).
			Then(clientv3.OpPut(moveKey(mv.slot), string(rec))).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if tr.Succeeded {
			mv.rec = tr.Header.Revision
			mv.report("started", 0, 0)
			return mv.dial(ctx)
		}
		// The map changed or another move began meanwhile: look again.
	}
}

// resume takes up a recorded move of the slot, if Resume asks for it and
// it goes to the same cluster.
func (mv *mover) resume(ctx context.Context, value []byte, mod int64) error {
	var rec moveRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return fmt.Errorf("%w: move record: %v", ErrInvalidArgument, err)
	}
	if !mv.o.Resume || rec.To != mv.to {
		return fmt.Errorf("%w: slot %d is being moved %s", ErrMoveInProgress, mv.slot, rec)
	}
	mv.from, mv.rec = rec.From, mod
	mv.report("started", 0, 0)
	return mv.dial(ctx)
}

func (mv *mover) dial(ctx context.Context) error {
	var err error
	if mv.src, err = mv.r.Client(ctx, mv.from); err != nil {
		return err
	}
	mv.dst, err = mv.r.Client(ctx, mv.to)
	return err
}
