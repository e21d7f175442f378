package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// runCalls starts m.Run and reports each fn call's grant on grants; fn
// waits for its context to end and checks that no two calls overlap.
type runCalls struct {
	grants  chan *etcdlock.Lock
	running atomic.Int32
	done    chan error
}

func startRun(t *testing.T, ctx context.Context, m *etcdlock.Mutex) *runCalls {
	t.Helper()
	rc := &runCalls{grants: make(chan *etcdlock.Lock, 8), done: make(chan error, 1)}
	go func() {
		rc.done <- m.Run(ctx, func(fctx context.Context, l *etcdlock.Lock) error {
			if n := rc.running.Add(1); n != 1 {
				t.Errorf("%d fn calls at once", n)
			}
			defer rc.running.Add(-1)
			if got, ok := etcdlock.LockFromContext(fctx); !ok || got != l {
				t.Errorf("fn's context carries %v, %v; want its grant", got, ok)
			}
			rc.grants <- l
			<-fctx.Done()
			return nil
		})
	}()
	return rc
}

// next returns the grant of fn's next call.
func (rc *runCalls) next(t *testing.T) *etcdlock.Lock {
	t.Helper()
	select {
	case l := <-rc.grants:
		return l
	case err := <-rc.done:
		t.Fatalf("Run returned %v before calling fn again", err)
	case <-time.After(30 * time.Second):
		t.Fatal("fn not called again within 30s")
	}
	return nil
}

// TestMutexRunRetakesAfterLoss: Run calls fn again after a Break of its
// grant and after a revoke of its session's lease (then on a replacement
// session, which Run closes), never two fn calls at once, each with a
// larger token; ctx's end makes Run return nil with no key left.
func TestMutexRunRetakesAfterLoss(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)
	rctx, cancel := context.WithCancel(ctx)
	rc := startRun(t, rctx, etcdlock.NewMutex(s, name))

	first := rc.next(t)
	if err := etcdlock.Break(ctx, cli, name, first.Token()); err != nil {
		t.Fatal(err)
	}
	second := rc.next(t)
	if !errors.Is(context.Cause(first.Context()), etcdlock.ErrLockLost) || second.Token() <= first.Token() {
		t.Fatalf("after a break: first's cause %v, tokens %d then %d", context.Cause(first.Context()), first.Token(), second.Token())
	}
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	third := rc.next(t)
	replacement := sessionOf(t, third.Context())
	if replacement == s || third.Token() <= second.Token() {
		t.Fatalf("after a revoke: on the lost session (%v), or token %d <= %d", replacement == s, third.Token(), second.Token())
	}
	cancel()
	if err := <-rc.done; err != nil {
		t.Fatalf("Run after ctx ended: %v", err)
	}
	if !errors.Is(replacement.Err(), etcdlock.ErrSessionClosed) {
		t.Fatalf("Run did not close its replacement session: %v", replacement.Err())
	}
	if !errors.Is(s.Err(), etcdlock.ErrSessionExpired) {
		t.Fatalf("the caller's session: %v; want it lost, not closed by Run", s.Err())
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// TestMutexRunReturnsFnError: fn's error comes back after the release.
func TestMutexRunReturnsFnError(t *testing.T) {
	s := locktest.OpenSession(t, shared.TestClient(t))
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	boom := errors.New("boom")
	var held *etcdlock.Lock
	err := etcdlock.NewMutex(s, name).Run(ctx, func(_ context.Context, l *etcdlock.Lock) error {
		held = l
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want fn's error", err)
	}
	if !errors.Is(context.Cause(held.Context()), etcdlock.ErrReleased) {
		t.Fatalf("grant after Run: %v, want released", context.Cause(held.Context()))
	}
	if keys := keysUnder(t, s.Client(), name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// TestMutexRunWaitsItsTurn: a Run behind a holder calls fn only after the
// holder's release, and a Run whose ctx ends while it waits returns nil
// without calling fn.
func TestMutexRunWaitsItsTurn(t *testing.T) {
	s := locktest.OpenSession(t, shared.TestClient(t))
	name := embedtest.UniqueName(t, "test")
	m := etcdlock.NewMutex(s, name)
	holder := mustLock(t, m)
	ctx := embedtest.Context(t, 30*time.Second)
	rctx, cancel := context.WithCancel(ctx)
	rc := startRun(t, rctx, m)
	waitFor(t, 10*time.Second, "Run's waiter", func() bool { return len(keysUnder(t, s.Client(), name)) == 2 })
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := rc.next(t)
	if l.Token() <= holder.Token() {
		t.Fatalf("Run's token %d <= the holder's %d", l.Token(), holder.Token())
	}
	cancel()
	if err := <-rc.done; err != nil {
		t.Fatal(err)
	}

	holder = mustLock(t, m)
	wctx, wcancel := context.WithCancel(ctx)
	rc = startRun(t, wctx, m)
	waitFor(t, 10*time.Second, "Run's waiter", func() bool { return len(keysUnder(t, s.Client(), name)) == 2 })
	wcancel()
	if err := <-rc.done; err != nil {
		t.Fatalf("Run whose ctx ended while waiting: %v", err)
	}
	if len(rc.grants) != 0 {
		t.Fatal("fn was called without the grant")
	}
	if keys := keysUnder(t, s.Client(), name); len(keys) != 1 {
		t.Fatalf("keys: %v, want the holder's only", keys)
	}
	_ = holder.Unlock(ctx)
}
