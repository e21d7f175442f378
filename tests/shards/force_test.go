package shards_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestForceGrantsNoWaiterInPassing: a holder and three waiters of one name
// on the source; a move with ForceAfter breaks them. No waiter may be
// granted on the source in passing (its Run function would start under an
// old-generation token), and every waiter waits for the move instead of
// failing: each is granted on the target, once, in turn.
func TestForceGrantsNoWaiterInPassing(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c0")
	holder := mustLock(t, session(t, r).NewMutex(name))
	var mu sync.Mutex
	var ran []etcdlock.Token
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			m := session(t, r).NewMutex(name)
			errs <- m.Run(ctx, func(ctx context.Context, l *etcdlock.Lock) error {
				mu.Lock()
				ran = append(ran, l.Token())
				mu.Unlock()
				return nil
			})
		}()
	}
	waitFor(t, 30*time.Second, "three waiters", func() bool { return len(d.keysOf(t, "c0", name)) == 4 })
	d.move(t, name, "c1", shard.MoveOptions{ForceAfter: 100 * time.Millisecond}, r)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("a waiter's Run: %v", err)
		}
	}
	<-holder.Context().Done()
	mu.Lock()
	defer mu.Unlock()
	gen := d.stamp(t, "c1", name).Gen
	for _, tok := range ran {
		if tok.Generation() != gen {
			t.Fatalf("a Run function started under token %d (generation %d), not on the target (generation %d): %v",
				tok, tok.Generation(), gen, fmt.Sprint(ran))
		}
	}
	if len(ran) != 3 {
		t.Fatalf("runs %v, want 3", ran)
	}
}
