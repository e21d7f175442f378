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
	x := &exclusion{names: []string{embedtest.UniqueName(t, "a"), embedtest.UniqueName(t, "b"), embedtest.UniqueName(t, "c")}}
	var lostN atomic.Int32
	var wg sync.WaitGroup
	for g := range 4 {
		s := locktest.OpenSession(t, shared.TestClient(t))
		rng := &lockedRand{r: rand.New(rand.NewPCG(uint64(g), 7))}
		setHook(t, func(p testhook.Point, err error) error {
			if lose := rng.IntN(3) == 0; p == testhook.Enqueued && err == nil && lose {
				lostN.Add(1)
				return errors.New("test: the Txn's answer was lost")
			}
			return err
		}, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				x.round(t, s, rng)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d answers lost, %d grants", lostN.Load(), x.granted.Load())
	noKeysLeft(t, cli, 15*time.Second, x.names...)
}

// lockedRand is a rand.Rand safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

// exclusion counts the holders of each name.
type exclusion struct {
	names   []string
	holders [3]atomic.Int32
	granted atomic.Int32
}

// round takes one or two random names on s (LockAll, TryLockAll or Lock),
// checks that nobody else holds them meanwhile, and unlocks.
func (x *exclusion) round(t *testing.T, s *etcdlock.Session, rng *lockedRand) {
	i, j, kind := rng.IntN(3), rng.IntN(2), rng.IntN(3)
	j = (i + 1 + j) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	idx := []int{i, j}
	var unlock func(context.Context) error
	var err error
	if kind < 2 {
		var ls *etcdlock.Locks
		if ls, err = lockAllTry(ctx, s, kind == 1, x.names[i], x.names[j]); err == nil {
			unlock = ls.Unlock
		}
	} else {
		var l *etcdlock.Lock
		idx = idx[:1]
		if l, err = etcdlock.NewMutex(s, x.names[i]).Lock(ctx); err == nil {
			unlock = l.Unlock
		}
	}
	if err != nil {
		if !errors.Is(err, etcdlock.ErrLocked) {
			t.Errorf("%v", err)
		}
		return
	}
	x.granted.Add(1)
	for _, k := range idx {
		if n := x.holders[k].Add(1); n != 1 {
			t.Errorf("%s held by %d at once", x.names[k], n)
		}
	}
	time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	for _, k := range idx {
		x.holders[k].Add(-1)
	}
	if err := unlock(ctx); err != nil {
		t.Errorf("unlock: %v", err)
	}
}
