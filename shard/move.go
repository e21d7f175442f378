package shard

// This file holds MoveSlot: a slot moves from one cluster to another in
// named phases, each safe to repeat, and each write of each phase guarded
// by the move's epoch (DESIGN.md, "Moving a slot").

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// MoveOptions configures MoveSlot. The zero value waits for the drain as
// long as ctx allows.
type MoveOptions struct {
	// ForceAfter, when > 0, breaks what is left of the slot on the source
	// that long after the drain started (each key deleted guarded by its
	// create revision, as Break does, last in line first, so no waiter is
	// granted on the source in passing; the waiters wait for the move). A
	// holder broken so may still act until it sees the loss: use it only
	// for resources that check tokens.
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
	// Phase is one of "started", "prepared", "frozen", "draining",
	// "forced", "drained", "raised", "activated", "done".
	Phase string
	// Keys is the number of the slot's queue keys left on the source
	// (draining and forced), Names the number of names they belong to.
	Keys, Names int
	// Generation is the target's new generation (from "raised" on).
	Generation int64
}

// mover is one MoveSlot call; only its goroutine uses it.
type mover struct {
	// Set by MoveSlot.
	r    *Shards
	slot int
	to   string
	o    MoveOptions

	// Set by begin: the move this call carries out.
	from     string
	epoch    int64 // the move record's create revision in the root
	rec      int64 // its mod revision
	src, dst *clientv3.Client

	// Set by the phases: the stamps this move wrote (or found written by
	// another call of the same move), which every later write compares.
	incoming layout.Stamp // the target's, until activated
	frozen   layout.Stamp // the source's
	active   bool         // the target's stamp is active under this move
	names    slotNames    // the slot's names on the source
	gen      int64
}

// MoveSlot moves slot to cluster to, in phases:
//
//  1. check that both clusters answer, then record the move in the root
//     (one move per slot at a time); the record's revision is the move's
//     epoch, written into every stamp the move writes;
//  2. prepare the target: its stamp of the slot says "incoming"; find the
//     slot's names on the source (a paged, keys-only read);
//  3. freeze the slot on its source: its stamp is re-written as frozen, so
//     every key-creating write sent under the active stamp fails its
//     compare, whenever it arrives; waiters who arrive now wait for the move;
//  4. drain: wait until the slot's queue keys on the source are gone (the
//     source's queues run on in FIFO order; ForceAfter breaks the rest);
//  5. copy the slot's completion records (RunOnce) to the target;
//  6. raise the target's generation above every generation any cluster had
//     (so its tokens are above every token the source granted), and stamp
//     the slot active there;
//  7. delete the slot's completion records on the source;
//  8. switch the map and end the move record.
//
// Every write of phases 2 to 7 compares the stamp of its cluster with the
// one this move wrote (or, first, one older than this move), so a call that
// wakes late, or a second call of the same move, writes nothing that
// another call already decided.
//
// It returns nil once the map names to. It returns an error wrapping:
//   - ErrInvalidArgument for a slot out of range, an unknown cluster, or a
//     slot already on to; nothing is written;
//   - ErrUnavailable when to or the source does not answer before anything
//     is recorded; nothing is written;
//   - ErrMoveInProgress when another move of the slot is recorded (see
//     MoveOptions.Resume); nothing is written;
//   - ErrMoveAborted when the move was aborted (AbortMove), or finished by
//     another call and followed by another move, while this call ran;
//   - ctx's or a request's error otherwise: the move then stays recorded
//     and the slot frozen until it is resumed or aborted.
//
// A failed call changes no map. It is safe for concurrent use.
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

