package etcdlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// TestAttackLockAllLostAnswersExclusive: four sessions take random pairs
// of three names with LockAll, TryLockAll and Lock, while a hook loses a
// third of their enqueue answers (the Txn applied; the retry adopts it).
// No name is ever held twice at once, every call ends held or with a clear
// error, and no key is left at the end.
func TestAttackLockAllLostAnswersExclusive(t *testing.T) {
	cli := shared.TestClient(t)
	names := []string{embedtest.UniqueName(t, "a"), embedtest.UniqueName(t, "b"), embedtest.UniqueName(t, "c")}
	var holders [3]atomic.Int32
	var lostN, heldN atomic.Int32
	var wg sync.WaitGroup
	for g := range 4 {
		s := locktest.OpenSession(t, shared.TestClient(t))
		rng := rand.New(rand.NewPCG(uint64(g), 7))
		var mu sync.Mutex
		setHook(t, func(p testhook.Point, err error) error {
			mu.Lock()
			lose := rng.IntN(3) == 0
			mu.Unlock()
			if p == testhook.Enqueued && err == nil && lose {
				lostN.Add(1)
				return errors.New("test: the Txn's answer was lost")
			}
			return err
		}, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				mu.Lock()
				i, j, kind := rng.IntN(3), rng.IntN(2), rng.IntN(3)
				mu.Unlock()
				j = (i + 1 + j) % 3
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var idx []int
				var unlock func(context.Context) error
				var err error
				switch kind {
				case 0, 1:
					var ls *etcdlock.Locks
					ls, err = lockAllTry(ctx, s, kind == 1, names[i], names[j])
					idx = []int{i, j}
					if err == nil {
						unlock = ls.Unlock
					}
				default:
					var l *etcdlock.Lock
					l, err = etcdlock.NewMutex(s, names[i]).Lock(ctx)
					idx = []int{i}
					if err == nil {
						unlock = l.Unlock
					}
				}
				if err != nil {
					if !errors.Is(err, etcdlock.ErrLocked) {
						t.Errorf("session %d: %v", g, err)
					}
					cancel()
					continue
				}
				heldN.Add(1)
				for _, k := range idx {
					if n := holders[k].Add(1); n != 1 {
						t.Errorf("%s held by %d at once", names[k], n)
					}
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				for _, k := range idx {
					holders[k].Add(-1)
				}
				if err := unlock(ctx); err != nil {
					t.Errorf("unlock: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d answers lost, %d grants", lostN.Load(), heldN.Load())
	noKeysLeft(t, cli, names...)
}
