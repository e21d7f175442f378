package etcdlock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackPassRecordSemaphoreFrontGrantCost: the front waiter of a
// semaphore of n watches the n keys ahead. No session uses a lock-delay.
// When one of them is released the waiter must be granted in about the time
// of one read of the n keys; it must not pay a cost that grows as n² (a
// scan of the keys ahead for each key it watched) on every grant.
func TestAttackPassRecordSemaphoreFrontGrantCost(t *testing.T) {
	const n = 12000
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*time.Minute)
	lease, err := cli.Grant(ctx, 120)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), lease.ID) })
	dir := layout.NamePrefix(name) + "s" + strconv.Itoa(n) + "/" + strconv.FormatInt(int64(lease.ID), 16) + "-"
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(dir+strconv.FormatInt(int64(j+1), 16), "", clientv3.WithLease(lease.ID)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s := locktest.OpenSession(t, shared.TestClient(t))
	hooks := countHooks(t, s)
	got := make(chan time.Time, 1)
	go func() {
		l, err := etcdlock.NewSemaphore(s, name, n).Acquire(ctx)
		if err != nil {
			t.Error(err)
		} else {
			defer func() { _ = l.Unlock(context.Background()) }()
		}
		got <- time.Now()
	}()
	hooks.awaitWatchCreated(t, ctx)
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if _, err := cli.Delete(ctx, dir+strconv.FormatInt(n, 16)); err != nil {
		t.Fatal(err)
	}
	d := (<-got).Sub(start)
	t.Logf("front waiter of a semaphore of %d granted %v after a release", n, d.Round(time.Millisecond))
	if d > time.Second {
		t.Fatal(fmt.Sprintf("granted %v after the release; want well under a second", d))
	}
}

// TestAttackPassRecordRBACOneName: every client is a user whose role has
// readwrite on layout.NamePrefix(name) and layout.BarrierPrefix(name) only (docs/security.md,
// "Roles for teams"). The first waiter takes up the holder's lock-delay and leaves
// before the second waiter's watch starts: its pass write (key and record)
// and the second waiter's read of the records must both be permitted, and
// the second waiter still waits the delay out.
func TestAttackPassRecordRBACOneName(t *testing.T) {
	const delay = 3 * time.Second
	sc := startSecure(t)
	name := "one/job"
	ctx := embedtest.Context(t, time.Minute)
	pw := oneNameUser(t, ctx, sc, name)
	holder := locktest.OpenSession(t, sc.clientAs(t, "olga", pw), etcdlock.WithLockDelay(delay))
	mustLock(t, etcdlock.NewMutex(holder, name))
	left := firstWaiterLeavesDuringDelay(t, ctx, sc.clientAs(t, "olga", pw), name)
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, sc.root, name)) == 2 })
	second := locktest.OpenSession(t, sc.clientAs(t, "olga", pw))
	enqueued, resume := make(chan struct{}), make(chan struct{})
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.Enqueued {
			close(enqueued)
			<-resume
		}
		return err
	}, second)
	got := make(chan time.Time, 1)
	go func() {
		_, err := etcdlock.NewMutex(second, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	<-enqueued
	start := time.Now()
	if _, err := sc.root.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	<-left
	if n := len(passRecords(t, sc.root, name)); n != 1 {
		t.Errorf("%d pass records, want the first waiter's", n)
	}
	close(resume)
	if d := (<-got).Sub(start); d < delay {
		t.Fatalf("second waiter granted %v after the revoke; want no sooner than %v", d, delay)
	} else {
		t.Logf("second waiter granted %v after the revoke (lock-delay %v)", d.Round(time.Millisecond), delay)
	}
}

// oneNameUser adds the user olga, whose role has readwrite on
// layout.NamePrefix(name) and layout.BarrierPrefix(name) only, and returns her password.
func oneNameUser(t *testing.T, ctx context.Context, sc *secureCluster, name string) string {
	t.Helper()
	pw := secret(t, "olga")
	kp := layout.NamePrefix(name)
	bp := mustBarrierPrefix(t, name)
	for _, step := range []func() error{
		func() error { _, err := sc.root.RoleAdd(ctx, "one"); return err },
		func() error {
			_, err := sc.root.RoleGrantPermission(ctx, "one", kp, clientv3.GetPrefixRangeEnd(kp), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := sc.root.RoleGrantPermission(ctx, "one", bp, clientv3.GetPrefixRangeEnd(bp), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := sc.root.UserAdd(ctx, "olga", pw); return err },
		func() error { _, err := sc.root.UserGrantRole(ctx, "olga", "one"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return pw
}

func mustBarrierPrefix(t *testing.T, name string) string {
	t.Helper()
	p := layout.BarrierPrefix(name)
	return p
}

// TestAttackPassRecordWaitedGrantCost: a waited grant without a lock-delay
// sends no lease Grant and no request more than its reads; a hold-off
// sends one Grant (its pass record's lease).
func TestAttackPassRecordWaitedGrantCost(t *testing.T) {
	c := embedtest.Start(t)
	cli := c.TestClient(t)
	calls := func() (grants, reads int64) {
		for _, m := range c.Members() {
			grants += m.Calls("/etcdserverpb.Lease/LeaseGrant")
			reads += m.Calls("/etcdserverpb.KV/Range") + m.Calls("/etcdserverpb.KV/Txn")
		}
		return grants, reads
	}
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	holder, waiter := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	l := mustLock(t, etcdlock.NewMutex(holder, name))
	hooks := countHooks(t, waiter)
	got := lockInBackground(t, ctx, waiter, name)
	hooks.awaitWatchCreated(t, ctx)
	g0, r0 := calls()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-got
	time.Sleep(300 * time.Millisecond) // the grant stamp
	g1, r1 := calls()
	t.Logf("a waited grant after a release: %d Grant, %d Range/Txn (with the release and the stamp)", g1-g0, r1-r0)
	if g1 != g0 {
		t.Errorf("a waited grant without a lock-delay sent %d lease Grants; want none", g1-g0)
	}
}
