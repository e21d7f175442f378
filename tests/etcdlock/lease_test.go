package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestNewSessionAfterLeaderCrash: a session opened right after the etcd
// leader crashed is granted in about the time a Lock takes then (each
// attempt is bounded and retried), not after etcd's own request timeout
// (5 s and two election timeouts: 7 s here before).
func TestNewSessionAfterLeaderCrash(t *testing.T) {
	c := embedtest.Start(t)
	cli := c.TestClient(t)
	old := locktest.OpenSession(t, cli)
	leader := waitLeader(t, c)
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.Restart() })
	start := time.Now()
	s, err := etcdlock.NewSession(embedtest.Context(t, 30*time.Second), cli)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	start = time.Now()
	l, err := etcdlock.NewMutex(old, embedtest.UniqueName(t, "test")).Lock(embedtest.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the leader crash: NewSession %v, then a Lock on an older session %v",
		took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if err := l.Unlock(embedtest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if took >= 5*time.Second {
		t.Fatalf("NewSession took %v after a leader crash; want well under etcd's 7 s request timeout", took)
	}
}

// TestLeaseGrantRetryIsIdempotent: a grant whose first attempts are held
// in the network and delivered late, after the library gave up on them and
// retried, leaves exactly one lease: every attempt names the same ID.
func TestLeaseGrantRetryIsIdempotent(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	cfg := c.ClientConfig()
	link, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	cfg.Endpoints = link.Endpoints()
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0 // held connections stay
	cli := clientFromConfig(t, cfg)
	direct := c.TestClient(t)
	// Leases is answered by one member's lessor, not linearizably: ask one
	// member, after a linearizable read there has caught it up.
	leases := func() int {
		t.Helper()
		m, err := c.WaitLeader(embedtest.Context(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mcli, err := m.Client()
		if err != nil {
			t.Fatal(err)
		}
		defer mcli.Close()
		ctx := embedtest.Context(t, 10*time.Second)
		if _, err := mcli.Get(ctx, "any"); err != nil {
			t.Fatal(err)
		}
		resp, err := mcli.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	before := leases()
	link.Hold()
	t.Cleanup(link.Restore)
	type result struct {
		id  clientv3.LeaseID
		ttl time.Duration
		err error
	}
	res := make(chan result, 1)
	go func() {
		id, ttl, err := testhook.GrantLease(embedtest.Context(t, 30*time.Second), cli, 10)
		res <- result{id, ttl, err}
	}()
	time.Sleep(2*testhook.AttemptTimeout + 500*time.Millisecond) // the hold outlasts two attempts
	link.Restore()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _, _ = direct.Revoke(context.Background(), r.id) })
	if n := leases() - before; n != 1 || r.ttl != 10*time.Second {
		t.Fatalf("%d new leases, granted TTL %v; want exactly one, of 10s", n, r.ttl)
	}
}

// clientFromConfig returns a client of cfg, closed at cleanup.
func clientFromConfig(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
