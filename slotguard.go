package etcdlock

// This file holds the slot guard: what makes a move of a slot between
// clusters unable to make two holders (DESIGN.md, "Moving a slot"). Every
// key-creating write of a sharded session (enqueue, the Try forms,
// LockAll) compares the mod revision of its name's stamp in its cluster:
//
//	etcdlock-shards/slots/<slot>
//
// with the mod revision it read while the stamp said "active". MoveSlot
// first re-writes the source's stamp as frozen (a Put: its mod revision
// grows), and only then waits for the source's keys of the slot to go. In
// etcd's one linearizable order, a create applied before the freeze is seen
// by that wait; one applied after it fails its compare and writes nothing,
// however late it arrives. This is the barrier's argument (barrier.go) with
// the slot's stamp in the barrier's place; no time passes in it.

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/wire"
)

// errSlotMoved: a key-creating write was refused because its slot's stamp
// is no longer active on its cluster; the acquisition routes again. A
// refusal: wire.Classify calls it wire.Refused.
var errSlotMoved = wire.Refusal("the name's slot moved")

// clusterStamps is a cluster session's knowledge of its cluster's stamps.
type clusterStamps struct {
	id     string
	moving func(slot int) bool // the router's: whether a move of slot is recorded

	mu     sync.Mutex
	stamps map[int]layout.Stamp // as last read
}

// stamp returns slot's stamp as last read, reading it when unknown or not
// active.
func (c *clusterStamps) stamp(ctx context.Context, s *Session, slot int) (layout.Stamp, error) {
	c.mu.Lock()
	st, ok := c.stamps[slot]
	c.mu.Unlock()
	if ok && st.Active() {
		return st, nil
	}
	resp, err := s.cli.Get(ctx, layout.StampKey(slot))
	if err != nil {
		return layout.Stamp{}, err
	}
	st = layout.DecodeStamp(resp.Kvs)
	c.learn(slot, st)
	return st, nil
}

// settled reports whether slot is settled on c's cluster, its stamp there
// being st: the stamp is active and no move of the slot is recorded (as
// the map watch last saw the moves).
func (c *clusterStamps) settled(slot int, st layout.Stamp) bool {
	if !st.Active() {
		return false
	}
	return !c.moving(slot)
}

// learn records st if it is newer than what c knows.
func (c *clusterStamps) learn(slot int, st layout.Stamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stamps == nil {
		c.stamps = map[int]layout.Stamp{}
	}
	if old, ok := c.stamps[slot]; !ok || st.Mod >= old.Mod {
		c.stamps[slot] = st
	}
}

// slotGuard is what a key-creating write of q carries on a sharded
// cluster: the compare of its slot's stamp, the Else read of it, and the
// generation its key is written under. The zero slotGuard (not sharded)
// adds nothing.
type slotGuard struct {
	slot int
	sent int64  // the stamp's mod revision compared
	raw  []byte // and its value
	gen  int64
	cmps []clientv3.Cmp
	read []clientv3.Op
}

// slotGuard returns q's guard, from the stamp the session knows. Only a
// stamp known active is compared as one: the guard compares its mod
// revision and its value, so it holds only while that very active stamp is
// the current one (a value compare too, so a stamp re-written at an equal
// revision after a restore does not pass). When the stamp the session knows
// is not active (another goroutine of the session learned a freeze after
// this acquisition routed), the guard compares a mod revision no stamp has:
// the write fails, its Else read shows the stamp, and refused routes again.
func (q queue) slotGuard() slotGuard {
	c := q.s.stamps
	if c == nil {
		return slotGuard{}
	}
	g := slotGuard{slot: layout.SlotOf(q.name)}
	c.mu.Lock()
	st := c.stamps[g.slot]
	c.mu.Unlock()
	key := layout.StampKey(g.slot)
	g.read = []clientv3.Op{clientv3.OpGet(key)}
	if !st.Active() {
		g.sent = noStamp
		g.cmps = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", noStamp)}
		return g
	}
	g.sent, g.raw, g.gen = st.Mod, st.Raw, st.Gen
	g.cmps = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", st.Mod),
		clientv3.Compare(clientv3.Value(key), "=", string(st.Raw))}
	return g
}

// noStamp is a mod revision no key has: what a guard compares when the
// session knows no active stamp.
const noStamp = -1

// refused tells, from the Else read of the stamp (kvs), whether the stamp
// failed the compare: it returns errSlotMoved when the slot is no longer
// active here, again when it is active under a new stamp (a raised
// generation: send the write again), and neither when the stamp did not
// change (the write failed another compare).
func (g slotGuard) refused(q queue, kvs []*mvccpb.KeyValue) (again bool, err error) {
	if g.cmps == nil {
		return false, nil
	}
	st := layout.DecodeStamp(kvs)
	if st.Mod == g.sent && string(st.Raw) == string(g.raw) {
		return false, nil
	}
	q.s.stamps.learn(g.slot, st)
	if !st.Active() {
		return false, errSlotMoved
	}
	return true, nil
}

// stampOf returns the Else branch's read of the stamp at index i (none when
// the Txn carried no stamp read).
func stampOf(resp *clientv3.TxnResponse, i int) []*mvccpb.KeyValue {
	if i >= len(resp.Responses) {
		return nil
	}
	return resp.Responses[i].GetResponseRange().Kvs
}

// forcedAway reports whether err, an acquisition's failure on a cluster
// session of a routed session, is the loss of a waiter's key to a move's
// ForceAfter: the key went (ErrLockLost) and the slot's stamp there is no
// longer active. The acquisition then routes again and waits for the move,
// as a waiter that arrives during it does. A grant is never routed again:
// op returns no error once granted.
func (q queue) forcedAway(ctx context.Context, err error) bool {
	if q.s.stamps == nil || !errors.Is(err, ErrLockLost) || ctx.Err() != nil {
		return false
	}
	slot := layout.SlotOf(q.name)
	resp, rerr := q.s.cli.Get(ctx, layout.StampKey(slot))
	if rerr != nil {
		return false
	}
	st := layout.DecodeStamp(resp.Kvs)
	q.s.stamps.learn(slot, st)
	return !st.Active()
}