// run is the move's phases in order.
func (mv *mover) run(ctx context.Context) error {
	if err := mv.begin(ctx); err != nil {
		return err
	}
	if err := mv.prepare(ctx); err != nil {
		return fmt.Errorf("prepare %s: %w", mv.to, err)
	}
	if !mv.active {
		if err := mv.scan(ctx); err != nil {
			return fmt.Errorf("find the slot's names on %s: %w", mv.from, err)
		}
	}
	if err := mv.freeze(ctx); err != nil {
		return fmt.Errorf("freeze on %s: %w", mv.from, err)
	}
	if !mv.active {
		if err := mv.drain(ctx); err != nil {
			return fmt.Errorf("drain on %s: %w", mv.from, err)
		}
		if err := mv.copyCompletions(ctx); err != nil {
			return fmt.Errorf("copy completion records: %w", err)
		}
		if err := mv.activate(ctx); err != nil {
			return fmt.Errorf("activate on %s: %w", mv.to, err)
		}
	}
	if err := mv.dropCompletions(ctx); err != nil {
		return fmt.Errorf("drop completion records on %s: %w", mv.from, err)
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

// begin checks the arguments against the root's map, checks that both
// clusters answer, and records the move (phase 1), or takes up the
// recorded one (Resume).
func (mv *mover) begin(ctx context.Context) error {
	if mv.slot < 0 || mv.slot >= NumSlots {
		return fmt.Errorf("%w: slot %d is not in 0..%d", etcdlock.ErrInvalidArgument, mv.slot, NumSlots-1)
	}
	root := mv.r.root
	for {
		resp, err := root.Txn(ctx).Then(clientv3.OpGet(layout.MapKey), clientv3.OpGet(layout.MoveKey(mv.slot))).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		mkvs, rkvs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		if len(mkvs) == 0 {
			return fmt.Errorf("%w: the root holds no slot map", etcdlock.ErrInvalidArgument)
		}
		if len(rkvs) > 0 {
			return mv.resume(ctx, rkvs[0])
		}
		m, err := layout.DecodeMap(mkvs[0], etcdlock.ErrInvalidArgument)
		if err != nil {
			return err
		}
		if mv.from = m.Owner[mv.slot]; mv.from == mv.to {
			return fmt.Errorf("%w: slot %d is on %s already", etcdlock.ErrInvalidArgument, mv.slot, mv.to)
		}
		if err := mv.contact(ctx); err != nil {
			return err
		}
		rec := layout.MoveRecord{From: mv.from, To: mv.to, At: time.Now().UnixMilli(), Owner: mv.o.Owner}.Encode()
		// Both clusters still recorded: a RemoveCluster meanwhile refuses
		// the move rather than strand the slot on a cluster nobody knows.
		tr, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.MapKey), "=", m.Rev),
			clientv3.Compare(clientv3.CreateRevision(layout.MoveKey(mv.slot)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(layout.ClusterKey(mv.from)), ">", 0),
			clientv3.Compare(clientv3.CreateRevision(layout.ClusterKey(mv.to)), ">", 0)).
			Then(clientv3.OpPut(layout.MoveKey(mv.slot), rec)).
			Else(clientv3.OpGet(layout.ClusterKey(mv.from), clientv3.WithCountOnly()), clientv3.OpGet(layout.ClusterKey(mv.to), clientv3.WithCountOnly())).Commit()
		if err != nil {
			return ctxErr(ctx, err)
		}
		if tr.Succeeded {
			mv.epoch, mv.rec = tr.Header.Revision, tr.Header.Revision
			mv.report("started", 0, 0)
			return nil
		}
		for i, id := range []string{mv.from, mv.to} {
			if tr.Responses[i].GetResponseRange().Count == 0 {
				return fmt.Errorf("%w: cluster %q was removed", etcdlock.ErrInvalidArgument, id)
			}
		}
		// The map changed or another move began meanwhile: look again.
	}
}

// resume takes up the recorded move of the slot (kv), if Resume asks for it
// and it goes to the same cluster.
func (mv *mover) resume(ctx context.Context, kv *mvccpb.KeyValue) error {
	_, rec, ok := layout.DecodeMove(kv)
	if !ok {
		return fmt.Errorf("%w: move record %s: %q", etcdlock.ErrInvalidArgument, kv.Key, kv.Value)
	}
	if !mv.o.Resume || rec.To != mv.to {
		return fmt.Errorf("%w: slot %d is being moved %s", ErrMoveInProgress, mv.slot, rec)
	}
	mv.from, mv.epoch, mv.rec = rec.From, rec.Epoch, kv.ModRevision
	mv.report("started", 0, 0)
	return mv.contact(ctx)
}

// contactTimeout bounds each cluster's answer in contact.
const contactTimeout = 5 * time.Second

// contact dials the source and the target and reads from each, so that a
// move to (or from) a cluster that does not answer fails before it records
// or freezes anything.
func (mv *mover) contact(ctx context.Context) error {
	var err error
	var ids [2]uint64
	for i, c := range []struct {
		id  string
		cli **clientv3.Client
	}{{mv.from, &mv.src}, {mv.to, &mv.dst}} {
		if *c.cli, err = mv.r.Client(ctx, c.id); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, contactTimeout)
		resp, err := (*c.cli).Get(rctx, layout.GenerationKey, clientv3.WithCountOnly())
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctxErr(ctx, ctx.Err())
			}
			return fmt.Errorf("%w: cluster %s does not answer: %v", ErrUnavailable, c.id, err)
		}
		ids[i] = resp.Header.ClusterId
	}
	if ids[0] == ids[1] {
		return fmt.Errorf("%w: clusters %s and %s are one etcd cluster (etcd cluster id %x): a slot cannot move between them",
			etcdlock.ErrInvalidArgument, mv.from, mv.to, ids[0])
	}
	return nil
}
