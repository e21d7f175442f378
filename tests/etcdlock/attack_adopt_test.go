package etcdlock_test

// Attacks on LockAll and TryLockAll when their enqueue Txn's outcome is
// unknown: a lost answer (a test hook) and a Txn held on a cut link and
// delivered late, against real members.

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
	clientv3 "go.etcd.io/etcd/client/v3"
)

// loseAnswer installs on s a hook that reports the first answered enqueue
// Txn as lost (it was applied), after running then; next runs once, at the
// next Enqueued point (the retry's answer). Either may be nil. It returns
// whether the answer was lost.
func loseAnswer(t *testing.T, s *etcdlock.Session, then, next func()) *atomic.Bool {
	var lost, after atomic.Bool
	setHook(t, func(p testhook.Point, err error) error {
		if p != testhook.Enqueued {
			return err
		}
		if err == nil && lost.CompareAndSwap(false, true) {
			if then != nil {
				then()
			}
			return errors.New("test: the Txn's answer was lost")
		}
		if lost.Load() && after.CompareAndSwap(false, true) && next != nil {
			next()
		}
		return err
	}, s)
	return &lost
}

// breakHolder breaks the holder of name.
func breakHolder(t *testing.T, cli *clientv3.Client, name string) {
	ctx := embedtest.Context(t, 10*time.Second)
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil || st.Holder == nil {
		t.Errorf("describe %s: %+v %v", name, st, err)
		return
	}
	if err := etcdlock.Break(ctx, cli, name, st.Holder.Token); err != nil {
		t.Errorf("break %s: %v", name, err)
	}
}

// heldExactly checks that ls holds every name with its only key.
func heldExactly(t *testing.T, cli *clientv3.Client, ls *etcdlock.Locks, names ...string) {
	t.Helper()
	for _, name := range names {
		l := ls.Lock(name)
		keys := keysUnder(t, cli, name)
		if l == nil || len(keys) != 1 || keys[0] != l.Key() {
			t.Errorf("%s: keys %v, want only the set's key of %v", name, keys, l)
			continue
		}
		if l.Context().Err() != nil {
			t.Errorf("%s: the grant already ended: %v", name, context.Cause(l.Context()))
		}
	}
}

// TestAttackLockAllLostAnswerWouldDeadlock: LockAll under the session's own
// grant of one of the names fails with ErrWouldDeadlock and writes nothing,
// also with a hook that loses enqueue answers.
func TestAttackLockAllLostAnswerWouldDeadlock(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
	l := mustLock(t, etcdlock.NewMutex(s, a))
	lost := loseAnswer(t, s, nil, nil)
	for _, try := range []bool{false, true} {
		var err error
		if try {
			_, err = etcdlock.TryLockAll(l.Context(), s, b, a)
		} else {
			_, err = etcdlock.LockAll(l.Context(), s, b, a)
		}
		if !errors.Is(err, etcdlock.ErrWouldDeadlock) {
			t.Errorf("try %v: %v, want ErrWouldDeadlock", try, err)
		}
	}
	if lost.Load() {
		t.Error("an enqueue was sent")
	}
	if ka, kb := keysUnder(t, cli, a), keysUnder(t, cli, b); len(ka) != 1 || ka[0] != l.Key() || len(kb) != 0 {
		t.Errorf("keys A %v, B %v; want only the held key of A", ka, kb)
	}
}

// TestAttackLockAllAdoptedSetEnds: LockAll(A, B) adopts its applied Txn
// (answer lost) and waits for B's holder; then A's adopted key is broken,
// the session's lease revoked, or ctx canceled, and B's holder unlocks.
// LockAll fails with that cause and no key of the set is left.
func TestAttackLockAllAdoptedSetEnds(t *testing.T) {
	cli := shared.TestClient(t)
	for _, tc := range []struct {
		name string
		want error
	}{
		{"break A", etcdlock.ErrLockLost},
		{"revoke", etcdlock.ErrSessionExpired},
		{"cancel", context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(embedtest.Context(t, 30*time.Second))
			defer cancel()
			a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
			holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), b))
			s := locktest.OpenSession(t, shared.TestClient(t))
			retried := make(chan struct{})
			lost := loseAnswer(t, s, nil, func() { close(retried) })
			res := make(chan error, 1)
			go func() {
				ls, err := etcdlock.LockAll(ctx, s, a, b)
				if err == nil {
					_ = ls.Unlock(context.Background())
				}
				res <- err
			}()
			<-retried
			waitFor(t, 10*time.Second, "LockAll waiting behind B's holder", func() bool { return len(keysUnder(t, cli, b)) == 2 })
			time.Sleep(100 * time.Millisecond) // the adopted waiters watch
			switch tc.name {
			case "break A":
				breakHolder(t, cli, a)
			case "revoke":
				if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
					t.Fatal(err)
				}
			case "cancel":
				cancel()
			}
			// A break is seen once B is granted (confirmAll).
			if err := holder.Unlock(embedtest.Context(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			err := <-res
			if !lost.Load() {
				t.Fatalf("the hook never fired (LockAll: %v)", err)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("LockAll: %v, want %v", err, tc.want)
			}
			noKeysLeft(t, cli, 15*time.Second, a, b)
		})
	}
}

