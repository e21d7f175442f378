package etcdlock_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMutualExclusionWithFence(t *testing.T) {
	const sessions, perSession, rounds = 4, 2, 12
	name := embedtest.UniqueName(t, "test")
	var (
		fence   etcdlock.Fence
		inside  atomic.Int32
		counter int // guarded by the lock, on purpose not by Go
		grants  atomic.Int64
		wg      sync.WaitGroup
	)
	ctx := embedtest.Context(t, 2*time.Minute)
	for i := 0; i < sessions; i++ {
		s := locktest.OpenSession(t, shared.TestClient(t))
		m := etcdlock.NewMutex(s, name)
		for j := 0; j < perSession; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if err := fence.Admit(l.Token()); err != nil {
						t.Errorf("admit on entry: %v", err)
					}
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders inside the critical section", n)
					}
					v := counter
					runtime.Gosched()
					counter = v + 1
					grants.Add(1)
					inside.Add(-1)
					if err := fence.Admit(l.Token()); err != nil {
						t.Errorf("admit before unlock: %v", err)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if int64(counter) != grants.Load() || grants.Load() != sessions*perSession*rounds {
		t.Fatalf("counter %d, grants %d, want %d", counter, grants.Load(), sessions*perSession*rounds)
	}
}

// enqueueWaiters starts n Lock calls on name, one at a time, each one only
// after the previous is in the queue, and returns the channel on which each
// sends its index when granted (it then unlocks at once).
func enqueueWaiters(t *testing.T, cli *clientv3.Client, name string, n int, sessions []*etcdlock.Session) <-chan int {
	t.Helper()
	order := make(chan int, n)
	ctx := embedtest.Context(t, 2*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i := 0; i < n; i++ {
		before := len(keysUnder(t, cli, name))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := etcdlock.NewMutex(sessions[i%len(sessions)], name).Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		}()
		waitFor(t, 10*time.Second, "waiter to enqueue", func() bool { return len(keysUnder(t, cli, name)) > before })
	}
	return order
}

func TestFIFO(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ss := []*etcdlock.Session{locktest.OpenSession(t, cli), locktest.OpenSession(t, shared.TestClient(t)), locktest.OpenSession(t, shared.TestClient(t))}
	holder := mustLock(t, etcdlock.NewMutex(ss[0], name))
	const n = 8
	order := enqueueWaiters(t, cli, name, n, ss)
	if err := holder.Unlock(embedtest.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < n; want++ {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
}

// kvCalls counts the KV and Watch requests all members of the shared cluster served.
func kvCalls() int64 {
	var n int64
	for _, m := range shared.Members() {
		for _, method := range []string{"/etcdserverpb.KV/Range", "/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Put",
			"/etcdserverpb.KV/DeleteRange", "/etcdserverpb.Watch/Watch", "/etcdserverpb.Lease/LeaseTimeToLive"} {
			n += m.Calls(method)
		}
	}
	return n
}

func TestReleaseWakesOneWaiter(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	s := locktest.OpenSession(t, cli)
	holder := mustLock(t, etcdlock.NewMutex(s, name))
	const n = 20
	ctx := embedtest.Context(t, time.Minute)
	granted := make(chan *etcdlock.Lock, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := etcdlock.NewMutex(s, name).Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			granted <- l
		}()
	}
	waitFor(t, 20*time.Second, "20 waiters", func() bool { return len(keysUnder(t, cli, name)) == n+1 })
	// Let every waiter's watches be established before counting.
	settle := func() int64 {
		prev := kvCalls()
		for {
			time.Sleep(300 * time.Millisecond)
			cur := kvCalls()
			if cur == prev {
				return cur
			}
			prev = cur
		}
	}
	before := settle()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-granted
	after := settle()
	if d := after - before; d > 6 {
		t.Fatalf("one release cost %d KV/watch requests with %d waiters; want a constant (<= 6)", d, n)
	} else {
		t.Logf("one release with %d waiters: %d requests", n, d)
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := (<-granted).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestTryLock(t *testing.T) {
	cli := shared.TestClient(t)
	s1, s2 := locktest.OpenSession(t, cli), locktest.OpenSession(t, shared.TestClient(t))
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	l, err := etcdlock.NewMutex(s1, name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		resp, err := cli.Get(ctx, "etcdlock/")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	r0 := rev()
	if _, err := etcdlock.NewMutex(s2, name).TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryLock on a held lock: %v, want ErrLocked", err)
	}
	if r1 := rev(); r1 != r0 {
		t.Fatalf("a failed TryLock wrote: revision %d -> %d", r0, r1)
	}
	// Waited on: the holder leaves but a waiter is queued.
	waiting := make(chan *etcdlock.Lock, 1)
	go func() {
		w, err := etcdlock.NewMutex(s2, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		waiting <- w
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	if _, err := etcdlock.NewMutex(s1, name).TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryLock on a waited-on lock: %v, want ErrLocked", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-waiting
	if w == nil {
		t.FailNow()
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := etcdlock.NewMutex(s2, name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if l2.Token() <= w.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), w.Token())
	}
	_ = l2.Unlock(ctx)
}

func TestUnlock(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)

	t.Run("twice", func(t *testing.T) {
		l := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
		for i := 0; i < 2; i++ {
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("unlock %d: %v", i+1, err)
			}
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, etcdlock.ErrReleased) {
			t.Fatalf("cause %v, want ErrReleased", cause)
		}
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left: %v", keys)
		}
	})
	t.Run("after session expired", func(t *testing.T) {
		s := locktest.OpenSession(t, cli)
		l := mustLock(t, etcdlock.NewMutex(s, name))
		if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
			t.Fatal(err)
		}
		err := l.Unlock(ctx)
		if !errors.Is(err, etcdlock.ErrNotHeld) || !errors.Is(err, etcdlock.ErrSessionExpired) {
			t.Fatalf("unlock after revoke: %v, want ErrNotHeld and ErrSessionExpired", err)
		}
		if err2 := l.Unlock(ctx); err2 == nil || err2.Error() != err.Error() {
			t.Fatalf("second unlock: %v, want %v", err2, err)
		}
	})
	t.Run("canceled ctx still frees", func(t *testing.T) {
		l := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Unlock(dead); !errors.Is(err, context.Canceled) {
			t.Fatalf("unlock with canceled ctx: %v", err)
		}
		start := time.Now()
		waitFor(t, time.Second, "the key to be reaped", func() bool { return len(keysUnder(t, cli, name)) == 0 })
		t.Logf("freed %v after Unlock", time.Since(start))
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("later unlock: %v", err)
		}
	})
}
