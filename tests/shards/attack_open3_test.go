package shards_test

// Shards.Close under a Run that waits, seen on the member clusters.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
)

// TestAttackShardsCloseUnderWaitingRun: a Mutex.Run of a shard.Session
// waits on c1 behind another session's grant when the Shards it routes
// through is closed. Run returns ErrSessionClosed promptly, and its waiter
// key is gone from c1 then (only the holder's is left): the holder's
// release must not hand the name to a waiter nobody serves. A Lock
// afterwards fails the same way and writes nothing; Close of the session
// then returns promptly.
func TestAttackShardsCloseUnderWaitingRun(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	name := d.nameOn(t, "c1")
	holder, err := session(t, d.admin, etcdlock.WithTTL(5*time.Second)).NewMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := d.newShards(t)
	s := session(t, r, etcdlock.WithTTL(5*time.Second))
	done := make(chan error, 1)
	go func() {
		done <- s.NewMutex(name).Run(ctx, func(context.Context, *etcdlock.Lock) error { return nil })
	}()
	waitFor(t, 10*time.Second, "Run's waiter key", func() bool { return len(d.keysOf(t, "c1", name)) == 2 })
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, etcdlock.ErrSessionClosed) {
			t.Fatalf("Run after Shards.Close: %v, want ErrSessionClosed", err)
		}
		t.Logf("Run returned %v after Shards.Close", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("Run still runs 10 s after its Shards was closed")
	}
	if keys := d.keysOf(t, "c1", name); len(keys) != 1 || keys[0] != holder.Key() {
		t.Errorf("keys of the name on c1 after Run returned: %v, want the holder's only", keys)
	}
	if _, err := s.NewMutex(d.nameOn(t, "c1")).Lock(ctx); !errors.Is(err, etcdlock.ErrSessionClosed) {
		t.Errorf("Lock after Shards.Close: %v, want ErrSessionClosed", err)
	}
	start = time.Now()
	_ = s.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close after Shards.Close took %v", took)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