// TestAttackLockAllCanceledAtAdoption: ctx ends as the retry's answer
// (which finds the first attempt applied) arrives: LockAll fails and leaves
// no key, for LockAll and TryLockAll.
func TestAttackLockAllCanceledAtAdoption(t *testing.T) {
	cli := shared.TestClient(t)
	for _, try := range []bool{false, true} {
		ctx, cancel := context.WithCancel(embedtest.Context(t, 30*time.Second))
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		s := locktest.OpenSession(t, shared.TestClient(t))
		lost := loseAnswer(t, s, nil, cancel)
		var err error
		if try {
			_, err = etcdlock.TryLockAll(ctx, s, a, b)
		} else {
			_, err = etcdlock.LockAll(ctx, s, a, b)
		}
		cancel()
		clearHook(s)
		if !lost.Load() {
			t.Fatalf("try %v: the hook never fired (%v)", try, err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("try %v: %v, want context.Canceled", try, err)
		}
		noKeysLeft(t, cli, 15*time.Second, a, b)
	}
}

// TestAttackTryLockAllLostAnswer: TryLockAll's applied Txn loses its
// answer. With both names free it holds both, with exactly the adopted
// keys; with A's key broken before the retry it fails and leaves no key.
func TestAttackTryLockAllLostAnswer(t *testing.T) {
	cli := shared.TestClient(t)
	for _, brk := range []bool{false, true} {
		ctx := embedtest.Context(t, 30*time.Second)
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		s := locktest.OpenSession(t, shared.TestClient(t))
		var then func()
		if brk {
			then = func() { breakHolder(t, cli, a) }
		}
		lost := loseAnswer(t, s, then, nil)
		ls, err := etcdlock.TryLockAll(ctx, s, a, b)
		clearHook(s)
		if !lost.Load() {
			t.Fatalf("broken %v: the hook never fired (%v)", brk, err)
		}
		t.Logf("broken %v: TryLockAll: %v", brk, err)
		if brk {
			if err == nil {
				t.Errorf("TryLockAll with A broken: held %v", ls.All())
				_ = ls.Unlock(ctx)
			}
			noKeysLeft(t, cli, 15*time.Second, a, b)
			continue
		}
		if err != nil {
			t.Fatalf("TryLockAll: %v, want both held", err)
		}
		heldExactly(t, cli, ls, a, b)
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// holdFirstEnqueue installs on s a hook that holds link (delay-then-deliver)
// just before the first enqueue Txn is sent.
// It returns whether it held, and counts the attempts sent.
func holdFirstEnqueue(t *testing.T, s *etcdlock.Session, link *embedtest.Link) (*atomic.Bool, *atomic.Int32) {
	var held atomic.Bool
	var sent atomic.Int32
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.BeforeEnqueue {
			sent.Add(1)
			if held.CompareAndSwap(false, true) {
				link.Hold()
			}
		}
		return err
	}, s)
	return &held, &sent
}

// lockAllTry calls TryLockAll when try is set, else LockAll.
func lockAllTry(ctx context.Context, s *etcdlock.Session, try bool, names ...string) (*etcdlock.Locks, error) {
	if try {
		return etcdlock.TryLockAll(ctx, s, names...)
	}
	return etcdlock.LockAll(ctx, s, names...)
}

// TestAttackLockAllHeldEnqueueDeliveredLate: LockAll's (and TryLockAll's)
// enqueue Txn is held on a cut link; ctx ends, the call fails; then the
// link is restored and the held Txn (and its retries) delivered. No key of
// the set may stay: both names are free again soon, for anyone.
func TestAttackLockAllHeldEnqueueDeliveredLate(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	direct := c.TestClient(t)
	for _, try := range []bool{false, true} {
		s, link := cutSession(t, c, 10*time.Second)
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		held, sent := holdFirstEnqueue(t, s, link)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ls, err := lockAllTry(ctx, s, try, a, b)
		cancel()
		if !held.Load() {
			t.Fatalf("try %v: never held (%v)", try, err)
		}
		t.Logf("try %v: %v (%d attempts)", try, err, sent.Load())
		if err == nil {
			t.Errorf("try %v: held %v through a cut link", try, ls.All())
		}
		time.Sleep(time.Second)
		link.Restore()
		clearHook(s)
		noKeysLeft(t, direct, 15*time.Second, a, b)
		// Nothing late comes back, and anyone can take both names.
		time.Sleep(2 * time.Second)
		other := locktest.OpenSession(t, direct)
		ls2, err := etcdlock.LockAll(embedtest.Context(t, 10*time.Second), other, a, b)
		if err != nil {
			t.Fatalf("try %v: LockAll of another session after the failed one: %v", try, err)
		}
		heldExactly(t, direct, ls2, a, b)
		_ = ls2.Unlock(embedtest.Context(t, 10*time.Second))
	}
}

// TestAttackLockAllHeldEnqueueAdopted: the first enqueue Txn is held on a
// cut link and delivered late, while LockAll (TryLockAll) still retries:
// the retry finds it applied and adopts it. The set is held with exactly
// one key per name. heldB: B is held by another session, unlocked a second
// after the link is back: the adopted set waits for it.
func TestAttackLockAllHeldEnqueueAdopted(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	direct := c.TestClient(t)
	for _, tc := range []struct{ try, heldB bool }{{false, false}, {true, false}, {false, true}} {
		s, link := cutSession(t, c, 10*time.Second)
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		var holder *etcdlock.Lock
		if tc.heldB {
			holder = mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, direct), b))
		}
		held, sent := holdFirstEnqueue(t, s, link)
		go func() {
			time.Sleep(2500 * time.Millisecond)
			link.Restore()
			if holder != nil {
				time.Sleep(time.Second) // the adopted set waits for B
				_ = holder.Unlock(context.Background())
			}
		}()
		ctx := embedtest.Context(t, 30*time.Second)
		ls, err := lockAllTry(ctx, s, tc.try, a, b)
		clearHook(s)
		if !held.Load() {
			t.Fatalf("%+v: never held (%v)", tc, err)
		}
		t.Logf("%+v: %v (%d attempts)", tc, err, sent.Load())
		if err != nil {
			t.Fatalf("%+v: %v, want the set held", tc, err)
		}
		heldExactly(t, direct, ls, a, b)
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		noKeysLeft(t, direct, 15*time.Second, a, b)
	}
}

