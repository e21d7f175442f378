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

// TestBreak: Break deletes exactly the grant of the token it is given: the
// holder's Context ends with ErrLockLost and the next waiter is granted; a
// second Break of that token, and a Break of a waiter's token, fail with
// ErrNotHeld and change nothing.
func TestBreak(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	name := embedtest.UniqueName(t, "test")
	a, b := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	held, err := etcdlock.NewMutex(a, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := lockAsync(ctx, etcdlock.NewMutex(b, name))
	waitFor(t, 30*time.Second, "the waiter's key", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil {
		t.Fatal(err)
	}
	waiter := st.Waiters[0].Token
	if err := etcdlock.Break(ctx, cli, name, waiter); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("Break of a waiter's token: %v, want ErrNotHeld", err)
	}
	if err := etcdlock.Break(ctx, cli, name, held.Token()); err != nil {
		t.Fatalf("Break of the holder's token: %v", err)
	}
	<-held.Context().Done()
	if cause := context.Cause(held.Context()); !errors.Is(cause, etcdlock.ErrLockLost) {
		t.Fatalf("the broken holder's Context ended with %v, want ErrLockLost", cause)
	}
	got := <-next
	if got.err != nil || got.l.Token() != waiter {
		t.Fatalf("the waiter after a Break: token %v, %v; want granted with token %d", got.l, got.err, waiter)
	}
	if err := etcdlock.Break(ctx, cli, name, held.Token()); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("a second Break of a broken grant: %v, want ErrNotHeld", err)
	}
	if got.l.Context().Err() != nil || a.Err() != nil {
		t.Fatalf("a Break touched more than its grant: new holder %v, broken holder's session %v", got.l.Context().Err(), a.Err())
	}
}

// TestBreakBadInput: bad arguments get an error wrapping the sentinel and
// delete nothing.
func TestBreakBadInput(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	l, err := etcdlock.NewMutex(locktest.OpenSession(t, cli), name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		err  error
		call func() error
	}{
		{"nil client", etcdlock.ErrInvalidArgument, func() error { return etcdlock.Break(ctx, nil, name, l.Token()) }},
		{"token 0", etcdlock.ErrInvalidArgument, func() error { return etcdlock.Break(ctx, cli, name, 0) }},
		{"empty name", etcdlock.ErrInvalidName, func() error { return etcdlock.Break(ctx, cli, "", l.Token()) }},
		{"another name", etcdlock.ErrNotHeld, func() error { return etcdlock.Break(ctx, cli, name+"-other", l.Token()) }},
		{"an unknown token", etcdlock.ErrNotHeld, func() error { return etcdlock.Break(ctx, cli, name, l.Token()+1000) }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.err) {
				t.Fatalf("Break with %s: %v, want %v", tc.what, err, tc.err)
			}
			var e *etcdlock.Error
			if !errors.As(err, &e) || e.Op != "break" {
				t.Fatalf("Break with %s: %v, want an *Error of op break", tc.what, err)
			}
			if keys := keysUnder(t, cli, name); len(keys) != 1 || l.Context().Err() != nil {
				t.Fatalf("after Break with %s: keys %v, holder's Context %v; want the grant intact", tc.what, keys, l.Context().Err())
			}
		})
	}
}
