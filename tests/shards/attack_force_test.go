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

// TestAttackForceWaitersOfEveryKind: one holder and one waiter of each kind
// of acquisition on the source; a move with ForceAfter breaks them. Every
// waiter must wait for the move and be granted on the target (never fail
// with ErrLockLost).
func TestAttackForceWaitersOfEveryKind(t *testing.T) {
	t.Parallel()                  // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1) // each subtest moves its own slot
	for _, k := range forcedKinds() {
		t.Run(k.name, func(t *testing.T) { checkForcedWaiter(t, d, k) })
	}
}

// forcedKind is a holder and a waiter of one kind of acquisition.
type forcedKind struct {
	name string
	hold func(ctx context.Context, s *shard.Session, n string) error
	wait func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, error)
}

func forcedKinds() []forcedKind {
	return []forcedKind{
		{"LockAll", func(ctx context.Context, s *shard.Session, n string) error {
			_, err := s.NewMutex(n).Lock(ctx)
			return err
		}, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, error) {
			ls, err := s.LockAll(ctx, n, shard.KeyOf(n)+"/other")
			if err != nil {
				return 0, err
			}
			defer ls.Unlock(ctx)
			return ls.Lock(n).Token(), nil
		}},
		{"RWMutex", func(ctx context.Context, s *shard.Session, n string) error {
			_, err := s.NewRWMutex(n).RLock(ctx)
			return err
		}, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, error) {
			l, err := s.NewRWMutex(n).Lock(ctx)
			if err != nil {
				return 0, err
			}
			defer l.Unlock(ctx)
			return l.Token(), nil
		}},
		{"Semaphore", func(ctx context.Context, s *shard.Session, n string) error {
			_, err := s.NewSemaphore(n, 1).Acquire(ctx)
			return err
		}, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, error) {
			l, err := s.NewSemaphore(n, 1).Acquire(ctx)
			if err != nil {
				return 0, err
			}
			defer l.Unlock(ctx)
			return l.Token(), nil
		}},
		{"Election", func(ctx context.Context, s *shard.Session, n string) error {
			_, err := s.NewElection(n).Campaign(ctx, "a")
			return err
		}, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, error) {
			l, err := s.NewElection(n).Campaign(ctx, "b")
			if err != nil {
				return 0, err
			}
			defer l.Resign(ctx)
			return l.Token(), nil
		}},
	}
}

// checkForcedWaiter holds the name with k, queues k's waiter behind, moves
// the slot with ForceAfter, and checks the waiter is granted on the target.
func checkForcedWaiter(t *testing.T, d *deployment, k forcedKind) {
	ctx := embedtest.Context(t, 2*time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c0")
	if err := k.hold(ctx, session(t, r), name); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	var tok etcdlock.Token
	go func() {
		var err error
		tok, err = k.wait(ctx, session(t, r), name)
		res <- err
	}()
	waitFor(t, 30*time.Second, "the waiter", func() bool { return len(d.keysOf(t, "c0", name)) == 2 })
	d.move(t, name, "c1", shard.MoveOptions{ForceAfter: 100 * time.Millisecond}, r)
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the waiter failed during a forced move: %v (lost: %v)", err, errors.Is(err, etcdlock.ErrLockLost))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never got through")
	}
	if gen := d.stamp(t, "c1", name).Gen; tok.Generation() != gen {
		t.Fatalf("granted under generation %d, target's %d", tok.Generation(), gen)
	}
}
