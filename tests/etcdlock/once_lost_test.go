package etcdlock_test

// Tests of the operations that act under a grant when the grant ends while
// they wait for etcd: their answer must not be used as if the grant held.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// cutSession returns a session of TTL ttl on a client whose every path to c
// goes through one link, and that link (restored at cleanup).
func cutSession(t *testing.T, c *embedtest.Cluster, ttl time.Duration) (*etcdlock.Session, *embedtest.Link) {
	t.Helper()
	cli, link, err := c.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	t.Cleanup(link.Restore)
	s, _ := keptSession(t, c, cli, etcdlock.WithTTL(ttl))
	return s, link
}

// awaitLoss waits until s is lost.
func awaitLoss(t *testing.T, s *etcdlock.Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the session was not lost")
	}
}

// TestRunOnceNeverRunsOnLostGrant: A is granted a free name, and its link
// is cut at that moment, so RunOnce's read of the completion record waits.
// A's session is lost: RunOnce returns ErrNotHeld with the loss, at once and
// although etcd is still unreachable, and never calls fn. B then runs the
// same id; when A's link comes back, A does not run it a second time while
// B's run is in progress (before, A's read answered "not done" after the
// link came back and A called fn 8 ms later, its context already ended).
// runOnceUntil starts RunOnce of id on s, whose fn closes started and
// returns once finish is closed; RunOnce's error comes on res.
func runOnceUntil(t *testing.T, s *etcdlock.Session, name, id string) (started, finish chan struct{}, res <-chan error) {
	started, finish = make(chan struct{}), make(chan struct{})
	r := make(chan error, 1)
	go func() {
		r <- etcdlock.NewMutex(s, name).RunOnce(embedtest.Context(t, time.Minute), id, func(context.Context, *etcdlock.Lock) error {
			close(started)
			<-finish
			return nil
		})
	}()
	return started, finish, r
}

func TestRunOnceNeverRunsOnLostGrant(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	sA, link := cutSession(t, c, 3*time.Second)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.Enqueued && err == nil {
			link.Cut() // the grant's answer came; nothing more gets through
		}
		return err
	}, sA)
	name, id := embedtest.UniqueName(t, "test"), "2026-12-03"
	var ranA atomic.Int32
	resA := make(chan error, 1)
	go func() {
		resA <- etcdlock.NewMutex(sA, name).RunOnce(context.Background(), id, func(context.Context, *etcdlock.Lock) error {
			ranA.Add(1)
			return nil
		})
	}()
	awaitLoss(t, sA)
	var errA error
	select {
	case errA = <-resA:
	case <-time.After(10 * time.Second):
		t.Error("RunOnce did not end with its session while etcd was unreachable")
	}

	// B runs the same id; A's lease expires in etcd meanwhile.
	started, finish, resB := runOnceUntil(t, locktest.OpenSession(t, c.TestClient(t)), name, id)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("B's run never started")
	}
	link.Restore()
	if errA == nil {
		select {
		case errA = <-resA:
		case <-time.After(20 * time.Second):
			t.Fatal("A's RunOnce never returned")
		}
	}
	if n := ranA.Load(); n != 0 {
		t.Errorf("A ran fn %d times on a grant it had lost, while B's run was in progress", n)
	}
	close(finish)
	if err := <-resB; err != nil {
		t.Fatalf("B: %v", err)
	}
	if !errors.Is(errA, etcdlock.ErrNotHeld) || !errors.Is(errA, etcdlock.ErrSessionExpired) {
		t.Fatalf("A: %v; want ErrNotHeld and ErrSessionExpired", errA)
	}
}

// TestProclaimEndsWithTerm: a leader's link is cut, and a Proclaim with no
// deadline of its own returns ErrNotHeld with the loss once the session is
// lost, while etcd is still unreachable: whether it was waiting for its
// guarded write, or (after an earlier Proclaim timed out) for the read of
// its key that must come first.
func TestProclaimEndsWithTerm(t *testing.T) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	c := embedtest.Start(t)
	for _, afterTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("after a timeout %v", afterTimeout), func(t *testing.T) {
			s, link := cutSession(t, c, 3*time.Second)
			lead, err := etcdlock.NewElection(s, embedtest.UniqueName(t, "test")).Campaign(embedtest.Context(t, 30*time.Second), "a")
			if err != nil {
				t.Fatal(err)
			}
			link.Cut()
			if afterTimeout {
				short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				err = lead.Proclaim(short, "b")
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Proclaim over a cut link: %v, want its deadline", err)
				}
			}
			res := make(chan error, 1)
			go func() { res <- lead.Proclaim(context.Background(), "c") }()
			awaitLoss(t, s)
			select {
			case err = <-res:
			case <-time.After(10 * time.Second):
				t.Fatal("Proclaim did not end with the term while etcd was unreachable")
			}
			if !errors.Is(err, etcdlock.ErrNotHeld) || !errors.Is(err, etcdlock.ErrSessionExpired) {
				t.Fatalf("Proclaim after the term ended: %v; want ErrNotHeld and ErrSessionExpired", err)
			}
		})
	}
}

// TestOnceNeedsAnExclusiveGrant: Completed and MarkCompleted refuse a shared grant (a
// semaphore of more than one, a reader), whose holders run at once, with
// ErrInvalidArgument and without writing a record; an exclusive grant of
// each kind has them.
func TestOnceNeedsAnExclusiveGrant(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	ctx := embedtest.Context(t, 30*time.Second)
	for _, tc := range []struct {
		kind   string
		take   func(name string) (*etcdlock.Lock, error)
		shared bool
	}{
		{"semaphore of 2", func(n string) (*etcdlock.Lock, error) { return etcdlock.NewSemaphore(s, n, 2).Acquire(ctx) }, true},
		{"reader", func(n string) (*etcdlock.Lock, error) { return etcdlock.NewRWMutex(s, n).RLock(ctx) }, true},
		{"semaphore of 1", func(n string) (*etcdlock.Lock, error) { return etcdlock.NewSemaphore(s, n, 1).Acquire(ctx) }, false},
		{"writer", func(n string) (*etcdlock.Lock, error) { return etcdlock.NewRWMutex(s, n).Lock(ctx) }, false},
		{"mutex", func(n string) (*etcdlock.Lock, error) { return etcdlock.NewMutex(s, n).Lock(ctx) }, false},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			l, err := tc.take(name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Unlock(ctx) })
			done, derr := l.Completed(ctx, "1")
			merr := l.MarkCompleted(ctx, "1")
			if tc.shared {
				if !errors.Is(derr, etcdlock.ErrInvalidArgument) || !errors.Is(merr, etcdlock.ErrInvalidArgument) {
					t.Fatalf("Completed: %v, MarkCompleted: %v; want ErrInvalidArgument", derr, merr)
				}
				if resp, err := cli.Get(ctx, layout.CompletionKey(name), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
					t.Fatalf("a record was written for a shared grant (%v)", err)
				}
				return
			}
			if derr != nil || done || merr != nil {
				t.Fatalf("Done: %v, %v, MarkCompleted: %v; want false, nil, nil", done, derr, merr)
			}
			if done, err := l.Completed(ctx, "1"); err != nil || !done {
				t.Fatalf("Completed after MarkCompleted: %v, %v; want true", done, err)
			}
		})
	}
}
