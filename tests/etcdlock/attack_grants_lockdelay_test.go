package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// attackGrantsDelayedQueue locks name on a holder session with lock-delay
// delay and returns the holder session.
func attackGrantsHolder(t *testing.T, name string, delay time.Duration) *etcdlock.Session {
	t.Helper()
	holder := locktest.OpenSession(t, shared.TestClient(t), etcdlock.WithLockDelay(delay))
	mustLock(t, etcdlock.NewMutex(holder, name))
	return holder
}

// TestAttackLockDelayLostOnWaiterClose: the holder (lock-delay 4 s) has
// its lease revoked; the first waiter, holding the delay off, has its
// Session closed, which deletes the waiter's key while its lease lives.
// The second waiter must still wait the delay out: the first wrote the
// delay's end into its key when its hold-off began (before, Close's
// deletion carried no pass and the second was granted at once).
func TestAttackLockDelayLostOnWaiterClose(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	const delay = 4 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := attackGrantsHolder(t, name, delay)
	ctx := embedtest.Context(t, 30*time.Second)
	first := locktest.OpenSession(t, cli)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			go func() { _ = first.Close() }() // it leaves during the delay
		}
		return err
	}, first)
	left := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(first, name).Lock(ctx)
		left <- err
	}()
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	got := lockBehind(t, ctx, locktest.OpenSession(t, cli), name, 2)
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := <-left; err == nil {
		t.Fatal("the first waiter was granted; want it to leave")
	} else {
		t.Logf("first waiter: %v", err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(start); d < delay-250*time.Millisecond {
		t.Fatalf("second waiter granted %v after the revoke; want no sooner than the lock-delay %v (the closing waiter lost it)", d.Round(time.Millisecond), delay)
	} else {
		t.Logf("second waiter granted %v after the revoke", d.Round(time.Millisecond))
	}
}

// TestAttackLockDelayChain: three waiters leave one after another, each
// as it starts to hold the delay off (the first from the revoke, the next
// ones from a passed value); the fourth must still wait for the delay's end
// and no longer than about the delay.
func TestAttackLockDelayChain(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	const delay = 3 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := attackGrantsHolder(t, name, delay)
	ctx := embedtest.Context(t, 40*time.Second)
	const leavers = 3
	left := make(chan error, leavers)
	for i := 0; i < leavers; i++ {
		s := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(time.Duration(i+1)*time.Second))
		lctx, leave := context.WithCancel(ctx)
		t.Cleanup(leave)
		setHook(t, func(p testhook.Point, err error) error {
			if p == testhook.HoldOff {
				time.Sleep(200 * time.Millisecond) // a moment into the delay
				leave()
			}
			return err
		}, s)
		go func() {
			_, err := etcdlock.NewMutex(s, name).Lock(lctx)
			left <- err
		}()
		waitFor(t, 10*time.Second, "a waiter", func() bool { return len(keysUnder(t, cli, name)) == i+2 })
	}
	got := lockBehind(t, ctx, locktest.OpenSession(t, cli), name, leavers+1)
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < leavers; i++ {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("a leaver: %v, want context.Canceled", err)
		}
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	d := at.Sub(start)
	t.Logf("last waiter granted %v after the revoke", d.Round(time.Millisecond))
	if d < delay {
		t.Fatalf("granted %v after the revoke; want no sooner than %v", d, delay)
	}
	if d > delay+3*time.Second {
		t.Fatalf("granted %v after the revoke; want about the delay %v", d, delay)
	}
	waitFor(t, 10*time.Second, "no stray key", func() bool { return len(keysUnder(t, cli, name)) == 0 })
}

// TestAttackLockDelayReadersLeaveInTurn: a writer (lock-delay 3 s) holds
// an RWMutex and has its lease revoked; readers R1 and R2 behind it both
// hold the delay off, and a writer W2 waits behind them (watching R2, the
// key right ahead). R2 leaves (passing the delay on); while W2 re-reads
// after R2's deletion (and finds R1 ahead, a new plan), R1 leaves too,
// passing the delay on as well. W2 opens a fresh watch of R1 at the current
// revision and learns of R1's deletion from the created notification's
// read, which carries no deleted value; it must still wait the delay out,
// from R1's value as its re-read saw it (R1 wrote its pass when its
// hold-off began).
func TestAttackLockDelayReadersLeaveInTurn(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	const delay = 3 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 40*time.Second)
	holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
	if _, err := etcdlock.NewRWMutex(holder, name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, r2, w2 := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	r1ctx, leave1 := context.WithCancel(ctx)
	r2ctx, leave2 := context.WithCancel(ctx)
	t.Cleanup(func() { leave1(); leave2() })
	leaveInTurn(t, cli, name, [3]*etcdlock.Session{r1, r2, w2}, leave1, leave2)
	left := make(chan error, 2)
	for i, rc := range []struct {
		s   *etcdlock.Session
		ctx context.Context
	}{{r1, r1ctx}, {r2, r2ctx}} {
		go func() {
			_, err := etcdlock.NewRWMutex(rc.s, name).RLock(rc.ctx)
			left <- err
		}()
		waitFor(t, 10*time.Second, "a reader", func() bool { return len(keysUnder(t, cli, name)) == i+2 })
	}
	got := grantTime(t, func() error { _, err := etcdlock.NewRWMutex(w2, name).Lock(ctx); return err })
	waitFor(t, 10*time.Second, "W2", func() bool { return len(keysUnder(t, cli, name)) == 4 })
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	for range 2 {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("a reader: %v, want context.Canceled", err)
		}
	}
	checkDelayed(t, "W2", at.Sub(start), delay)
}

