package shards_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// checkSettled asserts the slot of name is settled on owner: the map names
// it, no move is recorded, its stamp is active there and on no other
// cluster, and a lock is granted there with a token above after.
func (d *deployment) checkSettled(t *testing.T, name, owner string, s *shard.Session, after etcdlock.Token) etcdlock.Token {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	resp, err := d.root.Get(ctx, fmt.Sprintf("etcdlock-shards/moves/%04d", shard.SlotOf(name)), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("a move record is left: %v %v", resp, err)
	}
	r := d.newShards(t)
	if got, _ := r.ClusterOf(name); got != owner {
		t.Fatalf("map gives %s, want %s", got, owner)
	}
	for _, id := range d.ids {
		st := d.stamp(t, id, name)
		if (st.State == "active") != (id == owner) {
			t.Fatalf("stamp on %s: %+v (owner %s)", id, st, owner)
		}
	}
	tok := lockUnlock(t, s, name)
	if tok <= after {
		t.Fatalf("token %d after %d", tok, after)
	}
	return tok
}

var earlyPhases = []string{"started", "prepared", "frozen", "draining", "drained", "raised"}

// TestAttackAbortThenLateMover: a mover stalls at each phase before its
// activation; the move is aborted; (optionally) the slot then moves for
// real; then the stalled mover wakes. It must write nothing: the slot stays
// settled, one owner, tokens grow.
func TestAttackAbortThenLateMover(t *testing.T) {
	t.Parallel()                  // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1) // each subtest moves its own slot
	s := session(t, d.newShards(t))
	for _, phase := range earlyPhases {
		for _, moveAfter := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/move=%v", phase, moveAfter), func(t *testing.T) {
				ctx := testCtx(t, 2*time.Minute)
				name := d.nameOn(t, "c0")
				tok := lockUnlock(t, s, name)
				var h *etcdlock.Lock
				if phase == "draining" {
					h = mustLock(t, session(t, d.newShards(t)).NewMutex(name))
				}
				late := stallMove(t, ctx, d.newShards(t), name, "c1", phase)
				if err := d.admin.AbortMove(ctx, shard.SlotOf(name)); err != nil {
					t.Fatalf("abort at %s: %v", phase, err)
				}
				if err := d.admin.AbortMove(ctx, shard.SlotOf(name)); !errors.Is(err, etcdlock.ErrInvalidArgument) {
					t.Fatalf("second abort: %v", err)
				}
				if h != nil {
					if err := h.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				tok = d.checkSettled(t, name, "c0", s, tok)
				owner := "c0"
				if moveAfter {
					d.move(t, name, "c1", shard.MoveOptions{})
					owner = "c1"
					tok = d.checkSettled(t, name, owner, s, tok)
				}
				if err := late.result(t); !errors.Is(err, shard.ErrMoveAborted) {
					t.Fatalf("late mover: %v, want ErrMoveAborted", err)
				}
				d.checkSettled(t, name, owner, s, tok)
			})
		}
	}
}

// TestAttackResumeBesideStalled: a mover stalls at each phase; a Resume
// finishes the move; the slot then (optionally) moves back; the stalled
// call wakes.
func TestAttackResumeBesideStalled(t *testing.T) {
	t.Parallel()                  // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1) // each subtest moves its own slot
	s := session(t, d.newShards(t))
	for _, phase := range append(earlyPhases, "activated") {
		for _, back := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/back=%v", phase, back), func(t *testing.T) {
				ctx := testCtx(t, 2*time.Minute)
				name := d.nameOn(t, "c0")
				tok := lockUnlock(t, s, name)
				var h *etcdlock.Lock
				if phase == "draining" {
					h = mustLock(t, session(t, d.newShards(t)).NewMutex(name))
				}
				late := stallMove(t, ctx, d.newShards(t), name, "c1", phase)
				if h != nil {
					if err := h.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				d.move(t, name, "c1", shard.MoveOptions{Resume: true})
				tok = d.checkSettled(t, name, "c1", s, tok)
				owner := "c1"
				if back {
					d.move(t, name, "c0", shard.MoveOptions{})
					owner = "c0"
					tok = d.checkSettled(t, name, owner, s, tok)
				}
				err := late.result(t)
				if back && !errors.Is(err, shard.ErrMoveAborted) || !back && err != nil {
					t.Fatalf("late mover: %v", err)
				}
				d.checkSettled(t, name, owner, s, tok)
			})
		}
	}
}
