package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// TestAttackLockAllCanceledOnCutLinkReturns: LockAll of 8 names waits for
// the last one's holder when its link is cut and its ctx canceled. It must
// return about as soon as a lone Lock does (one attempt, AttemptTimeout, to
// delete its keys; the reaper does the rest), not once per name: before,
// abandonAll deleted the keys one after another, each bounded by
// AttemptTimeout, and LockAll returned 14 s after the cancel. Once the link
// is back, no key of the set is left.
func TestAttackLockAllCanceledOnCutLinkReturns(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	direct := c.TestClient(t)
	s, link := cutSession(t, c, 30*time.Second)
	var names []string
	for i := range 8 {
		names = append(names, embedtest.UniqueName(t, fmt.Sprint("n", i)))
	}
	last := names[len(names)-1]
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, direct), last))
	ctx, cancel := context.WithCancel(embedtest.Context(t, time.Minute))
	defer cancel()
	res := make(chan error, 1)
	go func() {
		ls, err := etcdlock.LockAll(ctx, s, names...)
		if err == nil {
			err = fmt.Errorf("held %d names", len(ls.All()))
		}
		res <- err
	}()
	waitFor(t, 10*time.Second, "LockAll queued", func() bool { return len(keysUnder(t, direct, last)) == 2 })
	time.Sleep(200 * time.Millisecond) // it watches the holder's key
	link.Cut()
	start := time.Now()
	cancel()
	err := <-res
	took := time.Since(start)
	t.Logf("LockAll returned %v after the cancel: %v", took, err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("LockAll: %v, want context.Canceled", err)
	}
	if limit := testhook.AttemptTimeout + 1500*time.Millisecond; took > limit {
		t.Errorf("LockAll returned %v after its ctx ended on a cut link, want at most %v", took, limit)
	}
	link.Restore()
	if err := holder.Unlock(embedtest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, direct, 15*time.Second, names...)
}
