package compat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// openSession opens a session of a short TTL on cli, closed at cleanup.
func openSession(t *testing.T, cli *clientv3.Client) *etcdlock.Session {
	t.Helper()
	return locktest.OpenSession(t, cli, etcdlock.WithTTL(5*time.Second))
}

// awaitWaiters waits until name has n waiters.
func awaitWaiters(t *testing.T, cli *clientv3.Client, name string, n int) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	for {
		st, err := etcdlock.Describe(ctx, cli, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Waiters) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters of %s, want %d", len(st.Waiters), name, n)
		case <-time.After(20 * time.Millisecond): // a Describe poll: the waiters' keys are another process's view
		}
	}
}

// TestServerAnswers names the server the package runs against.
func TestServerAnswers(t *testing.T) {
	newClient(t)
	if !strings.HasPrefix(server.version, "3.") {
		t.Fatalf("server version %q", server.version)
	}
	t.Logf("etcd server %s", server.version)
}

// TestMutexQueue: waiters are granted in the order they came, each with a
// larger token.
func TestMutexQueue(t *testing.T) {
	cli := newClient(t)
	name := uniqueName(t)
	ctx := testCtx(t, time.Minute)
	a, err := etcdlock.NewMutex(openSession(t, cli), name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	grants := make(chan *etcdlock.Lock, 2)
	for i := range 2 {
		m := etcdlock.NewMutex(openSession(t, cli), name)
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			grants <- l
		}()
		awaitWaiters(t, cli, name, i+1)
	}
	prev := a
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l := <-grants
		if l == nil {
			t.FailNow()
		}
		if l.Token() <= prev.Token() {
			t.Fatalf("token %d granted after %d", l.Token(), prev.Token())
		}
		prev = l
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTryAndSharedKinds: TryLock, a semaphore and a read-write lock.
func TestTryAndSharedKinds(t *testing.T) {
	cli := newClient(t)
	ctx := testCtx(t, time.Minute)
	s1, s2 := openSession(t, cli), openSession(t, cli)
	name := uniqueName(t)
	held, err := etcdlock.NewMutex(s1, name+"/m").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdlock.NewMutex(s2, name+"/m").TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryLock of a held mutex: %v, want ErrLocked", err)
	}
	for i, s := range []*etcdlock.Session{s1, s2} {
		if _, err := etcdlock.NewSemaphore(s, name+"/sem", 2).Acquire(ctx); err != nil {
			t.Fatalf("acquire %d of 2: %v", i, err)
		}
	}
	if _, err := etcdlock.NewSemaphore(s2, name+"/sem", 2).TryAcquire(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("a third TryAcquire of 2: %v, want ErrLocked", err)
	}
	for i, s := range []*etcdlock.Session{s1, s2} {
		if _, err := etcdlock.NewRWMutex(s, name+"/rw").RLock(ctx); err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	if _, err := etcdlock.NewRWMutex(s2, name+"/rw").TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryLock of a read-held RWMutex: %v, want ErrLocked", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRevokedSessionFreesLock: a revoked lease ends its grant, with the
// cause, and the next waiter is granted.
func TestRevokedSessionFreesLock(t *testing.T) {
	cli := newClient(t)
	ctx := testCtx(t, time.Minute)
	name := uniqueName(t)
	sa := openSession(t, cli)
	a, err := etcdlock.NewMutex(sa, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() {
		l, err := etcdlock.NewMutex(openSession(t, cli), name).Lock(ctx)
		if err == nil && l.Token() <= a.Token() {
			err = fmt.Errorf("token %d after %d", l.Token(), a.Token())
		}
		next <- err
	}()
	awaitWaiters(t, cli, name, 1)
	if _, err := cli.Revoke(ctx, sa.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Context().Done():
	case <-ctx.Done():
		t.Fatal("the grant did not end with its lease")
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, etcdlock.ErrLockLost) && !errors.Is(cause, etcdlock.ErrSessionExpired) {
		t.Fatalf("cause %v", cause)
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
}

// TestElection: Run leads, Observe and Leader see it, and the term ends
// when Run's ctx does.
func TestElection(t *testing.T) {
	cli := newClient(t)
	ctx := testCtx(t, time.Minute)
	name := uniqueName(t)
	runCtx, stop := context.WithCancel(ctx)
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- etcdlock.NewElection(openSession(t, cli), name).Run(runCtx, "node-1", func(lctx context.Context) error {
			close(leading)
			<-lctx.Done()
			return nil
		})
	}()
	<-leading
	observer := etcdlock.NewElection(openSession(t, cli), name)
	info, err := observer.Leader(ctx)
	if err != nil || info.Value != "node-1" {
		t.Fatalf("Leader: %+v, %v", info, err)
	}
	select {
	case seen := <-observer.Observe(ctx):
		if seen.Value != "node-1" {
			t.Fatalf("Observe: %+v", seen)
		}
	case <-ctx.Done():
		t.Fatal("Observe saw no leader")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunOnce: a second run of one id does not call fn.
func TestRunOnce(t *testing.T) {
	cli := newClient(t)
	ctx := testCtx(t, time.Minute)
	m := etcdlock.NewMutex(openSession(t, cli), uniqueName(t))
	runs := 0
	fn := func(context.Context, *etcdlock.Lock) error { runs++; return nil }
	if err := m.RunOnce(ctx, "2026-12-03", fn); err != nil {
		t.Fatal(err)
	}
	if err := m.RunOnce(ctx, "2026-12-03", fn); !errors.Is(err, etcdlock.ErrAlreadyCompleted) {
		t.Fatalf("second run: %v, want ErrAlreadyCompleted", err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times", runs)
	}
}

// TestGroupCommit: many Locks of one session at once travel as nested Txns
// of one Txn; every one is granted and released, and no key is left.
func TestGroupCommit(t *testing.T) {
	cli := newClient(t)
	ctx := testCtx(t, time.Minute)
	s := openSession(t, cli)
	prefix := uniqueName(t) + "/"
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := etcdlock.NewMutex(s, fmt.Sprintf("%s%02d", prefix, i)).Lock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	left, err := etcdlock.List(ctx, cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("%d names still held or waited on", len(left))
	}
}
