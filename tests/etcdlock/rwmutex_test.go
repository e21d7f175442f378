package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestRWMutexExclusion(t *testing.T) {
	const workers, rounds = 6, 8
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*time.Minute)
	var (
		in rwInside
		wg sync.WaitGroup
	)
	for i := 0; i < workers; i++ {
		m := etcdlock.NewRWMutex(locktest.OpenSession(t, shared.TestClient(t)), name)
		write := i%3 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := rwAcquire(ctx, m, write)
				if err != nil {
					t.Error(err)
					return
				}
				in.hold(t, l, write)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if !in.sharedSeen.Load() {
		t.Fatal("readers never held together")
	}
}

// rwAcquire takes m for writing (write) or reading.
func rwAcquire(ctx context.Context, m *etcdlock.RWMutex, write bool) (*etcdlock.Lock, error) {
	if write {
		return m.Lock(ctx)
	}
	return m.RLock(ctx)
}

// rwInside counts the holders inside TestRWMutexExclusion's critical
// section, and checks their tokens with a Fence.
type rwInside struct {
	fence            etcdlock.Fence
	readers, writers atomic.Int32
	sharedSeen       atomic.Bool
}

// hold enters the critical section with l, a writer's (write) or a
// reader's, checks who else is inside, and leaves.
func (in *rwInside) hold(t *testing.T, l *etcdlock.Lock, write bool) {
	if write {
		if err := in.fence.Admit(l.Token()); err != nil {
			t.Errorf("writer admit: %v", err)
		}
		if w, rd := in.writers.Add(1), in.readers.Load(); w != 1 || rd != 0 {
			t.Errorf("writer inside with %d writers and %d readers", w, rd)
		}
		time.Sleep(time.Millisecond)
		in.writers.Add(-1)
		return
	}
	if err := in.fence.AdmitShared(l.Token()); err != nil {
		t.Errorf("reader admit: %v", err)
	}
	if n := in.readers.Add(1); n > 1 {
		in.sharedSeen.Store(true)
	}
	if w := in.writers.Load(); w != 0 {
		t.Errorf("reader inside with %d writers", w)
	}
	time.Sleep(2 * time.Millisecond)
	in.readers.Add(-1)
}

// TestRWMutexFIFO: holder reader R0; then writer W1, reader R2, reader R3
// queue. R2 and R3 must not pass W1 (no writer starvation); after W1, both
// readers hold together.
func TestRWMutexFIFO(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)
	s := locktest.OpenSession(t, cli)
	r0 := readerAdmitsOnlyReaders(t, ctx, s, name)
	events := make(chan string, 10)
	locks := make(chan *etcdlock.Lock, 10)
	start := func(label string, write bool) {
		startRWWaiter(t, ctx, cli, name, label, write, events, locks)
	}
	start("W1", true)
	start("R2", false)
	start("R3", false)
	if _, err := etcdlock.NewRWMutex(s, name).TryRLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryRLock with a writer waiting: %v", err)
	}
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Mode != "read" || len(st.Waiters) != 3 || st.Waiters[0].Mode != "write" {
		t.Fatalf("describe: %+v %v", st, err)
	}
	noGrantWhile(t, events, "R0 holds and W1 waits")
	if err := r0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if e := <-events; e != "W1" {
		t.Fatalf("first grant after R0 went to %s", e)
	}
	w1 := <-locks
	noGrantWhile(t, events, "W1 holds")
	if err := w1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	bothReadersHold(t, ctx, cli, name, events, locks)
}

// readerAdmitsOnlyReaders read-locks name on s and checks that TryLock is
// refused and TryRLock granted meanwhile; it returns the read lock, held.
func readerAdmitsOnlyReaders(t *testing.T, ctx context.Context, s *etcdlock.Session, name string) *etcdlock.Lock {
	t.Helper()
	r0, err := etcdlock.NewRWMutex(s, name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdlock.NewRWMutex(s, name).TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryLock with a reader holding: %v", err)
	}
	r, err := etcdlock.NewRWMutex(s, name).TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock with only readers: %v", err)
	}
	_ = r.Unlock(ctx)
	return r0
}

// startRWWaiter starts a Lock (write) or RLock of name on a new session
// and waits until it queues; once granted, it sends label on events and
// the lock on locks.
func startRWWaiter(t *testing.T, ctx context.Context, cli *clientv3.Client, name, label string, write bool, events chan<- string, locks chan<- *etcdlock.Lock) {
	t.Helper()
	before := len(keysUnder(t, cli, name))
	go func() {
		m := etcdlock.NewRWMutex(locktest.OpenSession(t, cli), name)
		l, err := rwAcquire(ctx, m, write)
		if err != nil {
			t.Error(err)
			return
		}
		events <- label
		locks <- l
	}()
	waitFor(t, 10*time.Second, label+" to queue", func() bool { return len(keysUnder(t, cli, name)) > before })
}

// noGrantWhile fails if a grant was reported on events (while describes
// the state in which none may be).
func noGrantWhile(t *testing.T, events <-chan string, while string) {
	t.Helper()
	select {
	case e := <-events:
		t.Fatalf("%s was granted while %s", e, while)
	default:
	}
}

func TestRWMutexLostGrant(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	s := locktest.OpenSession(t, cli)
	w, err := etcdlock.NewRWMutex(s, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewRWMutex(locktest.OpenSession(t, cli), name).RLock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "reader", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	wctx := w.Context()
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	<-wctx.Done()
	if !errors.Is(context.Cause(wctx), etcdlock.ErrSessionExpired) {
		t.Fatalf("cause %v", context.Cause(wctx))
	}
	r := <-got
	if r == nil || r.Token() <= w.Token() {
		t.Fatalf("reader after writer: %v", r)
	}
	if _, err := etcdlock.NewMutex(locktest.OpenSession(t, cli), name).Lock(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("Mutex on an RWMutex's name: %v", err)
	}
	if _, err := etcdlock.NewRWMutex(locktest.OpenSession(t, cli), name).TryRLock(ctx); err != nil {
		t.Fatalf("TryRLock beside a reader: %v", err)
	}
}

// bothReadersHold checks that R2 and R3 were granted next, and hold
// together, and releases them.
func bothReadersHold(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, events <-chan string, locks <-chan *etcdlock.Lock) {
	t.Helper()
	got := map[string]bool{<-events: true, <-events: true}
	if !got["R2"] || !got["R3"] {
		t.Fatalf("after W1: %v", got)
	}
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil || len(st.Holders) != 2 || len(st.Waiters) != 0 {
		t.Fatalf("both readers should hold: %+v %v", st, err)
	}
	for i := 0; i < 2; i++ {
		_ = (<-locks).Unlock(ctx)
	}
}
