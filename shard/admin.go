package shard

// This file holds what operators do to a sharded deployment besides moving
// slots (move.go) and keeping the clusters' records (clusters.go):
// create it, raise a cluster's generation.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// Create makes root the root of a sharded deployment over clusters (id to
// endpoints; root may be one of them). It records each cluster, gives each
// generation 1 (or one above what it had), stamps each its slots active
// (the slots are spread in equal runs over the clusters in id order), and
// then writes the slot map. Before the map exists no sharded session
// routes anywhere, so the order is safe. It returns an error wrapping
// etcdlock.ErrInvalidArgument, with nothing written, when root already
// holds a slot map, for no clusters, a bad id or no endpoints, a nil root
// or a bad option; and a request's error otherwise (run it again: every
// step before the map is repeatable). The Dialer of opts (WithDialer)
// makes each cluster's client. Open the deployment with New.
func Create(ctx context.Context, root *clientv3.Client, clusters map[string][]string, opts ...Option) error {
	r, err := withOptions("create shards", root, opts)
	if err != nil {
		return err
	}
	if err := checkCreate(ctx, root, clusters); err != nil {
		return newError("create shards", "", err)
	}
	dial := r.dial
	ids := make([]string, 0, len(clusters))
	for id := range clusters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	m := &layout.SlotMap{}
	for s := range m.Owner {
		m.Owner[s] = ids[s*len(ids)/NumSlots]
	}
	for _, id := range ids {
		if err := createMember(ctx, root, id, clusters[id], m.SlotsOf(id), dial); err != nil {
			return newError("create shards", "", fmt.Errorf("cluster %s: %w", id, err))
		}
	}
	resp, err := root.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(layout.MapKey), "=", 0)).
		Then(clientv3.OpPut(layout.MapKey, m.Encode())).Commit()
	if err != nil {
		return newError("create shards", "", ctxErr(ctx, err))
	}
	if !resp.Succeeded {
		return newError("create shards", "", fmt.Errorf("%w: the root already holds a slot map (made meanwhile)", etcdlock.ErrInvalidArgument))
	}
	return nil
}

func checkCreate(ctx context.Context, root *clientv3.Client, clusters map[string][]string) error {
	if root == nil || len(clusters) == 0 {
		return fmt.Errorf("%w: nil root client or no clusters", etcdlock.ErrInvalidArgument)
	}
	for id, eps := range clusters {
		if err := validateClusterID(id); err != nil {
			return err
		}
		if len(eps) == 0 {
			return fmt.Errorf("%w: cluster %s has no endpoints", etcdlock.ErrInvalidArgument, id)
		}
	}
	resp, err := root.Get(ctx, layout.MapKey, clientv3.WithCountOnly())
	if err != nil {
		return ctxErr(ctx, err)
	}
	if resp.Count > 0 {
		return fmt.Errorf("%w: the root already holds a slot map", etcdlock.ErrInvalidArgument)
	}
	return nil
}

// createMember records cluster id on root, raises its generation and
// stamps slots active on it.
func createMember(ctx context.Context, root *clientv3.Client, id string, eps []string, slots []int, dial Dialer) error {
	rec, _ := json.Marshal(Cluster{Endpoints: eps})
	if _, err := root.Put(ctx, layout.ClusterKey(id), string(rec)); err != nil {
		return ctxErr(ctx, err)
	}
	cli, err := dial(ctx, id, eps)
	if err != nil {
		return err
	}
	defer cli.Close()
	g, err := raiseGeneration(ctx, root, id, cli, 0)
	if err != nil {
		return err
	}
	st := layout.Stamp{State: layout.StampActive, Gen: g}.Encode()
	for len(slots) > 0 {
		n := min(len(slots), 100)
		ops := make([]clientv3.Op, n)
		for i, s := range slots[:n] {
			ops[i] = clientv3.OpPut(layout.StampKey(s), st)
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return ctxErr(ctx, err)
		}
		slots = slots[n:]
	}
	return nil
}

