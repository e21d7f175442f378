package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestSemaphoreBoundsHolders(t *testing.T) {
	const n, workers, rounds = 3, 8, 8
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*time.Minute)
	var inside, most, grants atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		s := locktest.OpenSession(t, shared.TestClient(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := etcdlock.NewSemaphore(s, name, n).Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				cur := inside.Add(1)
				for {
					m := most.Load()
					if cur <= m || most.CompareAndSwap(m, cur) {
						break
					}
				}
				if cur > n {
					t.Errorf("%d holders of a semaphore of %d", cur, n)
				}
				grants.Add(1)
				time.Sleep(time.Millisecond) // hold it for a moment: the point is overlap
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if grants.Load() != workers*rounds {
		t.Fatalf("%d grants", grants.Load())
	}
	t.Logf("at most %d holders at once", most.Load())
	// That it shares at all, whatever the timing: n holders at once, and
	// the next refused.
	held := make([]*etcdlock.Lock, n)
	for i := range held {
		l, err := etcdlock.NewSemaphore(locktest.OpenSession(t, shared.TestClient(t)), name, n).Acquire(ctx)
		if err != nil {
			t.Fatalf("holder %d of %d: %v", i+1, n, err)
		}
		held[i] = l
	}
	if _, err := etcdlock.NewSemaphore(locktest.OpenSession(t, shared.TestClient(t)), name, n).TryAcquire(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("a holder past %d: %v, want ErrLocked", n, err)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreReleaseOrders holds n=3 grants, queues waiters behind them,
// and releases the holders in every one of the 6 orders: after each release
// exactly the front waiter must be admitted (never a missed wake-up).
func TestSemaphoreReleaseOrders(t *testing.T) {
	orders := [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			ctx := embedtest.Context(t, time.Minute)
			sem := etcdlock.NewSemaphore(s, name, 3)
			var holders [3]*etcdlock.Lock
			for i := range holders {
				l, err := sem.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				holders[i] = l
			}
			granted := make(chan int, semWaiters)
			var held [semWaiters]*etcdlock.Lock
			var wg sync.WaitGroup
			queueSemWaiters(t, ctx, cli, name, granted, &held, &wg)
			releaseInOrder(t, ctx, holders, order, granted)
			// Release a waiter-turned-holder out of order: the last waiter gets in.
			if err := held[1].Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-granted:
				if got != 3 {
					t.Fatalf("admitted %d, want 3", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the last waiter was never admitted")
			}
			wg.Wait()
			for _, l := range held {
				_ = l.Unlock(ctx)
			}
		})
	}
}

// semWaiters is how many waiters TestSemaphoreReleaseOrders queues.
const semWaiters = 4

// queueSemWaiters queues semWaiters acquisitions of name (a Semaphore of
// 3), one at a time; waiter i stores its lock in held[i] and sends i on
// granted.
func queueSemWaiters(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, granted chan<- int, held *[semWaiters]*etcdlock.Lock, wg *sync.WaitGroup) {
	t.Helper()
	for i := 0; i < semWaiters; i++ {
		before := len(keysUnder(t, cli, name))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := etcdlock.NewSemaphore(locktest.OpenSession(t, cli), name, 3).Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			held[i] = l
			granted <- i
		}()
		waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) > before })
	}
}

// releaseInOrder releases holders in order and checks that each release
// admits the next waiter, in queue order.
func releaseInOrder(t *testing.T, ctx context.Context, holders [3]*etcdlock.Lock, order [3]int, granted <-chan int) {
	t.Helper()
	for step, h := range order {
		if err := holders[h].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-granted:
			if got != step {
				t.Fatalf("release %d admitted waiter %d, want %d", step, got, step)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d (holder %d) admitted nobody", step, h)
		}
	}
}

func TestSemaphoreMisuse(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	ctx := embedtest.Context(t, 30*time.Second)
	for _, n := range []int{0, -1} {
		if _, err := etcdlock.NewSemaphore(s, "x", n).Acquire(ctx); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Fatalf("Acquire with n=%d: %v", n, err)
		}
		if _, err := etcdlock.NewSemaphore(s, "x", n).TryAcquire(ctx); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Fatalf("TryAcquire with n=%d: %v", n, err)
		}
	}
	name := embedtest.UniqueName(t, "test")
	l, err := etcdlock.NewSemaphore(s, name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdlock.NewSemaphore(s, name, 3).Acquire(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("Acquire with another size: %v", err)
	}
	if _, err := etcdlock.NewSemaphore(s, name, 3).TryAcquire(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("TryAcquire with another size: %v", err)
	}
	if _, err := etcdlock.NewMutex(s, name).Lock(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("Mutex on a semaphore's name: %v", err)
	}
	waitFor(t, 2*time.Second, "mismatched keys reaped", func() bool { return len(keysUnder(t, cli, name)) == 1 })
	l2, err := etcdlock.NewSemaphore(s, name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire with room: %v", err)
	}
	if _, err := etcdlock.NewSemaphore(s, name, 2).TryAcquire(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryAcquire when full: %v", err)
	}
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil || len(st.Holders) != 2 || st.Holders[0].Kind != "semaphore" || len(st.Waiters) != 0 {
		t.Fatalf("describe: %+v %v", st, err)
	}
	_ = l.Unlock(ctx)
	_ = l2.Unlock(ctx)
}

func TestSemaphoreLostGrantAndCrash(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	s1 := locktest.OpenSession(t, cli)
	l, err := etcdlock.NewSemaphore(s1, name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx := l.Context()
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		w, err := etcdlock.NewSemaphore(locktest.OpenSession(t, cli), name, 1).Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), etcdlock.ErrSessionExpired) {
		t.Fatalf("cause %v", context.Cause(lctx))
	}
	w := <-got
	if w == nil || w.Token() <= l.Token() {
		t.Fatalf("next grant %v", w)
	}
	wctx := w.Context()
	if _, err := cli.Delete(ctx, w.Key()); err != nil {
		t.Fatal(err)
	}
	<-wctx.Done()
	if !errors.Is(context.Cause(wctx), etcdlock.ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(wctx))
	}
}