// checkDelayed checks that who was granted d after the revoke, no sooner
// than delay.
func checkDelayed(t *testing.T, who string, d, delay time.Duration) {
	t.Helper()
	t.Logf("%s granted %v after the revoke", who, d.Round(time.Millisecond))
	if d < delay-250*time.Millisecond {
		t.Fatalf("%s granted %v after the revoke; want no sooner than the lock-delay %v", who, d.Round(time.Millisecond), delay)
	}
}

// TestAttackLockDelayMutexPassMissed: the same gap on a Mutex. Holder A
// (lock-delay 3 s) is revoked; B, first in line, holds the delay off; C
// behind B leaves (nothing to pass); D, which watched C, re-reads and finds
// B ahead; B leaves (passing the delay on) before D's fresh watch of B
// starts. D learns of B's deletion from a read, and must still wait the
// delay out (from B's value as its re-read saw it).
func TestAttackLockDelayMutexPassMissed(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	const delay = 3 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 40*time.Second)
	holder := attackGrantsHolder(t, name, delay)
	var bHolding, cLeft, once atomic.Bool
	b, c, d := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	bctx, leaveB := context.WithCancel(ctx)
	cctx, leaveC := context.WithCancel(ctx)
	t.Cleanup(leaveB)
	t.Cleanup(leaveC)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			bHolding.Store(true)
			cLeft.Store(true)
			leaveC() // C leaves once B holds the delay off
		}
		return err
	}, b)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HandoffRead && cLeft.Load() && once.CompareAndSwap(false, true) {
			leaveB() // D re-reads after C's deletion; B leaves meanwhile
			waitFor(t, 10*time.Second, "B gone", func() bool { return len(keysUnder(t, cli, name)) == 1 })
		}
		return err
	}, d)
	left := make(chan error, 2)
	for i, rc := range []struct {
		s   *etcdlock.Session
		ctx context.Context
	}{{b, bctx}, {c, cctx}} {
		go func() {
			_, err := etcdlock.NewMutex(rc.s, name).Lock(rc.ctx)
			left <- err
		}()
		waitFor(t, 10*time.Second, "a waiter", func() bool { return len(keysUnder(t, cli, name)) == i+2 })
	}
	got := lockBehind(t, ctx, d, name, 3)
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	for range 2 {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("a waiter: %v, want context.Canceled", err)
		}
	}
	dd := at.Sub(start)
	t.Logf("D granted %v after the revoke", dd.Round(time.Millisecond))
	if dd < delay-250*time.Millisecond {
		t.Fatalf("D granted %v after the revoke; want no sooner than the lock-delay %v", dd.Round(time.Millisecond), delay)
	}
}

// TestAttackLockDelayPassOverCutPath: the first waiter's only path to
// etcd is cut (or held: its writes delivered late) as it starts to hold a
// 4 s delay off, and it leaves then: its pass write's outcome is unknown
// and the reaper retries it. The path comes back after 1.5 s. The second
// waiter must wait the delay out (not much longer), and no key of the
// first waiter is left.
func TestAttackLockDelayPassOverCutPath(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	const delay = 4 * time.Second
	c := embedtest.Start(t)
	cli := c.TestClient(t)
	for _, hold := range []bool{false, true} {
		name := embedtest.UniqueName(t, "test")
		holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
		mustLock(t, etcdlock.NewMutex(holder, name))
		ctx := embedtest.Context(t, 40*time.Second)
		first, link := cutSession(t, c, 20*time.Second)
		firstCtx, leave := context.WithCancel(ctx)
		setHook(t, func(p testhook.Point, err error) error {
			if p == testhook.HoldOff {
				if hold {
					link.Hold()
				} else {
					link.Cut()
				}
				leave()
			}
			return err
		}, first)
		left := make(chan error, 1)
		go func() {
			_, err := etcdlock.NewMutex(first, name).Lock(firstCtx)
			left <- err
		}()
		waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
		got := lockBehind(t, ctx, locktest.OpenSession(t, cli), name, 2)
		start := time.Now()
		if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
			t.Fatal(err)
		}
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("first waiter: %v", err)
		}
		time.Sleep(1500*time.Millisecond - time.Since(start))
		link.Restore()
		at := <-got
		if at.IsZero() {
			t.FailNow()
		}
		d := at.Sub(start)
		t.Logf("hold %v: second waiter granted %v after the revoke", hold, d.Round(time.Millisecond))
		if d < delay-250*time.Millisecond || d > delay+4*time.Second {
			t.Errorf("hold %v: granted %v after the revoke; want about the lock-delay %v", hold, d, delay)
		}
		waitFor(t, 15*time.Second, "no key left", func() bool { return len(keysUnder(t, cli, name)) == 0 })
		leave()
	}
}

