package shards_test

import (
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackLateSwitchSpins: a call of move E1 (c0 to c1) stalls after its
// activation; a Resume finishes E1; a move E2 of the slot from c1 to c2
// then runs (stalled in its drain). When the E1 call wakes, its switch
// finds a record that is not its own: it must give up (ErrMoveAborted), not
// retry the root in a loop until E2 ends.
func TestAttackLateSwitchSpins(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	name := d.nameOn(t, "c0")
	late := stallMove(t, ctx, d.newShards(t), name, "c1", "activated")
	d.move(t, name, "c1", shard.MoveOptions{Resume: true})
	h := mustLock(t, session(t, d.newShards(t)).NewMutex(name))
	e2 := stallMove(t, ctx, d.newShards(t), name, "c2", "draining")
	root := d.clusters[0].Members()[0]
	before := root.Calls("/etcdserverpb.KV/Txn")
	late.wake()
	var err error
	spun := int64(-1)
	select {
	case err = <-late.done:
	case <-time.After(3 * time.Second):
		spun = root.Calls("/etcdserverpb.KV/Txn") - before
	}
	e2.wake()
	if uerr := h.Unlock(ctx); uerr != nil {
		t.Fatal(uerr)
	}
	if spun >= 0 {
		err = late.result(t)
	}
	if err := e2.result(t); err != nil {
		t.Fatal(err)
	}
	got, _ := d.newShards(t).ClusterOf(name)
	if spun >= 0 || !errors.Is(err, shard.ErrMoveAborted) {
		t.Fatalf("late E1 call: returned %v (map names %s); while E2 ran it did not return and sent %d Txns to the root in 3s", err, got, spun)
	}
}
