package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestLockAllNeverClaimsABrokenName: LockAll(A, B) is granted A at once and
// waits for B; meanwhile A is broken and another session takes it. When B
// frees, LockAll must not report the set as held: it fails with
// ErrLockLost naming A, and leaves no key of its own on A or B.
func TestLockAllNeverClaimsABrokenName(t *testing.T) {
	ctx := embedtest.Context(t, time.Minute)
	cli := shared.TestClient(t)
	a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
	holderB := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, shared.TestClient(t)), b))
	s := locktest.OpenSession(t, shared.TestClient(t))
	res := make(chan error, 1)
	go func() {
		ls, err := etcdlock.LockAll(ctx, s, a, b)
		if err == nil {
			_ = ls.Unlock(ctx)
		}
		res <- err
	}()
	waitKeys(t, b, 2)
	st, err := etcdlock.Describe(ctx, cli, a)
	if err != nil || st.Holder == nil {
		t.Fatalf("A's state: %+v, %v", st, err)
	}
	if err := etcdlock.Break(ctx, cli, a, st.Holder.Token); err != nil {
		t.Fatal(err)
	}
	other := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, shared.TestClient(t)), a))
	if err := holderB.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-res
	if !errors.Is(err, etcdlock.ErrLockLost) || !strings.Contains(err.Error(), a) {
		t.Fatalf("LockAll with A broken meanwhile: %v, want ErrLockLost naming %s", err, a)
	}
	for _, n := range []string{a, b} {
		st, err := etcdlock.Describe(ctx, cli, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range append(st.Holders, st.Waiters...) {
			if e.Lease == s.Lease() {
				t.Fatalf("a key of the failed LockAll is left on %s: %s", n, e.Key)
			}
		}
	}
	if other.Context().Err() != nil {
		t.Fatalf("A's new holder lost its grant: %v", context.Cause(other.Context()))
	}
}
