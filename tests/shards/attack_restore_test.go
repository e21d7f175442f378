package shards_test

import (
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
)

// TestAttackRaiseThenAbortKeepsOldGeneration: a move of a slot from c0 is
// draining (c0's stamp frozen) when c0 is restored and the operator runs
// RaiseGeneration(c0), which returns g. The move is then aborted: the slot
// is active on c0 again. Every token c0 grants after the raise must carry
// a generation of at least g (a restored cluster's revisions went back:
// with its old generation its tokens go back too).
func TestAttackRaiseThenAbortKeepsOldGeneration(t *testing.T) {
	d := startDeployment(t, 1, 1)
	ctx := testCtx(t, 2*time.Minute)
	s := session(t, d.newShards(t))
	name := d.nameOn(t, "c0")
	before := lockUnlock(t, s, name)
	h := mustLock(t, etcdlock.NewMutex(session(t, d.newShards(t)), name))
	late := stallMove(t, ctx, d.newShards(t), name, "c1", "draining")
	g, err := d.admin.RaiseGeneration(ctx, "c0")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.admin.AbortMove(ctx, etcdlock.SlotOf(name)); err != nil {
		t.Fatal(err)
	}
	_ = h.Unlock(ctx)
	t.Logf("late mover: %v", late.result(t))
	after := lockUnlock(t, s, name)
	if after.Generation() < g {
		t.Fatalf("RaiseGeneration(c0) gave generation %d, but after the abort c0 grants token %d of generation %d (before: %d, generation %d); stamp %+v",
			g, after, after.Generation(), before, before.Generation(), d.stamp(t, "c0", name))
	}
}
