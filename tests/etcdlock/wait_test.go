package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestSessionReusesKeyNames: a session's acquisitions of a name reuse key
// names once the previous key is certainly gone (etcd keeps every deleted
// key in its index until compaction, and reads of the queue walk them), never
// while it is held, and never after a write of unknown outcome until the
// reaper has raised the session's barrier and deleted what the write made.
func TestSessionReusesKeyNames(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	m := etcdlock.NewMutex(s, name)
	l1 := mustLock(t, m)
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustLock(t, m)
	if l2.Key() != l1.Key() || l2.Token() <= l1.Token() {
		t.Fatalf("second acquisition: key %s token %d; want key %s reused with a larger token than %d", l2.Key(), l2.Token(), l1.Key(), l1.Token())
	}
	// While l2 holds its key, another acquisition of the session gets another.
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the second acquisition to queue", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := <-got
	if l3 == nil || l3.Key() == l2.Key() {
		t.Fatalf("concurrent acquisitions shared a key: %v", l3)
	}
	_ = l3.Unlock(ctx)

	// A write of unknown outcome keeps its key name out of use.
	hook := func(p testhook.Point, err error) error {
		if p == testhook.Enqueued {
			return context.DeadlineExceeded // as if the answer was lost
		}
		return err
	}
	setHook(t, hook, s)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := m.Lock(short)
	cancel()
	clearHook(s)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with lost answers: %v", err)
	}
	l4 := mustLock(t, m)
	if l4.Key() == l1.Key() {
		t.Fatalf("key %s reused although a write of it had an unknown outcome", l4.Key())
	}
	_ = l4.Unlock(ctx)
}

// TestWaiterReadsOnlyWhatChanged: a waiter whose predecessor watch starts at
// the revision of its own enqueue (no write came between) knows the queue at
// that revision already and reads nothing before the hand-off; the hand-off
// itself costs one read. A cluster of its own keeps other tests' writes out.
func TestWaiterReadsOnlyWhatChanged(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1))
	cli := c.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
	ws := locktest.OpenSession(t, cli)
	hooks := countHooks(t, ws)
	granted := lockAndUnlock(ctx, etcdlock.NewMutex(ws, name))
	hooks.awaitWatchCreated(t, ctx)
	reads := &hooks.n[testhook.HandoffRead]
	if n := reads.Load(); n != 0 {
		t.Fatalf("the waiter read the queue %d times before the hand-off; want 0 (nothing changed since its enqueue)", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("the hand-off cost %d reads; want 1", n)
	}
}

// TestShortWaitOpensOneWatch: a waiter granted before waiterMonitorDelay
// never opens the watch on its own key (only its predecessor watch); a
// waiter that waits longer does (TestLostWhileWaiting).
func TestShortWaitOpensOneWatch(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
	ws := locktest.OpenSession(t, cli)
	setMonitorDelay(t, time.Minute, ws)
	hooks := countHooks(t, ws)
	waiter := etcdlock.NewMutex(ws, name)
	granted := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	hooks.awaitWatchCreated(t, ctx)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-granted
	if l == nil {
		return
	}
	if n := hooks.n[testhook.Monitor].Load(); n != 0 {
		t.Fatalf("a short wait started %d own-key monitors; want 0", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// hookCounter counts the acquisition hook points passed (see countHooks).
type hookCounter struct {
	n       [testhook.NumPoints]atomic.Int64
	created chan struct{}
}

// countHooks installs a test hook, removed at cleanup, that counts every
// hook point passed and signals predecessor watches being created.
func countHooks(t testing.TB, ss ...*etcdlock.Session) *hookCounter {
	t.Helper()
	h := &hookCounter{created: make(chan struct{}, 1)}
	hook := func(p testhook.Point, err error) error {
		h.n[p].Add(1)
		if p == testhook.WatchCreated {
			select {
			case h.created <- struct{}{}:
			default:
			}
		}
		return err
	}
	setHook(t, hook, ss...)
	return h
}

// awaitWatchCreated waits until a waiter's predecessor watch is created.
func (h *hookCounter) awaitWatchCreated(t testing.TB, ctx context.Context) {
	t.Helper()
	select {
	case <-h.created:
	case <-ctx.Done():
		t.Fatal("the waiter's watch was never created")
	}
}

// setMonitorDelay sets the waiter monitor delay of each session.
func setMonitorDelay(t testing.TB, d time.Duration, ss ...*etcdlock.Session) {
	t.Helper()
	for _, s := range ss {
		testhook.SetMonitorDelay(s, d)
	}
}

// setHook installs hook as the test hook of each session until the test
// ends (or clearHook).
func setHook(t testing.TB, hook func(testhook.Point, error) error, ss ...*etcdlock.Session) {
	t.Helper()
	for _, s := range ss {
		testhook.SetHook(s, hook)
	}
	t.Cleanup(func() { clearHook(ss...) })
}

// clearHook removes the sessions' test hooks.
func clearHook(ss ...*etcdlock.Session) {
	for _, s := range ss {
		testhook.SetHook(s, nil)
	}
}

// lockAndUnlock locks m in a goroutine, unlocks at once, and sends the first
// error (nil when both succeed) on the returned channel.
func lockAndUnlock(ctx context.Context, m *etcdlock.Mutex) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	return done
}
