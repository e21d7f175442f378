package shards_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackLockAllAdoptAcrossRaise: as TestAttackAdoptAcrossRaise, for a
// sharded LockAll (and TryLockAll) of two names of one slot: the enqueue
// Txn applies, its answer is lost, and the cluster's generation is raised
// before the retry, which finds the keys and adopts them. Each grant's
// token must carry the generation its key was written under (what
// Describe reports and Break takes), with exactly one key per name.
func TestAttackLockAllAdoptAcrossRaise(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	for _, try := range []bool{false, true} {
		ctx := embedtest.Context(t, time.Minute)
		s := session(t, d.newShards(t))
		a := d.nameOn(t, "c0")
		b := shard.KeyOf(a) + "/other"
		gen := mustLock(t, s.NewMutex(a))
		if err := gen.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		raised := raiseWhenEnqueued(t, ctx, d, s)
		lockAll := s.LockAll
		if try {
			lockAll = s.TryLockAll
		}
		ls, err := lockAll(ctx, a, b)
		testhook.SetHook(s, nil)
		if raised() <= gen.Token().Generation() {
			t.Fatalf("try %v: generation raised to %d from %d (%v)", try, raised(), gen.Token().Generation(), err)
		}
		if err != nil {
			t.Fatalf("try %v: %v, want the set held", try, err)
		}
		checkAdoptedSet(t, ctx, d, ls, gen.Token().Generation(), try, a, b)
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAdoptedSet checks a set adopted across a raise: exactly one key per
// name, the set's, with a token of generation gen (its key's), as Describe
// reports it.
func checkAdoptedSet(t *testing.T, ctx context.Context, d *deployment, ls *etcdlock.Locks, gen int64, try bool, names ...string) {
	t.Helper()
	for _, name := range names {
		l := ls.Lock(name)
		keys := d.keysOf(t, "c0", name)
		if len(keys) != 1 || keys[0] != l.Key() {
			t.Errorf("try %v: %s: keys %v, want only %s", try, name, keys, l.Key())
		}
		if l.Token().Generation() != gen {
			t.Errorf("try %v: %s: token %v of generation %d, want %d (the key's)", try, name, l.Token(), l.Token().Generation(), gen)
		}
		st, err := etcdlock.Describe(ctx, d.clients["c0"], name)
		if err != nil || st.Holder == nil || st.Holder.Token != l.Token() {
			t.Errorf("try %v: Describe %s: %+v, %v; want token %v", try, name, st, err, l.Token())
		}
	}
}

// TestAttackLockAllAdoptAcrossMove: a sharded LockAll's enqueue Txn
// applies on c0 and its answer is lost; before the retry the slot moves to
// c1, its keys forced away (ForceAfter), or (without force) the move
// starts and drains. Forced: the retry finds nothing on c0 and LockAll
// routes again, to c1. Drained: the retry adopts the keys on c0, and the
// move ends after their Unlock. Either way the set is held with one key
// per name, on one cluster, and none is left after the Unlock.
func TestAttackLockAllAdoptAcrossMove(t *testing.T) {
	t.Parallel() // its own deployment
	for _, force := range []bool{true, false} {
		d := startDeployment(t, 1, 1)
		ctx := embedtest.Context(t, time.Minute)
		s := session(t, d.newShards(t))
		a := d.nameOn(t, "c0")
		b := shard.KeyOf(a) + "/other"
		var once sync.Once
		moved := make(chan error, 1)
		var o shard.MoveOptions
		at, elsewhere := "c0", "c1" // where the set is held in the end
		if force {
			o.ForceAfter, at, elsewhere = 300*time.Millisecond, "c1", "c0"
		}
		testhook.SetHook(s, func(p testhook.Point, err error) error {
			if p == testhook.Enqueued && err == nil {
				once.Do(func() {
					go func() {
						moved <- d.admin.MoveSlot(ctx, shard.SlotOf(a), "c1", o)
					}()
					if force { // the move ends with the keys forced away
						if merr := <-moved; merr != nil {
							t.Error(merr)
						}
					} else {
						time.Sleep(500 * time.Millisecond) // the move freezes the slot
					}
					err = context.DeadlineExceeded
				})
			}
			return err
		})
		ls, err := s.LockAll(ctx, a, b)
		testhook.SetHook(s, nil)
		if err != nil {
			t.Fatalf("force %v: %v, want the set held", force, err)
		}
		for _, name := range []string{a, b} {
			l := ls.Lock(name)
			keys, other := d.keysOf(t, at, name), d.keysOf(t, elsewhere, name)
			t.Logf("force %v: %s: on %s %v, elsewhere %v; token %v", force, name, at, keys, other, l.Token())
			if len(keys) != 1 || keys[0] != l.Key() || len(other) != 0 {
				t.Errorf("force %v: %s: keys on %s %v, elsewhere %v; want only %s", force, name, at, keys, other, l.Key())
			}
		}
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if !force {
			if merr := <-moved; merr != nil {
				t.Errorf("the move: %v", merr)
			}
		}
		noKeysOn(t, d, a, b)
	}
}

// noKeysOn fails t if a queue key of a or b is left on c0 or c1.
func noKeysOn(t *testing.T, d *deployment, a, b string) {
	t.Helper()
	for _, id := range []string{"c0", "c1"} {
		if k := append(d.keysOf(t, id, a), d.keysOf(t, id, b)...); len(k) != 0 {
			t.Errorf("keys left on %s: %v", id, k)
		}
	}
}
