package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestAttackAdoptedWaiterHonoursLockDelay: B's holder has a lock-delay of
// 2 s; LockAll(A, B) (and a lone Lock of B) enqueues behind it, and the
// holder's lease is revoked. A waiter that saw the key go waits 2 s before
// its grant. lose: the enqueue's answer is lost and the lease revoked
// before the retry, which adopts the applied Txn: the adopted waiter was in
// the queue behind the lost holder too, and must honour its delay as well
// (before, it read the queue as it is now, found nobody ahead and was
// granted at once).
func TestAttackAdoptedWaiterHonoursLockDelay(t *testing.T) {
	const delay = 2 * time.Second
	cli := shared.TestClient(t)
	for _, tc := range []struct{ lose, all bool }{{false, true}, {true, true}, {true, false}} {
		ctx := embedtest.Context(t, 30*time.Second)
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		hs := locktest.OpenSession(t, shared.TestClient(t), etcdlock.WithLockDelay(delay))
		mustLock(t, etcdlock.NewMutex(hs, b))
		s := locktest.OpenSession(t, shared.TestClient(t))
		var revoked time.Time
		revoke := func() {
			revoked = time.Now()
			if _, err := cli.Revoke(ctx, hs.Lease()); err != nil {
				t.Error(err)
			}
		}
		if tc.lose {
			loseAnswer(t, s, revoke, nil)
		}
		res := make(chan error, 1)
		go func() {
			var err error
			if tc.all {
				var ls *etcdlock.Locks
				if ls, err = etcdlock.LockAll(ctx, s, a, b); err == nil {
					defer ls.Unlock(ctx)
				}
			} else {
				var l *etcdlock.Lock
				if l, err = etcdlock.NewMutex(s, b).Lock(ctx); err == nil {
					defer l.Unlock(ctx)
				}
			}
			res <- err
		}()
		if !tc.lose {
			waitFor(t, 10*time.Second, "queued behind the holder", func() bool { return len(keysUnder(t, cli, b)) == 2 })
			time.Sleep(200 * time.Millisecond) // it watches the holder's key
			revoke()
		}
		if err := <-res; err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		took := time.Since(revoked)
		clearHook(s)
		t.Logf("%+v: granted %v after the holder's lease was revoked", tc, took)
		if took < delay-200*time.Millisecond {
			t.Errorf("%+v: granted %v after the revoke, want the lock-delay (%v)", tc, took, delay)
		}
	}
}

// TestAttackLockAllLostAnswerKindMismatch: B is read-locked (an RWMutex);
// LockAll(A, B) and TryLockAll(A, B) lose their enqueue's answer: both fail
// with ErrKindMismatch and leave no key of theirs.
func TestAttackLockAllLostAnswerKindMismatch(t *testing.T) {
	cli := shared.TestClient(t)
	for _, try := range []bool{false, true} {
		ctx := embedtest.Context(t, 30*time.Second)
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		r, err := etcdlock.NewRWMutex(locktest.OpenSession(t, cli), b).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := locktest.OpenSession(t, shared.TestClient(t))
		lost := loseAnswer(t, s, nil, nil)
		_, err = lockAllTry(ctx, s, try, a, b)
		clearHook(s)
		if !lost.Load() {
			t.Fatalf("try %v: the hook never fired (%v)", try, err)
		}
		if !errors.Is(err, etcdlock.ErrKindMismatch) {
			t.Errorf("try %v: %v, want ErrKindMismatch", try, err)
		}
		waitFor(t, 10*time.Second, "only the reader's key", func() bool {
			kb := keysUnder(t, cli, b)
			return len(keysUnder(t, cli, a)) == 0 && len(kb) == 1 && kb[0] == r.Key()
		})
		_ = r.Unlock(ctx)
	}
}