// raiseGeneration gives cluster id (cli its client) a generation above
// every generation the root records for any cluster, above its own, and
// above floor, recording it in the root before the cluster's own key; and
// returns it. Every raise goes through here, so the root's records bound
// every generation any cluster has.
func raiseGeneration(ctx context.Context, root *clientv3.Client, id string, cli *clientv3.Client, floor int64) (int64, error) {
	for {
		recs, err := root.Get(ctx, layout.ClusterKeyPrefix, clientv3.WithPrefix())
		if err != nil {
			return 0, ctxErr(ctx, err)
		}
		top, rec, recMod := floor, Cluster{}, int64(0)
		for _, kv := range recs.Kvs {
			var c Cluster
			if err := json.Unmarshal(kv.Value, &c); err != nil {
				return 0, fmt.Errorf("%w: cluster record %s: %v", etcdlock.ErrInvalidArgument, kv.Key, err)
			}
			top = max(top, c.Generation)
			if string(kv.Key) == layout.ClusterKey(id) {
				rec, recMod = c, kv.ModRevision
			}
		}
		if recMod == 0 {
			return 0, fmt.Errorf("%w: unknown cluster %q", etcdlock.ErrInvalidArgument, id)
		}
		own, ownMod, err := readGeneration(ctx, cli)
		if err != nil {
			return 0, err
		}
		g := max(top, own) + 1
		if g > layout.MaxGeneration {
			return 0, fmt.Errorf("%w: generation %d is past %d", etcdlock.ErrTokenOverflow, g, int64(layout.MaxGeneration))
		}
		rec.Generation = g
		b, _ := json.Marshal(rec)
		resp, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.ClusterKey(id)), "=", recMod)).
			Then(clientv3.OpPut(layout.ClusterKey(id), string(b))).Commit()
		if err != nil {
			return 0, ctxErr(ctx, err)
		}
		if !resp.Succeeded {
			continue
		}
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.GenerationKey), "=", ownMod)).
			Then(clientv3.OpPut(layout.GenerationKey, strconv.FormatInt(g, 10))).Commit()
		if err != nil {
			return 0, ctxErr(ctx, err)
		}
		if resp.Succeeded {
			return g, nil
		}
	}
}

// readGeneration reads a member cluster's generation (0 when it has none)
// and its key's mod revision.
func readGeneration(ctx context.Context, cli *clientv3.Client) (gen, mod int64, err error) {
	resp, err := cli.Get(ctx, layout.GenerationKey)
	if err != nil {
		return 0, 0, ctxErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	gen, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: generation %q: %v", etcdlock.ErrInvalidArgument, resp.Kvs[0].Value, err)
	}
	return gen, resp.Kvs[0].ModRevision, nil
}

// RaiseGeneration raises the generation of member cluster id above every
// generation any cluster has had, and re-stamps with it the active slots
// the root gives the cluster, so every token it grants from then on is
// above every token it, or any cluster, granted before. Run it after
// restoring the cluster from a snapshot: its revisions then start again
// below ones it had granted, and without the raise its tokens would go
// back. A restored cluster may also hold stamps active for slots that
// moved away since the snapshot; those are frozen. A slot the map gives
// the cluster, with no move recorded, whose stamp is not active (a late
// mover froze a restored one) is made active again. What the root gives the
// cluster is read at one revision R: its map, and the moves in progress to
// it; a stamp written by a move recorded after R is left to that move.
// Every stamp write is a compare-and-swap on the stamp read, so a move
// freezing a slot meanwhile wins. A write in flight under an old stamp
// fails its compare and is sent again under the new one.
//
// It returns the new generation. It returns an error wrapping:
//   - ErrInvalidArgument for an unknown id;
//   - ErrMoveInProgress, with nothing written, while a move of one of the
//     cluster's slots to another cluster is recorded and not yet active
//     there (abort or resume it first);
//   - a request's error otherwise (run it again: a second raise is
//     harmless).
func (r *Shards) RaiseGeneration(ctx context.Context, id string) (int64, error) {
	g, err := r.raiseGeneration(ctx, id)
	if err != nil {
		return 0, newError("raise generation", "", err)
	}
	return g, nil
}

func (r *Shards) raiseGeneration(ctx context.Context, id string) (int64, error) {
	cli, err := r.Client(ctx, id)
	if err != nil {
		return 0, err
	}
	owned, err := r.owned(ctx, id)
	if err != nil {
		return 0, err
	}
	if err := r.movesAllowRaise(ctx, owned); err != nil {
		return 0, err
	}
	g, err := raiseGeneration(ctx, r.root, id, cli, 0)
	if err != nil {
		return 0, err
	}
	resp, err := cli.Get(ctx, layout.StampKeyPrefix, clientv3.WithPrefix())
	if err != nil {
		return 0, ctxErr(ctx, err)
	}
	var todo []restampOp
	for _, kv := range resp.Kvs {
		slot, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), layout.StampKeyPrefix))
		if err != nil {
			continue
		}
		st := layout.DecodeStamp([]*mvccpb.KeyValue{kv})
		if next, ok := owned.restamp(slot, st, g); ok {
			todo = append(todo, restampOp{slot, st, next})
		}
	}
	for len(todo) > 0 {
		n := min(len(todo), restampsPerTxn)
		if err := owned.restampAll(ctx, cli, todo[:n], g); err != nil {
			return 0, err
		}
		todo = todo[n:]
	}
	return g, nil
}

// restampOp is one stamp a raise writes: st as read, next over it.
type restampOp struct {
	slot     int
	st, next layout.Stamp
}

// restampsPerTxn is how many stamps one Txn of a raise writes: two
// compares each, within etcd's default of 128 operations a branch.
const restampsPerTxn = 50

