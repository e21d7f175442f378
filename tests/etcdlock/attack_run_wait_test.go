package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestAttackRunWaitingSessionLost: a plain Mutex.Run waits behind another
// session's grant when its own session is lost (its lease revoked from
// outside). Run does not end (ErrSessionClosed ends Run now; a loss must
// not look like it): it opens a replacement session and is granted once
// the holder releases.
func TestAttackRunWaitingSessionLost(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
	ctx := embedtest.Context(t, 30*time.Second)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc := startRun(t, rctx, etcdlock.NewMutex(s, name))
	waitFor(t, 10*time.Second, "Run's waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "Run's new waiter", func() bool {
		select {
		case err := <-rc.done:
			t.Fatalf("Run ended after its session was lost while it waited: %v", err)
		default:
		}
		return len(keysUnder(t, cli, name)) == 2 && s.Err() != nil
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l := rc.next(t); l.Token() <= holder.Token() {
		t.Fatalf("Run's token %d <= the holder's %d", l.Token(), holder.Token())
	}
	cancel()
	if err := <-rc.done; err != nil {
		t.Fatal(err)
	}
}
