package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLockDelayPassedAcrossCompaction: the holder's session has a 4 s
// lock-delay; the second waiter's watch runs on a path that is cut. The
// holder's lease is revoked, the first waiter starts to hold the delay off
// (its key's value now carries the delay's end) and leaves; the history is
// compacted past both. The second waiter, its watch moved to another path,
// learns of the first's deletion from a re-read and never saw the value
// that carried the delay: it still waits the delay out, from the pass
// record the first waiter left beside its key. The record then ends with
// its own lease.
func TestLockDelayPassedAcrossCompaction(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits out delays
	const delay = 4 * time.Second
	c := embedtest.Start(t)
	s, lendTo, cut := cuttableSession(t, c)
	cli := c.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
	mustLock(t, etcdlock.NewMutex(holder, name))
	ctx := embedtest.Context(t, 30*time.Second)
	left := firstWaiterLeavesDuringDelay(t, ctx, cli, name)
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	hooks := countHooks(t, s)
	got := lockBehind(t, ctx, s, name, 2)
	hooks.awaitWatchCreated(t, ctx)
	cut()
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first waiter: %v, want it to leave (context.Canceled)", err)
	}
	if n := len(passRecords(t, cli, name)); n != 1 {
		t.Fatalf("%d pass records, want the first waiter's", n)
	}
	compactAfterFillers(t, ctx, cli, name)
	lendTo(c.Members()[1].Endpoint())
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(start); d < delay {
		t.Fatalf("second waiter granted %v after the revoke; want no sooner than the lock-delay %v", d, delay)
	} else {
		t.Logf("second waiter granted %v after the revoke (lock-delay %v)", d.Round(time.Millisecond), delay)
	}
	waitFor(t, 10*time.Second, "the pass record's lease to end", func() bool { return len(passRecords(t, cli, name)) == 0 })
}

// TestLockDelayPassedBeforeTheWatch: as above, but the first waiter takes
// up the delay and leaves between the second waiter's enqueue (which saw
// its key without the delay) and the start of the second waiter's watch, so
// the second learns of the deletion from the watch's first read.
func TestLockDelayPassedBeforeTheWatch(t *testing.T) {
	t.Parallel() // its own names and sessions; mostly waits out delays
	const delay = 4 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
	mustLock(t, etcdlock.NewMutex(holder, name))
	ctx := embedtest.Context(t, 30*time.Second)
	left := firstWaiterLeavesDuringDelay(t, ctx, cli, name)
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	second := locktest.OpenSession(t, cli)
	enqueued, resume := make(chan struct{}), make(chan struct{})
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.Enqueued {
			close(enqueued)
			<-resume // its watch starts only once the first waiter left
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
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first waiter: %v, want it to leave (context.Canceled)", err)
	}
	close(resume)
	if d := (<-got).Sub(start); d < delay {
		t.Fatalf("second waiter granted %v after the revoke; want no sooner than the lock-delay %v", d, delay)
	} else {
		t.Logf("second waiter granted %v after the revoke (lock-delay %v)", d.Round(time.Millisecond), delay)
	}
}

// cuttableSession opens a session whose keeper lends it a connection
// through a link to the first member: cut cuts that link (kept open:
// no keepalive), lendTo lends it a connection to another endpoint.
func cuttableSession(t *testing.T, c *embedtest.Cluster) (s *etcdlock.Session, lendTo func(ep string), cut func()) {
	t.Helper()
	cfg := c.ClientConfig()
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0 // a cut path stays open
	wcli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wcli.Close() })
	s, _ = keptSession(t, c, wcli)
	setMonitorDelay(t, time.Hour, s)
	link, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	t.Cleanup(link.Restore)
	lendTo = func(ep string) {
		conn, err := wcli.Dial(ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(testhook.Lend(s, wcli, conn, ep))
	}
	lendTo(link.Endpoints()[0])
	return s, lendTo, link.Cut
}

// firstWaiterLeavesDuringDelay starts a waiter for name on a session of its
// own that leaves as soon as it starts to hold a lock-delay off; it returns
// the channel of its Lock's error.
func firstWaiterLeavesDuringDelay(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) <-chan error {
	t.Helper()
	first := locktest.OpenSession(t, cli)
	firstCtx, leave := context.WithCancel(ctx)
	t.Cleanup(leave)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			leave() // its pass is written: it leaves during the delay
		}
		return err
	}, first)
	left := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(first, name).Lock(firstCtx)
		left <- err
	}()
	return left
}

// passRecords returns the keys of name's pass records.
func passRecords(t *testing.T, cli *clientv3.Client, name string) []string {
	t.Helper()
	prefix := layout.BarrierPrefix(name)
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.HasPrefix(k, prefix+"p/") {
			keys = append(keys, k)
		}
	}
	return keys
}
