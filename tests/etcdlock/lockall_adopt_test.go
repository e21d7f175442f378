package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestLockAllAdoptsItsAppliedTxn: LockAll's enqueue Txn applies but its
// answer is lost (a test hook reports an error of unknown outcome in its
// place); the retry is refused by the keys the first attempt wrote and
// adopts them. LockAll then holds every name with exactly those keys,
// whether the names were free or one had to be waited for.
func TestLockAllAdoptsItsAppliedTxn(t *testing.T) {
	cli := shared.TestClient(t)
	for _, tc := range []struct {
		name  string
		heldB bool // B is held when LockAll starts and freed while it waits
	}{
		{"both free", false},
		{"B held", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := embedtest.Context(t, 30*time.Second)
			a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
			var holder *etcdlock.Lock
			if tc.heldB {
				holder = mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), b))
			}
			s := locktest.OpenSession(t, cli)
			lost := loseAnswer(t, s, nil, nil)
			res := lockAllAsync(ctx, s, a, b)
			if tc.heldB {
				waitFor(t, 10*time.Second, "LockAll queued behind B's holder", func() bool { return len(keysUnder(t, cli, b)) == 2 })
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			r := <-res
			clearHook(s)
			if !lost.Load() {
				t.Fatalf("the hook never fired (LockAll: %v)", r.err)
			}
			if r.err != nil {
				t.Fatalf("LockAll after a lost answer: %v, want both names held", r.err)
			}
			heldExactly(t, cli, r.ls, a, b)
			if err := r.ls.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// lockAllResult is what LockAll returned.
type lockAllResult struct {
	ls  *etcdlock.Locks
	err error
}

// lockAllAsync runs LockAll(ctx, s, names...) and sends its result.
func lockAllAsync(ctx context.Context, s *etcdlock.Session, names ...string) <-chan lockAllResult {
	res := make(chan lockAllResult, 1)
	go func() {
		ls, err := etcdlock.LockAll(ctx, s, names...)
		res <- lockAllResult{ls, err}
	}()
	return res
}
