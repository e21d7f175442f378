package shards_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestRunOnceAcrossMove: a run recorded on the source counts on the target
// after the move (its completion record is carried over): the same id is
// ErrAlreadyCompleted there, and fn is not called.
func TestRunOnceAcrossMove(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	s := session(t, r)
	name := d.nameOn(t, "c0")
	m := s.NewMutex(name)
	ran := 0
	job := func(context.Context, *etcdlock.Lock) error { ran++; return nil }
	if err := m.RunOnce(ctx, "2026-12-03", job); err != nil {
		t.Fatal(err)
	}
	d.move(t, name, "c1", shard.MoveOptions{}, r)
	if err := m.RunOnce(ctx, "2026-12-03", job); !errors.Is(err, etcdlock.ErrAlreadyCompleted) || ran != 1 {
		t.Fatalf("RunOnce of the same id after the move: %v, fn ran %d times", err, ran)
	}
	if c, ok, err := etcdlock.LastCompletion(ctx, d.clients["c0"], name); ok || err != nil {
		t.Fatalf("the source still has a completion record: %v, %v", c, err)
	}
	if err := m.RunOnce(ctx, "2026-12-04", job); err != nil || ran != 2 {
		t.Fatalf("RunOnce of a new id on the target: %v, fn ran %d times", err, ran)
	}
}

// TestObserveAcrossMove: Observe follows a name to its new cluster: the
// leader elected on the target after the move is reported.
func TestObserveAcrossMove(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c0")
	watcher := session(t, r).NewElection(name)
	seen := watcher.Observe(ctx)
	first, err := session(t, r).NewElection(name).Campaign(ctx, "on c0")
	if err != nil {
		t.Fatal(err)
	}
	awaitLeader(t, seen, "on c0")
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	d.move(t, name, "c1", shard.MoveOptions{}, r)
	second, err := session(t, r).NewElection(name).Campaign(ctx, "on c1")
	if err != nil {
		t.Fatal(err)
	}
	got := awaitLeader(t, seen, "on c1")
	if got.Token != second.Token() || got.Token <= first.Token() {
		t.Fatalf("observed token %d, the leader's %d, the first's %d", got.Token, second.Token(), first.Token())
	}
	if info, err := watcher.Leader(ctx); err != nil || info.Value != "on c1" {
		t.Fatalf("Leader after the move: %+v, %v", info, err)
	}
}

// awaitLeader waits for Observe to report value as the leader's.
func awaitLeader(t *testing.T, seen <-chan etcdlock.LeaderInfo, value string) etcdlock.LeaderInfo {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case info, ok := <-seen:
			if !ok {
				t.Fatal("Observe ended")
			}
			if info.Value == value {
				return info
			}
		case <-timeout:
			t.Fatalf("Observe never reported %q", value)
		}
	}
}

// TestBreakShardedGrant: Break finds a sharded grant by its token (which
// carries the generation) and deletes it, guarded by its create revision.
func TestBreakShardedGrant(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	name := d.nameOn(t, "c1")
	l := mustLock(t, session(t, d.newShards(t)).NewMutex(name))
	if err := etcdlock.Break(ctx, d.clients["c1"], name, l.Token()); err != nil {
		t.Fatalf("Break of token %d: %v", l.Token(), err)
	}
	<-l.Context().Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, etcdlock.ErrLockLost) {
		t.Fatalf("the broken grant's cause: %v", cause)
	}
}
