package etcdlock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
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
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 2*time.Minute)
	lease, err := cli.Grant(ctx, 120)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), lease.ID) })
	dir := testhook.NamePrefix(name) + "s" + strconv.Itoa(n) + "/" + strconv.FormatInt(int64(lease.ID), 16) + "-"
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(dir+strconv.FormatInt(int64(j+1), 16), "", clientv3.WithLease(lease.ID)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s := openSession(t, nil)
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
