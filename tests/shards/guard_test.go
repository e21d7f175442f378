package shards_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	"github.com/etcdlock/etcdlock/shard"
)

// TestSharedSessionNeverUsesAFrozenStamp: one sharded session, shared by
// goroutines. Goroutine A routes a Lock while the slot is active and is
// held just before its enqueue; the slot is frozen by a move (its drain
// waits for a holder of another name of the slot); goroutine B's TryLock
// on the same session learns the frozen stamp. When A goes on, its
// enqueue must not compare the frozen stamp as if it were active (it is
// the current stamp on the source, so the compare would pass, and A would
// be granted on the source beside the target's next holder): A creates no
// key on the source and is granted on the target once the move ends.
func TestSharedSessionNeverUsesAFrozenStamp(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	r := d.newShards(t)
	s := session(t, r)
	x := d.nameOn(t, "c0")
	lockUnlock(t, s, x) // s knows the slot's stamp, active
	holder := mustLock(t, session(t, r).NewMutex(x+"y"))

	entered, gate, sent := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	calls := 0
	testhook.SetHook(s, func(p testhook.Point, err error) error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		switch {
		case first && p == testhook.BeforeEnqueue: // A, routed while active
			close(entered)
			<-gate
		case p == testhook.Enqueued && isClosed(gate):
			closeOnce(sent)
		}
		return err
	})
	a := lockAsync(ctx, s.NewMutex(x))
	<-entered
	phases := make(chan shard.MoveProgress, 100)
	moved := make(chan error, 1)
	go func() {
		moved <- d.admin.MoveSlot(ctx, shard.SlotOf(x), "c1", shard.MoveOptions{Progress: func(p shard.MoveProgress) { phases <- p }})
	}()
	awaitPhase(t, phases, "draining", 1)
	if _, err := s.NewMutex(x + "z").TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryLock on the frozen slot: %v, want ErrLocked", err)
	}
	close(gate)
	<-sent // A's enqueue Txn was answered
	if keys := d.keysOf(t, "c0", x); len(keys) != 0 {
		t.Fatalf("A's key was created on the frozen source: %v", keys)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	g := <-a
	if g.err != nil || len(d.keysOf(t, "c1", x)) != 1 || g.l.Token() <= holder.Token() {
		t.Fatalf("A after the move: %v, token %d (the source's holder had %d)", g.err, g.l.Token(), holder.Token())
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

var closeMu sync.Mutex

func closeOnce(c chan struct{}) {
	closeMu.Lock()
	defer closeMu.Unlock()
	if !isClosed(c) {
		close(c)
	}
}
