package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestHolderIdentity: holders that share one session show the identities
// their contexts carry (the session's when none), for Lock, TryLock and
// LockAll; a blank identity is ErrInvalidArgument.
func TestHolderIdentity(t *testing.T) {
	s := locktest.OpenSession(t, shared.TestClient(t), etcdlock.WithIdentity("server"))
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	as := func(id string) context.Context {
		c, err := etcdlock.WithHolderIdentity(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	m := etcdlock.NewMutex(s, name)
	first, err := m.TryLock(as("client-1"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	go func() { l, err := m.Lock(as("client-2")); got <- err; <-first.Context().Done(); _ = unlockNil(ctx, l) }()
	go func() { ls, err := etcdlock.LockAll(ctx, s, name); got <- err; _ = unlockSet(ctx, ls) }()
	waitFor(t, 10*time.Second, "two waiters", func() bool { return len(keysUnder(t, s.Client(), name)) == 3 })
	st, err := etcdlock.Describe(ctx, s.Client(), name)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{st.Holder.Identity, st.Waiters[0].Identity, st.Waiters[1].Identity}
	want := map[string]bool{"client-2": true, "server": true}
	if ids[0] != "client-1" || !want[ids[1]] || !want[ids[2]] || ids[1] == ids[2] {
		t.Fatalf("identities %v; want client-1 holding, client-2 and server waiting", ids)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"", "  "} {
		if _, err := etcdlock.WithHolderIdentity(ctx, id); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Fatalf("WithHolderIdentity(%q): %v", id, err)
		}
	}
}

func unlockNil(ctx context.Context, l *etcdlock.Lock) error {
	if l == nil {
		return nil
	}
	return l.Unlock(ctx)
}

func unlockSet(ctx context.Context, ls *etcdlock.Locks) error {
	if ls == nil {
		return nil
	}
	return ls.Unlock(ctx)
}
