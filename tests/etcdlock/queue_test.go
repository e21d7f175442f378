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
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// TestCancelAtEveryPoint cancels Lock's ctx at each point of an acquisition
// (test hooks make the timing certain) and checks that Lock fails with the
// ctx's error and leaves no key behind, and that the queue still works.
func TestCancelAtEveryPoint(t *testing.T) {
	cli := shared.TestClient(t)
	holderSession := locktest.OpenSession(t, cli)
	for _, tc := range []struct {
		name  string
		point testhook.Point
		fake  bool // the Txn applied, but the client saw the ctx end (unknown outcome)
	}{
		{"before enqueue", testhook.BeforeEnqueue, false},
		{"during enqueue (applied, answer lost)", testhook.Enqueued, true},
		{"right after enqueue", testhook.Enqueued, false},
		{"during the wait", testhook.Waiting, false},
		{"during the hand-off read", testhook.HandoffRead, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			ctx := embedtest.Context(t, 30*time.Second)
			holder := mustLock(t, etcdlock.NewMutex(holderSession, name))
			s := locktest.OpenSession(t, cli)
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var fired atomic.Bool
			hook := cancelAtHook(lctx, cancel, tc.point, tc.fake, holder, &fired)
			setHook(t, hook, s)
			errc := make(chan error, 1)
			go func() {
				_, err := etcdlock.NewMutex(s, name).Lock(lctx)
				errc <- err
			}()
			if tc.point == testhook.HandoffRead {
				waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			err := <-errc
			clearHook(s)
			if !fired.Load() {
				t.Fatalf("hook point never reached (Lock: %v)", err)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock: %v, want context.Canceled", err)
			}
			_ = holder.Unlock(ctx)
			waitFor(t, 2*time.Second, "no key left", func() bool { return len(keysUnder(t, cli, name)) == 0 })
			l, err := etcdlock.NewMutex(s, name).TryLock(ctx)
			if err != nil {
				t.Fatalf("the lock is not free afterwards: %v", err)
			}
			_ = l.Unlock(ctx)
		})
	}
}

// cancelAtHook returns a test hook that cancels the Lock's ctx (lctx) the
// first time point is reached (a hand-off read only after holder's
// release); with fake, it also reports the ctx's error as if the applied
// Txn's answer were lost.
func cancelAtHook(lctx context.Context, cancel context.CancelFunc, point testhook.Point, fake bool, holder *etcdlock.Lock, fired *atomic.Bool) func(testhook.Point, error) error {
	return func(p testhook.Point, err error) error {
		if p != point || fired.Load() {
			return err
		}
		if p == testhook.HandoffRead && !fired.Load() {
			// Only the waiter's reads, after the holder's release.
			if holder.Context().Err() == nil {
				return err
			}
		}
		fired.Store(true)
		cancel()
		if fake {
			return lctx.Err()
		}
		return err
	}
}
