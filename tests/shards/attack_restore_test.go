package shards_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackRaiseAfterRestoreMidMove: a move of a slot from c0 to c1 is
// past its activation on c1 (stalled at "activated", as a mover that
// crashed there). c0 is then restored from a snapshot taken before the
// freeze (simulated: its stamp of the slot is put back as it was), and the
// operator runs RaiseGeneration(c0), as documented. The raise must not
// make the slot active on c0 while c1 is active under the move (a holder
// granted on c0 would coexist with one on c1): it freezes it, and the
// stalled move, woken, finishes: the name is granted on c1 only.
func TestAttackRaiseAfterRestoreMidMove(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	name := d.nameOn(t, "c0")
	key := fmt.Sprintf("etcdlock-shards/slots/%04d", shard.SlotOf(name))
	pre, err := d.clients["c0"].Get(ctx, key)
	if err != nil || len(pre.Kvs) != 1 {
		t.Fatal(pre, err)
	}
	late := stallMove(t, ctx, d.newShards(t), name, "c1", "activated")

	// The restore of c0 (simulated) and the documented raise.
	if _, err := d.clients["c0"].Put(ctx, key, string(pre.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.admin.RaiseGeneration(ctx, "c0"); err != nil {
		t.Fatal(err)
	}
	if c0, c1 := d.stamp(t, "c0", name), d.stamp(t, "c1", name); c0.State == "active" || c1.State != "active" {
		t.Fatalf("after the raise: c0 %+v, c1 %+v; want c0 frozen, c1 active", c0, c1)
	}
	if err := late.result(t); err != nil {
		t.Fatalf("the woken move: %v", err)
	}
	a := mustLock(t, session(t, d.newShards(t)).NewMutex(name))
	if len(d.keysOf(t, "c1", name)) != 1 || len(d.keysOf(t, "c0", name)) != 0 {
		t.Fatalf("the grant after the move: token %d, keys on c1 %v, on c0 %v", a.Token(), d.keysOf(t, "c1", name), d.keysOf(t, "c0", name))
	}
}

// TestRaiseDuringAMoveAndAbort: a move of a slot from c0 is draining
// (c0's stamp frozen) when c0 is restored and the operator runs
// RaiseGeneration(c0). The raise is refused, with nothing written
// (ErrMoveInProgress): a raise that froze the source could strand the slot
// after an abort, one that re-activated it would give two holders. The
// move is aborted, the raise runs: every token c0 grants after it carries
// its generation at least (a restored cluster's revisions went back: with
// its old generation its tokens would go back too).
func TestRaiseDuringAMoveAndAbort(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	s := session(t, d.newShards(t))
	name := d.nameOn(t, "c0")
	before := lockUnlock(t, s, name)
	h := mustLock(t, session(t, d.newShards(t)).NewMutex(name))
	late := stallMove(t, ctx, d.newShards(t), name, "c1", "draining")
	if _, err := d.admin.RaiseGeneration(ctx, "c0"); !errors.Is(err, shard.ErrMoveInProgress) {
		t.Fatalf("a raise of the source during a move: %v, want ErrMoveInProgress", err)
	}
	if err := d.admin.AbortMove(ctx, shard.SlotOf(name)); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := late.result(t); !errors.Is(err, shard.ErrMoveAborted) {
		t.Fatalf("the aborted mover: %v", err)
	}
	g, err := d.admin.RaiseGeneration(ctx, "c0")
	if err != nil {
		t.Fatal(err)
	}
	after := lockUnlock(t, s, name)
	if after.Generation() < g || after <= before {
		t.Fatalf("RaiseGeneration(c0) gave generation %d, but after it c0 grants token %d of generation %d (before: %d); stamp %+v",
			g, after, after.Generation(), before, d.stamp(t, "c0", name))
	}
}
