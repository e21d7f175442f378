package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestObserveAcrossCompactionAndLeaderCrash(t *testing.T) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	cli := c.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)
	s := locktest.OpenSession(t, cli)
	seen := etcdlock.NewElection(locktest.OpenSession(t, c.TestClient(t)), name).Observe(ctx)
	if v := <-seen; v != (etcdlock.LeaderInfo{}) {
		t.Fatalf("first value %+v, want no leader", v)
	}
	l, err := etcdlock.NewElection(s, name).Campaign(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(value string) {
		t.Helper()
		expectObserved(t, seen, value, l.Token())
	}
	expect("one")
	compactAfterFillers(t, ctx, cli, name)
	if err := l.Proclaim(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	expect("two")
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, c)
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		err := l.Proclaim(pctx, "three")
		if err == nil {
			break
		}
		if errors.Is(err, etcdlock.ErrNotHeld) || pctx.Err() != nil {
			t.Fatal(err)
		}
	}
	expect("three")
}

// expectObserved reads seen until it reports value with token tok (20 s at
// most between reports).
func expectObserved(t *testing.T, seen <-chan etcdlock.LeaderInfo, value string, tok etcdlock.Token) {
	t.Helper()
	for {
		select {
		case v, ok := <-seen:
			if !ok {
				t.Fatal("Observe closed")
			}
			if v.Value == value && v.Token == tok {
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Observe never reported %q", value)
		}
	}
}

// compactAfterFillers writes 10 revisions (to name+"-filler") and compacts
// the history up to the last one.
func compactAfterFillers(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) {
	t.Helper()
	for i := 0; i < 10; i++ {
		if _, err := cli.Put(ctx, name+"-filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
}
