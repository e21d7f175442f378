package etcdlock_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// attackGrantsRunKinds are Mutex.Run and Election.Run with fn.
var attackGrantsRunKinds = []struct {
	name string
	run  func(ctx context.Context, s *etcdlock.Session, name string, fn func(ctx context.Context)) error
}{
	{"Mutex.Run", func(ctx context.Context, s *etcdlock.Session, name string, fn func(context.Context)) error {
		return etcdlock.NewMutex(s, name).Run(ctx, func(ctx context.Context, _ *etcdlock.Lock) error { fn(ctx); return nil })
	}},
	{"Election.Run", func(ctx context.Context, s *etcdlock.Session, name string, fn func(context.Context)) error {
		return etcdlock.NewElection(s, name).Run(ctx, "a", func(ctx context.Context) error { fn(ctx); return nil })
	}},
}

// runRecovering runs f in a goroutine and returns what it recovered
// (goexit: it ended with runtime.Goexit).
func runRecovering(f func()) (rec any, goexit bool) {
	done := make(chan struct{})
	normal := false
	go func() {
		defer close(done)
		defer func() {
			if !normal {
				rec = recover()
				goexit = rec == nil
			}
		}()
		f()
		normal = true
	}()
	<-done
	return rec, goexit
}

// TestAttackRunGoexit: fn ends with runtime.Goexit (as t.FailNow in a
// test's fn would): Run releases before the goroutine ends.
func TestAttackRunGoexit(t *testing.T) {
	for _, k := range attackGrantsRunKinds {
		t.Run(k.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			s := locktest.OpenSession(t, shared.TestClient(t))
			ctx := embedtest.Context(t, 30*time.Second)
			_, goexit := runRecovering(func() {
				_ = k.run(ctx, s, name, func(context.Context) { runtime.Goexit() })
			})
			if !goexit {
				t.Fatal("want the goroutine ended by Goexit")
			}
			noKeysLeft(t, shared.TestClient(t), time.Second, name)
		})
	}
}

// TestAttackRunNestedPanic: Run(A)'s fn runs Run(B) (another kind
// inside too), whose fn panics: both are released before the panic
// reaches the caller, and the panic is the original one.
func TestAttackRunNestedPanic(t *testing.T) {
	for _, outer := range attackGrantsRunKinds {
		for _, inner := range attackGrantsRunKinds {
			t.Run(outer.name+"/"+inner.name, func(t *testing.T) {
				a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
				s := locktest.OpenSession(t, shared.TestClient(t))
				ctx := embedtest.Context(t, 30*time.Second)
				rec, _ := runRecovering(func() {
					_ = outer.run(ctx, s, a, func(ctx context.Context) {
						_ = inner.run(ctx, s, b, func(context.Context) { panic("inner") })
					})
				})
				if rec != "inner" {
					t.Fatalf("recovered %v, want the inner panic", rec)
				}
				noKeysLeft(t, shared.TestClient(t), time.Second, a)
				noKeysLeft(t, shared.TestClient(t), time.Second, b)
				if _, err := etcdlock.NewMutex(locktest.OpenSession(t, shared.TestClient(t)), embedtest.UniqueName(t, "test")).TryLock(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestAttackRunPanicAfterLoss: the grant is broken; fn sees its context
// end and panics (and, in a second case, the session is expired first, so
// Run would open a replacement). Nothing stays held, and the panic reaches
// the caller.
func TestAttackRunPanicAfterLoss(t *testing.T) {
	for _, k := range attackGrantsRunKinds {
		for _, expire := range []bool{false, true} {
			t.Run(k.name, func(t *testing.T) {
				name := embedtest.UniqueName(t, "test")
				s := locktest.OpenSession(t, shared.TestClient(t))
				cli := shared.TestClient(t)
				ctx := embedtest.Context(t, 30*time.Second)
				calls := 0
				rec, _ := runRecovering(func() {
					_ = k.run(ctx, s, name, func(fctx context.Context) {
						calls++
						if calls == 1 {
							if expire {
								testhook.Expire(s, etcdlock.ErrSessionExpired, "attackGrants")
							} else {
								st, err := etcdlock.Describe(ctx, cli, name)
								if err != nil || st.Holder == nil {
									panic("describe")
								}
								if err := etcdlock.Break(ctx, cli, name, st.Holder.Token); err != nil {
									panic(err)
								}
							}
							<-fctx.Done()
							panic("after loss")
						}
					})
				})
				if rec != "after loss" {
					t.Fatalf("recovered %v, want the fn's panic", rec)
				}
				noKeysLeft(t, shared.TestClient(t), 3*time.Second, name)
			})
		}
	}
}

// TestAttackRunPanicOnReplacement: the caller's session is lost; Run
// opens a replacement and is granted again on it; fn panics in that second
// term. The replacement's grant is released and the replacement closed.
func TestAttackRunPanicOnReplacement(t *testing.T) {
	for _, k := range attackGrantsRunKinds {
		t.Run(k.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			s := locktest.OpenSession(t, shared.TestClient(t))
			cli := shared.TestClient(t)
			ctx := embedtest.Context(t, 30*time.Second)
			calls := 0
			rec, _ := runRecovering(func() {
				_ = k.run(ctx, s, name, func(fctx context.Context) {
					calls++
					if calls == 1 {
						if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
							panic(err)
						}
						<-fctx.Done()
						return
					}
					panic("second term")
				})
			})
			if rec != "second term" {
				t.Fatalf("recovered %v (calls %d), want the second term's panic", rec, calls)
			}
			noKeysLeft(t, shared.TestClient(t), time.Second, name)
			resp, err := cli.Leases(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d leases in the cluster after the panic", len(resp.Leases))
		})
	}
}