// restampAll writes every op in one Txn, compare-and-swap on each stamp as
// read; when one changed meanwhile (a mover wrote it), each is written on
// its own, reading again and deciding again when its compare fails.
func (o ownership) restampAll(ctx context.Context, cli *clientv3.Client, ops []restampOp, g int64) error {
	var cmps []clientv3.Cmp
	puts := make([]clientv3.Op, len(ops))
	for i, op := range ops {
		cmps = append(cmps, stampIs(op.slot, op.st)...)
		puts[i] = clientv3.OpPut(layout.StampKey(op.slot), op.next.Encode())
	}
	tr, err := cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return ctxErr(ctx, err)
	}
	if tr.Succeeded {
		return nil
	}
	for _, op := range ops {
		_, _, err := stepStampFrom(ctx, cli, op.slot, op.st, func(st layout.Stamp) (layout.Stamp, bool, error) {
			next, ok := o.restamp(op.slot, st, g)
			return next, ok, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// movesAllowRaise refuses a raise while a move from the cluster is recorded
// and its target is not active under it: the move's source stamp may then
// be an abort's (a raise that froze it would strand the slot) or the
// move's (one that re-activated it would make two holders). Abort or
// resume the move first. Past its activation the source is frozen for good
// and the raise may freeze a restored one.
func (r *Shards) movesAllowRaise(ctx context.Context, o ownership) error {
	for slot, rec := range o.moves {
		if rec.From != o.id {
			continue
		}
		dst, err := r.Client(ctx, rec.To)
		if err != nil {
			return err
		}
		st, err := readStamp(ctx, dst, slot)
		if err != nil {
			return err
		}
		if !st.Active() || st.Move != rec.Epoch {
			return fmt.Errorf("%w: slot %d is being moved %s: abort or resume the move first", ErrMoveInProgress, slot, rec)
		}
	}
	return nil
}

// ownership is what the root gives one cluster at one revision.
type ownership struct {
	id    string
	rev   int64
	m     *layout.SlotMap
	moves map[int]layout.MoveRecord
}

// owned reads the map and the moves from the root at one revision.
func (r *Shards) owned(ctx context.Context, id string) (ownership, error) {
	resp, err := r.root.Txn(ctx).Then(clientv3.OpGet(layout.MapKey), clientv3.OpGet(layout.MoveKeyPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return ownership{}, ctxErr(ctx, err)
	}
	mkvs := resp.Responses[0].GetResponseRange().Kvs
	if len(mkvs) == 0 {
		return ownership{}, fmt.Errorf("%w: the root holds no slot map", etcdlock.ErrInvalidArgument)
	}
	o := ownership{id: id, rev: resp.Header.Revision, moves: map[int]layout.MoveRecord{}}
	if o.m, err = layout.DecodeMap(mkvs[0], etcdlock.ErrInvalidArgument); err != nil {
		return ownership{}, err
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if slot, rec, ok := layout.DecodeMove(kv); ok {
			o.moves[slot] = rec
		}
	}
	return o, nil
}

// restamp returns what a raise to generation g writes over stamp st of
// slot (ok false: nothing):
//   - an active stamp the root gives the cluster: the same, at g;
//   - any other active stamp (a restore's, or the source's of a move under
//     way): frozen, at g;
//   - a stamp that is not active, of a slot the map gives the cluster with
//     no move recorded, and written before the root was read: active at g
//     (a restore took back the stamp an abort wrote, and a late mover froze
//     it; the slot is nowhere else active, so it is stranded otherwise).
//
// Every stamp written by the raise on a slot with no move recorded carries
// epoch R at least: a restore may have taken back an abort's epoch, and R
// is above every move's not in progress.
func (o ownership) restamp(slot int, st layout.Stamp, g int64) (layout.Stamp, bool) {
	_, moving := o.moves[slot]
	next := st
	next.Gen = g
	switch {
	case st.Active() && !o.gives(slot, st):
		next.State = layout.StampFrozen
	case st.Active():
	case !moving && o.m.Owner[slot] == o.id && st.Mod > 0 && st.Move <= o.rev:
		next.State, next.To, next.From = layout.StampActive, "", ""
	default:
		return st, false
	}
	if !moving {
		next.Move = max(st.Move, o.rev)
	}
	return next, true
}

// gives reports whether an active stamp st of slot on the cluster is one
// the root gives it: st was written by a move (or an abort) recorded after
// the root was read; or a move to it, recorded, wrote st; or no move of
// the slot is recorded and the map names it. Any other active stamp is
// left from before a restore (or is the source's of a move under way).
func (o ownership) gives(slot int, st layout.Stamp) bool {
	if st.Move > o.rev {
		return true
	}
	rec, moving := o.moves[slot]
	switch {
	case moving && rec.To == o.id:
		return rec.Epoch == st.Move
	case moving && rec.From == o.id:
		// The move froze (or will freeze) it; an active stamp from before
		// the move may be a restore's, while the target is active already.
		// Frozen, it refuses writes; an abort gives it back.
		return false
	}
	return o.m.Owner[slot] == o.id
}
