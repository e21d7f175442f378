package etcdlock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// longHold is how long TestSecurityLongSession holds its lock: more than
// two lifetimes of the 10 s auth token, so that the keepalive stream must
// outlive its token at least twice (25 s), or the full 60 s with
// ETCDLOCK_LONG=1. Both variants run in parallel, so the test takes about
// this long.
func longHold() time.Duration {
	if os.Getenv("ETCDLOCK_LONG") == "1" {
		return 60 * time.Second
	}
	return 25 * time.Second
}

// TestSecurityLongSession: with auth tokens that live 10 s (simple tokens,
// which expire 10 s after their last use on each member, and JWTs, which
// expire 10 s after they were issued however much they are used), a
// non-root session of TTL 3 s holding a lock stays live for longHold, its
// keepalives on the stream pinned to the leader, and its client still works
// afterwards.
func TestSecurityLongSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []embedtest.Option
	}{
		{"simple", []embedtest.Option{embedtest.WithAuthTokenTTL(10 * time.Second)}},
		{"jwt", []embedtest.Option{embedtest.WithJWT(), embedtest.WithAuthTokenTTL(10 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := startSecure(t, tc.opts...)
			ctx := embedtest.Context(t, longHold()+2*time.Minute)
			s := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/long"), etcdlock.WithTTL(3*time.Second))
			l := mustLock(t, etcdlock.NewMutex(s, "team-a/long"))
			auths0, ka0 := sc.calls(sc.authCall), sc.calls(sc.leaseKeepAlive)
			start := time.Now()
			minLeft := holdLong(t, s, l, start)
			logins := sc.calls(sc.authCall) - auths0
			t.Logf("held %v; %d keepalives, %d logins meanwhile; smallest validity left %v (TTL %v)",
				time.Since(start).Round(time.Millisecond), sc.calls(sc.leaseKeepAlive)-ka0, logins, minLeft.Round(time.Millisecond), s.TTL())
			if tc.name == "jwt" && logins < 2 {
				// A JWT cannot be renewed: the keepalive stream's token
				// expired at least twice, so its client logged in again.
				t.Errorf("only %d logins in %v with 10 s JWTs: the tokens did not expire as configured", logins, longHold())
			}

			// The lock is still alice's, and her client still works with
			// its token long expired.
			st, err := etcdlock.Describe(ctx, sc.alice, "team-a/long")
			if err != nil {
				t.Fatalf("Describe after the hold: %v", err)
			}
			if st.Holder == nil || st.Holder.Token != l.Token() {
				t.Fatalf("holder after the hold: %+v, want token %d", st.Holder, l.Token())
			}
			if _, err := etcdlock.NewMutex(s, "team-a/long").TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
				t.Errorf("TryLock after the hold: %v, want ErrLocked", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock after the hold: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close after the hold: %v", err)
			}
		})
	}
}

// holdLong holds l (of s) for longHold, failing if the session or the lock
// is lost, and returns the smallest validity left seen on the way.
func holdLong(t *testing.T, s *etcdlock.Session, l *etcdlock.Lock, start time.Time) time.Duration {
	t.Helper()
	minLeft := time.Hour
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.After(longHold())
	for {
		select {
		case <-end:
			return minLeft
		case <-s.Done():
			t.Fatalf("session lost after %v: %v (the keepalive stream did not outlive its auth token)", time.Since(start).Round(time.Millisecond), s.Err())
		case <-l.Context().Done():
			t.Fatalf("lock lost after %v: %v", time.Since(start).Round(time.Millisecond), context.Cause(l.Context()))
		case <-tick.C:
			minLeft = min(minLeft, time.Until(s.ValidUntil()))
		}
	}
}