// TestAttackLockAllLostAnswerThenGone: LockAll's (TryLockAll's) enqueue
// Txn applies and its answer is lost; before the retry the session's lease
// is revoked (the call fails with ErrSessionExpired and leaves no key), or
// both keys are broken (the retry enqueues again: the set is held, with one
// key per name).
func TestAttackLockAllLostAnswerThenGone(t *testing.T) {
	cli := shared.TestClient(t)
	for _, revoke := range []bool{false, true} {
		for _, try := range []bool{false, true} {
			ctx := embedtest.Context(t, 30*time.Second)
			a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
			s := locktest.OpenSession(t, shared.TestClient(t))
			lost := loseAnswer(t, s, func() {
				if revoke {
					if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
						t.Error(err)
					}
					return
				}
				breakHolder(t, cli, a)
				breakHolder(t, cli, b)
			}, nil)
			ls, err := lockAllTry(ctx, s, try, a, b)
			clearHook(s)
			t.Logf("revoke %v, try %v: %v", revoke, try, err)
			if !lost.Load() {
				t.Fatalf("the hook never fired (%v)", err)
			}
			if revoke {
				if !errors.Is(err, etcdlock.ErrSessionExpired) {
					t.Errorf("revoke, try %v: %v, want ErrSessionExpired", try, err)
				}
				noKeysLeft(t, cli, 15*time.Second, a, b)
				continue
			}
			if err != nil {
				t.Errorf("broken, try %v: %v, want the set held", try, err)
				noKeysLeft(t, cli, 15*time.Second, a, b)
				continue
			}
			heldExactly(t, cli, ls, a, b)
			_ = ls.Unlock(ctx)
		}
	}
}

// TestAttackTryLockAllLostRefusal: TryLockAll(A, B) with B held; its
// refused Txn's answer is lost, so the retry must tell a refusal from an
// applied attempt: ErrLocked, no key of its own left, and both names free
// for anyone once B's holder unlocks.
func TestAttackTryLockAllLostRefusal(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), b))
	s := locktest.OpenSession(t, shared.TestClient(t))
	lost := loseAnswer(t, s, nil, nil)
	ls, err := etcdlock.TryLockAll(ctx, s, a, b)
	clearHook(s)
	if !lost.Load() {
		t.Fatalf("the hook never fired (%v)", err)
	}
	if !errors.Is(err, etcdlock.ErrLocked) {
		t.Errorf("TryLockAll with B held: %v (%v), want ErrLocked", err, ls)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, cli, 15*time.Second, a, b)
	ls, err = etcdlock.TryLockAll(ctx, locktest.OpenSession(t, cli), a, b)
	if err != nil {
		t.Fatalf("TryLockAll of another session: %v", err)
	}
	heldExactly(t, cli, ls, a, b)
	_ = ls.Unlock(ctx)
}
