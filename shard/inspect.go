package shard

// This file holds the reads of a sharded deployment: Describe and List
// over its clusters, and each cluster's figures for operators.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// State is what Describe and List report of one name: its
// etcdlock.LockState on the cluster that holds it, and where that is.
type State struct {
	etcdlock.LockState
	// Where the name lives: its cluster, its slot, and the generation of
	// the slot's stamp there (the generation its new grants' tokens
	// carry; List gives its holder's).
	Cluster    string
	Slot       int
	Generation int64
	// Set by Describe only: whether the state read is all of the name's
	// (SlotActive), or the slot is moving (SlotMoving, and Move is the
	// move) or not active on Cluster (SlotFrozen); see Describe.
	SlotStatus string
	Move       *MoveInfo
}

// Describe is etcdlock.Describe on the cluster the map gives name's slot now,
// read in one request with the slot's stamp there. The state also names
// that cluster, the slot and the slot's generation there, and says in
// SlotStatus whether what it read is all of the name's state:
//
//   - SlotActive: it is (the slot is active there and no move of it is
//     recorded).
//   - SlotMoving: a move of the slot is recorded (Move): the holders and
//     waiters are the source's, draining; a name with none is not free
//     (new acquisitions wait for the move, and may be granted on the
//     target as soon as the map switches).
//   - SlotFrozen: no move is recorded, but the slot is not active there
//     (the map was read before a move's switch, or the slot is
//     stranded): nothing can be granted there now, and whether the name
//     is held elsewhere is not known.
//
// It returns an error wrapping ErrInvalidName for a bad name, and the
// read's error otherwise.
func (r *Shards) Describe(ctx context.Context, name string) (*State, error) {
	p, cli, err := r.place(ctx, name)
	if err != nil {
		return nil, err
	}
	prefix := layout.NamePrefix(name) // place checked the name
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)), clientv3.OpGet(layout.StampKey(p.Slot))).Commit()
	if err != nil {
		return nil, newError("describe", name, ctxErr(ctx, err))
	}
	r.settle(&p, layout.DecodeStamp(resp.Responses[1].GetResponseRange().Kvs))
	st := State{LockState: etcdlock.StateOf(name, resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision),
		Cluster: p.Cluster, Slot: p.Slot, Generation: p.Generation, SlotStatus: p.Status, Move: p.Move}
	return &st, nil
}

// The status of a name's slot on the cluster the map gives it
// (Placement.Status, LockState.SlotStatus; see Shards.Describe).
const (
	SlotActive = "active" // active there, no move recorded
	SlotMoving = "moving" // a move of the slot is recorded
	SlotFrozen = "frozen" // no move recorded, but not active there
)

// Placement is where a name lives in a sharded deployment.
type Placement struct {
	Cluster    string // the cluster the map gives its slot now
	Slot       int
	Generation int64 // of the slot's stamp there: the generation of its new tokens
	// Status is SlotActive, SlotMoving or SlotFrozen (see Shards.Describe).
	Status string
	// Move is the slot's move in progress (Status SlotMoving), as the map
	// watch last saw it; nil otherwise.
	Move *MoveInfo
	// Stamp is the state of the slot's stamp there: "active" (keys may be
	// created), "frozen" or "incoming" (a move's: acquisitions wait), or ""
	// when the slot has no stamp there.
	Stamp string
}

// Where returns where name lives now, read from the map and the slot's
// stamp on its cluster, and that cluster's client. Its Status says
// whether the slot is settled there (SlotActive), moving (SlotMoving:
// Move says from where to where) or not active there with no move
// recorded (SlotFrozen); see Describe. It returns an error wrapping
// ErrInvalidName for a bad name, and the read's error otherwise.
func (r *Shards) Where(ctx context.Context, name string) (Placement, *clientv3.Client, error) {
	p, cli, err := r.place(ctx, name)
	if err != nil {
		return Placement{}, nil, err
	}
	st, err := readStamp(ctx, cli, p.Slot)
	if err != nil {
		return Placement{}, nil, newError("describe", name, err)
	}
	r.settle(&p, st)
	return p, cli, nil
}