// TestAttackLockDelayUnweighedPassAfterUnlock: the holder (lock-delay
// 4 s) Unlocks: a release passes at once. The first waiter sees the
// deletion and leaves before it weighs it (its context ends at the
// hand-off read): it must not pass the unweighed delay on, so the second
// waiter is granted at once, not 4 s after a clean release.
func TestAttackLockDelayUnweighedPassAfterUnlock(t *testing.T) {
	const delay = 4 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
	l := mustLock(t, etcdlock.NewMutex(holder, name))
	ctx := embedtest.Context(t, 30*time.Second)
	first := locktest.OpenSession(t, cli)
	firstCtx, leave := context.WithCancel(ctx)
	defer leave()
	var released atomic.Bool
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HandoffRead && released.Load() {
			leave()
			return context.Canceled
		}
		return err
	}, first)
	left := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(first, name).Lock(firstCtx)
		left <- err
	}()
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	got := lockBehind(t, ctx, locktest.OpenSession(t, cli), name, 2)
	released.Store(true)
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("first waiter: %v", <-left)
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	d := at.Sub(start)
	t.Logf("second waiter granted %v after the Unlock", d.Round(time.Millisecond))
	if d > delay/2 {
		t.Fatalf("granted %v after a clean Unlock; a release passes at once (an unweighed delay was passed on)", d.Round(time.Millisecond))
	}
}

// TestAttackLockDelayLostOnWaiterExpiry: as
// TestAttackLockDelayLostOnWaiterClose, but the first waiter's session is
// lost by its own clock (it then revokes its lease, a write it can make):
// its key goes with the lease, and its session has no delay of its own;
// the second waiter must still wait the holder's delay out (the pass
// written when the hold-off began comes with the deletion).
func TestAttackLockDelayLostOnWaiterExpiry(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	const delay = 4 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := attackGrantsHolder(t, name, delay)
	ctx := embedtest.Context(t, 30*time.Second)
	first := locktest.OpenSession(t, cli)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			go testhook.Expire(first, etcdlock.ErrSessionExpired, "attackGrants")
		}
		return err
	}, first)
	left := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(first, name).Lock(ctx)
		left <- err
	}()
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	got := lockBehind(t, ctx, locktest.OpenSession(t, cli), name, 2)
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	t.Logf("first waiter: %v", <-left)
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(start); d < delay-250*time.Millisecond {
		t.Fatalf("second waiter granted %v after the revoke; want no sooner than the lock-delay %v", d.Round(time.Millisecond), delay)
	}
}

// grantTime runs acquire in a goroutine; the channel gets when it
// returned, or the zero time (after t.Error) if it failed.
func grantTime(t *testing.T, acquire func() error) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		if err := acquire(); err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
	}()
	return got
}

// leaveInTurn arranges TestAttackLockDelayReadersLeaveInTurn's moves with
// hooks on its sessions ss (R1, R2, W2): R2 leaves once R1 holds off too;
// R1 leaves while W2 re-reads after R2's deletion.
func leaveInTurn(t *testing.T, cli *clientv3.Client, name string, ss [3]*etcdlock.Session, leave1, leave2 func()) {
	var r2Left, r1Holding, once atomic.Bool
	r1, r2, w2 := ss[0], ss[1], ss[2]
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			r1Holding.Store(true)
		}
		return err
	}, r1)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			// R2 leaves once R1 holds off too.
			waitFor(t, 10*time.Second, "R1 holding off", r1Holding.Load)
			r2Left.Store(true)
			leave2()
		}
		return err
	}, r2)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HandoffRead && r2Left.Load() && once.CompareAndSwap(false, true) {
			// W2 re-reads after R2's deletion; R1 leaves meanwhile.
			leave1()
			waitFor(t, 10*time.Second, "R1 gone", func() bool { return len(keysUnder(t, cli, name)) == 1 })
		}
		return err
	}, w2)
}
