package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

func TestLostGrant(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	tests := []struct {
		name   string
		break_ func(s *etcdlock.Session, l *etcdlock.Lock) error
		cause  error
	}{
		{"lease revoked", func(s *etcdlock.Session, _ *etcdlock.Lock) error { _, err := cli.Revoke(ctx, s.Lease()); return err }, etcdlock.ErrSessionExpired},
		{"key deleted", func(_ *etcdlock.Session, l *etcdlock.Lock) error { _, err := cli.Delete(ctx, l.Key()); return err }, etcdlock.ErrLockLost},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := locktest.OpenSession(t, cli)
			l := mustLock(t, etcdlock.NewMutex(s, embedtest.UniqueName(t, "test")))
			lctx := l.Context()
			if err := tc.break_(s, l); err != nil {
				t.Fatal(err)
			}
			select {
			case <-lctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Lock.Context not canceled")
			}
			if cause := context.Cause(lctx); !errors.Is(cause, tc.cause) {
				t.Fatalf("cause %v, want %v", cause, tc.cause)
			}
			if err := l.Unlock(ctx); !errors.Is(err, etcdlock.ErrNotHeld) || !errors.Is(err, tc.cause) {
				t.Fatalf("unlock: %v, want ErrNotHeld and %v", err, tc.cause)
			}
			if tc.cause == etcdlock.ErrSessionExpired {
				<-s.Done()
				if !errors.Is(s.Err(), etcdlock.ErrSessionExpired) {
					t.Fatalf("session err %v", s.Err())
				}
			}
		})
	}
}

func TestLostWhileWaiting(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
	defer holder.Unlock(ctx)
	s := locktest.OpenSession(t, cli)
	errc := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(s, name).Lock(ctx)
		errc <- err
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	keys := keysUnder(t, cli, name)
	for _, k := range keys {
		if k != holder.Key() {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case err := <-errc:
		if !errors.Is(err, etcdlock.ErrLockLost) {
			t.Fatalf("waiting Lock after its key was deleted: %v, want ErrLockLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting Lock did not notice its key was deleted")
	}
}

func TestCompactionDuringWait(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(locktest.OpenSession(t, cli), name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	for i := 0; i < 20; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s-filler", name), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= holder.Token() {
		t.Fatalf("token %d not above %d", l.Token(), holder.Token())
	}
	// The grant's own-key watch starts at its create revision + 1, which is
	// now compacted: deleting the key must still be noticed.
	lctx := l.Context()
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), etcdlock.ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(lctx))
	}
}

// TestNoGrantAfterValidityRanOut: a grant decided after the session's
// validity clock ran out (an answer that came late, a process paused between
// the answer and the decision) is refused with ErrSessionExpired, and its key
// goes with the lease the session then revokes: the holder could not have
// known the lease still lived.
func TestNoGrantAfterValidityRanOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		point testhook.Point // where the clock runs out
		acq   func(m *etcdlock.Mutex, ctx context.Context) (*etcdlock.Lock, error)
		queue bool // wait behind a holder of another session
	}{
		{"Lock of a free lock", testhook.Enqueued, (*etcdlock.Mutex).Lock, false},
		{"TryLock", testhook.Enqueued, (*etcdlock.Mutex).TryLock, false},
		{"Lock after a hand-off", testhook.HandoffRead, (*etcdlock.Mutex).Lock, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := shared.TestClient(t)
			// A long TTL: no keepalive acknowledgement moves the clock
			// forward again between the hook and the decision.
			s := locktest.OpenSession(t, cli, etcdlock.WithTTL(time.Minute))
			name := embedtest.UniqueName(t, "test")
			ctx := embedtest.Context(t, 30*time.Second)
			var holder *etcdlock.Lock
			released := context.Background() // never done: no hand-off to wait for
			if tc.queue {
				holder = mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
				released = holder.Context()
			}
			var ran atomic.Bool
			hook := runOutClockHook(s, tc.point, tc.queue, released, &ran)
			setHook(t, hook, s)
			res := make(chan error, 1)
			go func() {
				l, err := tc.acq(etcdlock.NewMutex(s, name), ctx)
				if err == nil {
					err = fmt.Errorf("granted %s after the validity clock ran out", l.Key())
				}
				res <- err
			}()
			if holder != nil {
				waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(keysUnder(t, cli, name)) == 2 })
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-res; !errors.Is(err, etcdlock.ErrSessionExpired) {
				t.Fatalf("got %v; want ErrSessionExpired", err)
			}
			if !ran.Load() {
				t.Fatal("the clock was never run out")
			}
			// The session revokes its lease at once, best effort (a second
			// at most); at worst the key goes when the lease's TTL runs out.
			waitFor(t, 75*time.Second, "the refused grant's key to go with the lease", func() bool { return len(keysUnder(t, cli, name)) == 0 })
		})
	}
}

// runOutClockHook returns a test hook that runs s's validity clock out the
// first time point is reached (with queue, only after released is done).
func runOutClockHook(s *etcdlock.Session, point testhook.Point, queue bool, released context.Context, ran *atomic.Bool) func(testhook.Point, error) error {
	return func(p testhook.Point, err error) error {
		// A hand-off read comes after the holder's release (a read
		// when the predecessor watch starts does not count).
		if p == point && (!queue || released.Err() != nil) && !ran.Swap(true) {
			testhook.RunOutClock(s)
		}
		return err
	}
}
