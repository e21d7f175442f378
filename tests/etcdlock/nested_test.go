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

// TestNestedLockIsAnError: inside Run's fn, a Lock (and every other
// acquisition of the name by the same session) with fn's context, or a
// context derived from it, fails at once with ErrWouldDeadlock and writes
// nothing; the same Lock from another goroutine with an unrelated context
// waits and is granted after the release.
func TestNestedLockIsAnError(t *testing.T) {
	s := locktest.OpenSession(t, shared.TestClient(t))
	other := locktest.OpenSession(t, s.Client())
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	m := etcdlock.NewMutex(s, name)
	acquisitions := nestedAcquisitions(s, name)
	granted := make(chan etcdlock.Token, 1)
	err := m.Run(ctx, func(fctx context.Context, l *etcdlock.Lock) error {
		derived, cancel := context.WithTimeout(fctx, 20*time.Second)
		defer cancel()
		for _, a := range acquisitions {
			t.Run(a.what, func(t *testing.T) {
				start := time.Now()
				err := a.take(derived)
				if !errors.Is(err, etcdlock.ErrWouldDeadlock) {
					t.Fatalf("%s inside fn: %v, want ErrWouldDeadlock", a.what, err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("%s took %v to fail", a.what, d)
				}
			})
		}
		if keys := keysUnder(t, s.Client(), name); len(keys) != 1 {
			t.Errorf("keys under the name: %v, want the grant's only", keys)
		}
		// Not nested: another goroutine, an unrelated ctx, the same session.
		go func() {
			l2, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				granted <- 0
				return
			}
			granted <- l2.Token()
			_ = l2.Unlock(ctx)
		}()
		waitFor(t, 10*time.Second, "the other goroutine's waiter", func() bool { return len(keysUnder(t, s.Client(), name)) == 2 })
		// Another session with fn's context is not nested either: TryLock
		// says locked.
		if _, err := etcdlock.NewMutex(other, name).TryLock(fctx); !errors.Is(err, etcdlock.ErrLocked) {
			t.Errorf("another session's TryLock with fn's ctx: %v, want ErrLocked", err)
		}
		if got, _ := etcdlock.LockFromContext(derived); got != l {
			t.Error("LockFromContext of a derived context is not the grant")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok := <-granted; tok == 0 {
		t.Fatal("the other goroutine's Lock failed")
	}
	if _, ok := etcdlock.LockFromContext(ctx); ok {
		t.Fatal("a plain context carries a grant")
	}
}

// acquisition is one way to acquire a name, for TestNestedLockIsAnError.
type acquisition struct {
	what string
	take func(ctx context.Context) error
}

// nestedAcquisitions returns every acquisition of name on s that a grant
// of name carried by ctx makes ErrWouldDeadlock.
func nestedAcquisitions(s *etcdlock.Session, name string) []acquisition {
	m := etcdlock.NewMutex(s, name)
	rw := etcdlock.NewRWMutex(s, name)
	return []acquisition{
		{"Lock", func(ctx context.Context) error { _, err := m.Lock(ctx); return err }},
		{"TryLock", func(ctx context.Context) error { _, err := m.TryLock(ctx); return err }},
		{"Run", func(ctx context.Context) error {
			return m.Run(ctx, func(context.Context, *etcdlock.Lock) error { return nil })
		}},
		{"LockAll", func(ctx context.Context) error { _, err := etcdlock.LockAll(ctx, s, name+"/x", name); return err }},
		{"TryLockAll", func(ctx context.Context) error { _, err := etcdlock.TryLockAll(ctx, s, name); return err }},
		{"RLock", func(ctx context.Context) error { _, err := rw.RLock(ctx); return err }},
		{"RWMutex.Lock", func(ctx context.Context) error { _, err := rw.Lock(ctx); return err }},
	}
}

// TestNestedInRunOnce: RunOnce's fn gets a context that carries its grant:
// a Lock of the name with it is ErrWouldDeadlock.
func TestNestedInRunOnce(t *testing.T) {
	s := locktest.OpenSession(t, shared.TestClient(t))
	name := embedtest.UniqueName(t, "test")
	m := etcdlock.NewMutex(s, name)
	ctx := embedtest.Context(t, 30*time.Second)
	err := m.RunOnce(ctx, "1", func(fctx context.Context, l *etcdlock.Lock) error {
		if got, ok := etcdlock.LockFromContext(fctx); !ok || got != l {
			t.Errorf("fn's context carries %v, %v; want its grant", got, ok)
		}
		_, err := m.Lock(fctx)
		if !errors.Is(err, etcdlock.ErrWouldDeadlock) {
			t.Errorf("Lock inside RunOnce's fn: %v, want ErrWouldDeadlock", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
