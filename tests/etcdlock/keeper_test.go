package etcdlock_test

// Tests of a client whose paths to some members black-hole (no reset, no
// error, bytes just stop) while the cluster keeps its quorum: the keeper
// must find a member that answers, and the watches must follow it.

import (
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// blackHoleClients returns n clients of c whose paths to the leader and to
// one follower go through one link, and to the third member directly, with
// no gRPC keepalive (etcd's client default): a cut link then keeps their
// connections READY in the client's balancer, as a path that silently drops
// packets does.
func blackHoleClients(t *testing.T, c *embedtest.Cluster, n int) ([]*clientv3.Client, *embedtest.Link) {
	t.Helper()
	leader := waitLeader(t, c)
	link, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	cfg := c.ClientConfig()
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0
	cfg.Endpoints = nil
	follower := false
	for i, m := range c.Members() {
		ep := m.Endpoint()
		if m == leader || !follower {
			ep = link.Endpoints()[i]
			follower = follower || m != leader
		}
		cfg.Endpoints = append(cfg.Endpoints, ep)
	}
	var clis []*clientv3.Client
	for range n {
		cli, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		clis = append(clis, cli)
	}
	t.Cleanup(link.Restore) // before the sessions' and the clients' Close
	return clis, link
}

// TestSessionsSurviveBlackHoledLeader: with the paths to the leader and to
// a follower black-holed, the keeper renews over the member that still
// answers, and no session is lost (before, the keeper fell back to the
// balanced connection, which kept choosing held paths, and sessions expired
// about 7 s after the cut although a quorum was up).
func TestSessionsSurviveBlackHoledLeader(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	// Three clients, each with a keeper of its own: each keeper had one
	// chance in three to land on the path that answers.
	clis, link := blackHoleClients(t, c, 3)
	const ttl = 5 * time.Second
	var sessions []*etcdlock.Session
	for _, cli := range clis {
		for range 2 {
			s, _ := keptSession(t, c, cli, etcdlock.WithTTL(ttl))
			sessions = append(sessions, s)
		}
	}
	link.Cut()
	cut := time.Now()
	// A session renewed only before the cut is valid until before cut + TTL.
	waitFor(t, 40*time.Second, "every session renewed past two TTLs after the cut", func() bool {
		for i, s := range sessions {
			if err := s.Err(); err != nil {
				t.Fatalf("session %d lost %v after the cut: %v", i, time.Since(cut).Round(time.Millisecond), err)
			}
		}
		for _, s := range sessions {
			if !s.ValidUntil().After(cut.Add(2 * ttl)) {
				return false
			}
		}
		return true
	})
	ctx := embedtest.Context(t, 30*time.Second)
	l, err := etcdlock.NewMutex(sessions[0], embedtest.UniqueName(t, "test")).Lock(ctx)
	if err != nil {
		t.Fatalf("lock with two paths black-holed: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterFollowsKeeperOffBlackHoledPath: a waiter whose predecessor
// watch ran on the leader's path, which then black-holes, is granted when
// the holder releases: its watch moves with the keeper to a member that
// answers.
func TestWaiterFollowsKeeperOffBlackHoledPath(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	clis, link := blackHoleClients(t, c, 1)
	s, _ := keptSession(t, c, clis[0])
	setMonitorDelay(t, time.Hour, s) // only the predecessor watch
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, c.TestClient(t)), name))
	ctx := embedtest.Context(t, time.Minute)
	hooks := countHooks(t, s)
	granted := lockAndUnlock(ctx, etcdlock.NewMutex(s, name))
	hooks.awaitWatchCreated(t, ctx)
	link.Cut()
	waitFor(t, 30*time.Second, "the keeper on the member that answers", func() bool {
		lent, leader := testhook.LentConn(s)
		return lent && !leader
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session lost: %v", err)
	}
}

// TestWatchMovesWithKeeperConn: a waiter's watch runs on the connection the
// keeper lends, and moves when the keeper lends another: a watch left on a
// path that black-holed would never hear of the release.
func TestWatchMovesWithKeeperConn(t *testing.T) {
	c := embedtest.Start(t)
	cfg := c.ClientConfig()
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0 // a cut path stays open
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s, _ := keptSession(t, c, cli)
	setMonitorDelay(t, time.Hour, s)
	link, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	t.Cleanup(link.Restore)
	lendTo := func(ep string) {
		conn, err := cli.Dial(ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(testhook.Lend(s, cli, conn, ep))
	}
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, c.TestClient(t)), name))
	ctx := embedtest.Context(t, 20*time.Second)
	lendTo(link.Endpoints()[0])
	hooks := countHooks(t, s)
	granted := lockAndUnlock(ctx, etcdlock.NewMutex(s, name))
	hooks.awaitWatchCreated(t, ctx)
	link.Cut()
	lendTo(c.Members()[1].Endpoint())
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

// TestLostSessionRevokedWhenPathReturns: a session lost by its validity
// clock while its path to etcd is gone keeps trying to revoke its lease, so
// its keys go as soon as a path answers again, not a TTL later (and not
// several TTLs later: each new etcd leader re-arms every lease).
func TestLostSessionRevokedWhenPathReturns(t *testing.T) {
	c := embedtest.Start(t)
	cli, link, err := c.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	t.Cleanup(link.Restore)
	s, _ := keptSession(t, c, cli, etcdlock.WithTTL(30*time.Second))
	name := embedtest.UniqueName(t, "test")
	mustLock(t, etcdlock.NewMutex(s, name))
	link.Cut()
	testhook.Expire(s, etcdlock.ErrSessionExpired, etcdlock.ReasonValidityClock) // as when the clock runs out
	// The outage outlasts a revoke attempt.
	time.Sleep(2 * testhook.RevokeAttempt)
	link.Restore()
	restored := time.Now()
	direct := c.TestClient(t)
	waitFor(t, 10*time.Second, "the lost session's lease revoked", func() bool {
		resp, err := direct.TimeToLive(embedtest.Context(t, 5*time.Second), s.Lease())
		return err == nil && resp.TTL <= 0
	})
	if keys := keysUnder(t, direct, name); len(keys) != 0 {
		t.Fatalf("keys left after the revoke: %v", keys)
	}
	t.Logf("revoked %v after the path returned", time.Since(restored).Round(time.Millisecond))
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}
