package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestRunReleasesOnPanic: a panic in Mutex.Run's or Election.Run's
// function, recovered by the caller, must not leave the lock held (or the
// leadership kept) for the session's life: the grant is released (the
// term resigned) before the panic reaches the caller, and the next holder
// (or leader), queued behind on another session, is granted at once.
func TestRunReleasesOnPanic(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, s *etcdlock.Session, name string, fn func()) error
		next func(ctx context.Context, s *etcdlock.Session, name string) error
	}{
		{"Mutex.Run", func(ctx context.Context, s *etcdlock.Session, name string, fn func()) error {
			return etcdlock.NewMutex(s, name).Run(ctx, func(context.Context, *etcdlock.Lock) error { fn(); return nil })
		}, func(ctx context.Context, s *etcdlock.Session, name string) error {
			_, err := etcdlock.NewMutex(s, name).Lock(ctx)
			return err
		}},
		{"Election.Run", func(ctx context.Context, s *etcdlock.Session, name string, fn func()) error {
			return etcdlock.NewElection(s, name).Run(ctx, "a", func(context.Context) error { fn(); return nil })
		}, func(ctx context.Context, s *etcdlock.Session, name string) error {
			_, err := etcdlock.NewElection(s, name).Campaign(ctx, "b")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := embedtest.Context(t, time.Minute)
			name := embedtest.UniqueName(t, "test")
			started, release := make(chan struct{}), make(chan struct{})
			panicked := make(chan any, 1)
			go func() {
				defer func() { panicked <- recover() }()
				_ = tc.run(ctx, locktest.OpenSession(t, shared.TestClient(t)), name, func() {
					close(started)
					<-release
					panic("fn failed badly")
				})
			}()
			<-started
			next := make(chan error, 1)
			go func() {
				next <- tc.next(embedtest.Context(t, 30*time.Second), locktest.OpenSession(t, shared.TestClient(t)), name)
			}()
			waitKeys(t, name, 2)
			close(release)
			if p := <-panicked; p != "fn failed badly" {
				t.Fatalf("the caller recovered %v, want the function's panic", p)
			}
			select {
			case err := <-next:
				if err != nil {
					t.Fatalf("the next in line: %v", err)
				}
			case <-time.After(time.Second):
				t.Fatal("the next in line was not granted within a second of the panic")
			}
		})
	}
}

// waitKeys waits until name's queue holds n keys.
func waitKeys(t *testing.T, name string, n int) {
	t.Helper()
	ctx, cli := embedtest.Context(t, 30*time.Second), shared.TestClient(t)
	for {
		st, err := etcdlock.Describe(ctx, cli, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders)+len(st.Waiters) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("name %s never had %d keys", name, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