// place returns the cluster and slot of name by the map, and the
// cluster's client.
func (r *Shards) place(ctx context.Context, name string) (Placement, *clientv3.Client, error) {
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		return Placement{}, nil, newError("describe", "", err)
	}
	m, _ := r.snapshot()
	p := Placement{Slot: SlotOf(name)}
	p.Cluster = m.Owner[p.Slot]
	cli, err := r.Client(ctx, p.Cluster)
	if err != nil {
		return Placement{}, nil, newError("describe", name, err)
	}
	return p, cli, nil
}

// settle fills in p's generation and status from the slot's stamp on
// p.Cluster (st) and the moves the map watch last saw.
func (r *Shards) settle(p *Placement, st layout.Stamp) {
	p.Generation, p.Stamp = st.Gen, st.State
	switch mi, moving := r.Moving(p.Slot); {
	case moving:
		p.Status, p.Move = SlotMoving, &mi
	case st.Active():
		p.Status = SlotActive
	default:
		p.Status = SlotFrozen
	}
}

// List is List over every cluster of the map, merged and sorted by name; a
// name is reported from the cluster the map gives its slot (a name seen on
// another, the source of a move that just switched, is left out). Each
// cluster is read at its own revision.
func (r *Shards) List(ctx context.Context, prefix string) ([]State, error) {
	m, _ := r.snapshot()
	var out []State
	for _, c := range r.Clusters() {
		cli, err := r.Client(ctx, c.ID)
		if err != nil {
			return nil, newError("list", prefix, err)
		}
		states, err := etcdlock.List(ctx, cli, prefix)
		if err != nil {
			return nil, err
		}
		for _, ls := range states {
			st := State{LockState: ls, Cluster: c.ID, Slot: SlotOf(ls.Name)}
			if m.Owner[st.Slot] != c.ID {
				continue
			}
			if len(st.Holders) > 0 {
				st.Generation = st.Holders[0].Token.Generation()
			}
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ClusterState is one member cluster's figures (Shards.ClusterStates).
type ClusterState struct {
	Cluster
	Leader    string // the leader member's name ("" when unknown)
	Slots     int    // slots the map gives it
	Held      int    // names with a holder
	Waiters   int    // keys waiting
	Leases    int    // leases alive
	Revision  int64
	RaftIndex uint64   // the leader's applied index (commits: its deltas)
	Err       error    // why the figures are missing, if they are
	Moving    []string // the moves in progress from or to it: "<slot> <record>"
}

// ClusterStates reads each member cluster's figures, one cluster at a
// time; a cluster that does not answer has Err set and the others are
// still read.
func (r *Shards) ClusterStates(ctx context.Context) ([]ClusterState, error) {
	m, _ := r.snapshot()
	moves, err := r.root.Get(ctx, layout.MoveKeyPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, newError("clusters", "", ctxErr(ctx, err))
	}
	var out []ClusterState
	for _, c := range r.Clusters() {
		cs := ClusterState{Cluster: c, Slots: len(m.SlotsOf(c.ID))}
		for _, kv := range moves.Kvs {
			var rec layout.MoveRecord
			if json.Unmarshal(kv.Value, &rec) == nil && (rec.From == c.ID || rec.To == c.ID) {
				cs.Moving = append(cs.Moving, strings.TrimPrefix(string(kv.Key), layout.MoveKeyPrefix)+" "+rec.String())
			}
		}
		cs.Err = r.clusterFigures(ctx, &cs)
		out = append(out, cs)
	}
	return out, nil
}

func (r *Shards) clusterFigures(ctx context.Context, cs *ClusterState) error {
	cli, err := r.Client(ctx, cs.ID)
	if err != nil {
		return err
	}
	states, err := etcdlock.List(ctx, cli, "")
	if err != nil {
		return err
	}
	for _, st := range states {
		if len(st.Holders) > 0 {
			cs.Held++
		}
		cs.Waiters += len(st.Waiters)
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		return fmt.Errorf("leases: %w", ctxErr(ctx, err))
	}
	cs.Leases = len(leases.Leases)
	cs.Leader, cs.RaftIndex, cs.Revision, err = etcdx.LeaderStatus(ctx, cli)
	if err != nil {
		return fmt.Errorf("members: %w", ctxErr(ctx, err))
	}
	return nil
}