// TestSecurityAuthChange: changing users or roles makes every token older
// than the auth store (etcd then refuses it with "revision of auth store is
// old", an InvalidArgument). A holder's session and a waiter that was
// already waiting survive it, and a waiter that starts afterwards, on the
// same client, queues and is granted.
func TestSecurityAuthChange(t *testing.T) {
	sc := startSecure(t)
	ctx := embedtest.Context(t, 2*time.Minute)
	name := "team-a/change"
	s1 := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/1"), etcdlock.WithTTL(3*time.Second))
	s2 := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/2"), etcdlock.WithTTL(3*time.Second))
	s3 := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/3"), etcdlock.WithTTL(3*time.Second))
	l1 := mustLock(t, etcdlock.NewMutex(s1, name))
	r2 := lockAsync(ctx, etcdlock.NewMutex(s2, name))
	waitFor(t, 30*time.Second, "alice/2 waiting", func() bool {
		st, err := etcdlock.Describe(ctx, sc.root, name)
		return err == nil && len(st.Waiters) == 1
	})

	// The auth store changes twice.
	if _, err := sc.root.UserAdd(ctx, "carol", secret(t, "carol")); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.root.RoleAdd(ctx, "team-c"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	waitFor(t, 30*time.Second, "keepalives acknowledged after the change", func() bool {
		return s1.ValidUntil().After(changed.Add(s1.TTL()))
	})

	r3 := lockAsync(ctx, etcdlock.NewMutex(s3, name)) // a new watch, after the change
	waitFor(t, 30*time.Second, "alice/3 waiting", func() bool {
		st, err := etcdlock.Describe(ctx, sc.root, name)
		return err == nil && len(st.Waiters) == 2
	})
	if err := l1.Unlock(ctx); err != nil {
		t.Fatalf("Unlock alice/1: %v", err)
	}
	got2 := <-r2
	if got2.err != nil {
		t.Fatalf("alice/2, waiting across the change: %v", got2.err)
	}
	if err := got2.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock alice/2: %v", err)
	}
	got3 := <-r3
	if got3.err != nil {
		t.Fatalf("alice/3, queued after the change: %v", got3.err)
	}
	if err := got3.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock alice/3: %v", err)
	}
	for _, s := range []*etcdlock.Session{s1, s2, s3} {
		if err := s.Err(); err != nil {
			t.Errorf("session %s: %v", s.Identity(), err)
		}
	}
}

// lockResult is the outcome of a Lock started by lockAsync.
type lockResult struct {
	l   *etcdlock.Lock
	err error
}

// lockAsync locks m in a goroutine and sends the outcome on the returned
// channel.
func lockAsync(ctx context.Context, m *etcdlock.Mutex) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx)
		ch <- lockResult{l, err}
	}()
	return ch
}

// TestSecurityRevokedRole: once a user's role is revoked, etcd refuses her
// lease renewals (it checks write permission on the lease's keys), so her
// session is lost within its TTL and her lock passes to the next waiter,
// as after a crash.
func TestSecurityRevokedRole(t *testing.T) {
	sc := startSecure(t)
	ctx := embedtest.Context(t, 2*time.Minute)
	name := "team-a/revoked"
	// A second team-a user, whose role stays.
	for _, step := range []func() error{
		func() error { _, err := sc.root.UserAdd(ctx, "anna", sc.alicePW+"-anna"); return err },
		func() error { _, err := sc.root.UserGrantRole(ctx, "anna", "team-a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	anna := sc.clientAs(t, "anna", sc.alicePW+"-anna")
	s := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/1"), etcdlock.WithTTL(3*time.Second))
	l := mustLock(t, etcdlock.NewMutex(s, name))
	next := locktest.OpenSession(t, anna, etcdlock.WithIdentity("anna/1"), etcdlock.WithTTL(3*time.Second))
	granted := make(chan error, 1)
	go func() {
		nl, err := etcdlock.NewMutex(next, name).Lock(ctx)
		if err == nil && nl.Token() <= l.Token() {
			err = errors.New("token did not increase")
		}
		granted <- err
	}()
	waitFor(t, 30*time.Second, "anna waiting", func() bool {
		st, err := etcdlock.Describe(ctx, sc.root, name)
		return err == nil && len(st.Waiters) == 1
	})

	revoked := time.Now()
	if _, err := sc.root.UserRevokeRole(ctx, "alice", "team-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		t.Logf("alice's session lost %v after the revocation: %v", time.Since(revoked).Round(time.Millisecond), s.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("alice's session outlived the revocation of her role")
	}
	// A context's Done closes before its children are canceled: await the lock's own.
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("alice's lock context outlived her session")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, etcdlock.ErrSessionExpired) {
		t.Errorf("alice's lock cause: %v, want ErrSessionExpired", cause)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("anna's Lock: %v", err)
		}
		t.Logf("anna granted %v after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("anna never got the lock")
	}
}
