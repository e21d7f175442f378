package etcdlock_test

// Destructive tests: each starts its own cluster and crashes, isolates or
// cuts off parts of it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func waitLeader(t *testing.T, c *embedtest.Cluster) *embedtest.Member {
	t.Helper()
	m, err := c.WaitLeader(embedtest.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTwoOfFiveMembersDown(t *testing.T) {
	bothModes(t, testTwoOfFiveMembersDown)
}

func testTwoOfFiveMembersDown(t *testing.T, opts ...etcdlock.SessionOption) {
	c := embedtest.Start(t, embedtest.WithMembers(5))
	leader := waitLeader(t, c)
	cli := c.TestClient(t)
	s := locktest.OpenSession(t, cli, opts...)
	name := embedtest.UniqueName(t, "test")
	// Kill the leader and one follower: 3 of 5 still make a majority.
	killed := 0
	for _, m := range c.Members() {
		if m == leader || (killed == 1 && m != leader) {
			if err := m.Kill(); err != nil {
				t.Fatal(err)
			}
			killed++
		}
		if killed == 2 {
			break
		}
	}
	waitLeader(t, c)
	ctx := embedtest.Context(t, time.Minute)
	var last etcdlock.Token
	for i := 0; i < 5; i++ {
		l, err := etcdlock.NewMutex(s, name).Lock(ctx)
		if err != nil {
			t.Fatalf("lock %d with 2 of 5 members down: %v", i, err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d not above %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s.Err() != nil {
		t.Fatalf("session lost: %v", s.Err())
	}
}

// grantOrder starts n waiters on name (each enqueued before the next) on the
// given sessions and returns the channel on which each reports its index
// when granted; each unlocks at once.
func grantOrder(t *testing.T, watcher *clientv3.Client, name string, sessions []*etcdlock.Session, n int) <-chan int {
	t.Helper()
	return enqueueWaiters(t, watcher, name, n, sessions)
}

func TestIsolatedMemberKeepsWaitersInOrder(t *testing.T) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	bothModes(t, testIsolatedMemberKeepsWaitersInOrder)
}

func testIsolatedMemberKeepsWaitersInOrder(t *testing.T, opts ...etcdlock.SessionOption) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	victim := followersOf(c, leader)[0]
	// The test's own writes go to the leader only: a request to the
	// isolated member would time out.
	all, err := leader.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { all.Close() })
	onVictim, err := victim.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { onVictim.Close() })
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, all, opts...), name))
	waiters := []*etcdlock.Session{locktest.OpenSession(t, onVictim, opts...), locktest.OpenSession(t, onVictim, opts...)}
	const n = 4
	order := grantOrder(t, all, name, waiters, n)
	keysBefore := keysUnder(t, all, name)

	if err := victim.Isolate(); err != nil {
		t.Fatal(err)
	}
	isolated := time.Now()
	ctx := embedtest.Context(t, time.Minute)
	// While the waiters' member is cut off: release, write and compact, so
	// the waiters' watches must resume past a compacted revision.
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	compactAfterFillers(t, ctx, all, name)
	time.Sleep(time.Until(isolated.Add(4 * time.Second))) // the fault lasts 4s: that is the scenario, not synchronisation
	if err := victim.Heal(); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < n; want++ {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("grant %d went to waiter %d", want, got)
			}
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted; keys before isolation %v, now %v", want, keysBefore, keysUnder(t, all, name))
		}
	}
	for _, s := range waiters {
		if s.Err() != nil {
			t.Fatalf("waiter session lost: %v", s.Err())
		}
	}
}

func TestCutClientLosesSession(t *testing.T) {
	bothModes(t, testCutClientLosesSession)
}

func testCutClientLosesSession(t *testing.T, opts ...etcdlock.SessionOption) {
	c := embedtest.Start(t)
	waitLeader(t, c)
	all := c.TestClient(t)
	flaky, link, err := c.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flaky.Close() })
	const ttl = 3 * time.Second
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, all, opts...), name))
	s := locktest.OpenSession(t, flaky, append(opts, etcdlock.WithTTL(ttl))...)
	ctx := embedtest.Context(t, time.Minute)
	errc := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(s, name).Lock(ctx)
		errc <- err
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, all, name)) == 2 })
	link.Cut()
	cut := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, etcdlock.ErrSessionExpired) {
			t.Fatalf("waiting Lock on a cut client: %v, want ErrSessionExpired", err)
		}
		if d := time.Since(cut); d > ttl+time.Second {
			t.Fatalf("ErrSessionExpired %v after the cut; want within TTL + 1s", d)
		} else {
			t.Logf("Lock failed %v after the cut", d)
		}
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("waiting Lock never failed")
	}
	waitFor(t, ttl+2*time.Second+2*time.Second, "the cut waiter's key to go", func() bool { return len(keysUnder(t, all, name)) == 1 })
	if d := time.Since(cut); d > ttl+2*time.Second {
		t.Fatalf("key gone %v after the cut; want within TTL + election + 1s", d)
	} else {
		t.Logf("key gone %v after the cut", d)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	link.Restore()
}

func TestLeaderKilledWhileWaiting(t *testing.T) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	bothModes(t, testLeaderKilledWhileWaiting)
}

func testLeaderKilledWhileWaiting(t *testing.T, opts ...etcdlock.SessionOption) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	cli := c.TestClient(t)
	ss := []*etcdlock.Session{locktest.OpenSession(t, cli, opts...), locktest.OpenSession(t, c.TestClient(t), opts...), locktest.OpenSession(t, c.TestClient(t), opts...)}
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(ss[0], name))
	const n = 6
	order := grantOrder(t, cli, name, ss, n)
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	// Unlock at once, while the cluster has no leader: Unlock retries its
	// delete through the election and reports success.
	ctx := embedtest.Context(t, time.Minute)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatalf("unlock during the election: %v", err)
	}
	for want := 0; want < n; want++ {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("grant %d went to waiter %d", want, got)
			}
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted", want)
		}
	}
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Err() != nil {
			t.Fatalf("session lost: %v", s.Err())
		}
	}
}

const keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"

// keepalives returns the keepalive requests each member has received.
func keepalives(c *embedtest.Cluster) map[*embedtest.Member]int64 {
	out := map[*embedtest.Member]int64{}
	for _, m := range c.Members() {
		out[m] = m.Calls(keepAliveMethod)
	}
	return out
}

func TestKeepalivesFollowTheLeader(t *testing.T) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	// The client's logger gets the warnings of the client's own failed
	// calls; the keeper's housekeeping (finding and following the leader)
	// must not add to them, through the leader's crash too.
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := c.ClientConfig()
	cfg.Logger = zap.New(core)
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.Close()
		for _, e := range logs.All() {
			if strings.Contains(fmt.Sprint(e.ContextMap()["method"]), "Maintenance/Status") {
				t.Errorf("the keeper's status check logged through the user's logger: %s %v", e.Message, e.ContextMap())
			}
		}
	})
	var sessions []*etcdlock.Session
	for i := 0; i < 10; i++ {
		sessions = append(sessions, locktest.OpenSession(t, cli, etcdlock.WithTTL(5*time.Second)))
	}
	// Each session renews every TTL/3; look over a few rounds.
	k0 := keepalives(c)
	waitFor(t, 10*time.Second, "keepalives on the leader", func() bool { return keepalives(c)[leader]-k0[leader] >= 30 })
	k1 := keepalives(c)
	for m, n := range k1 {
		if m != leader && n != k0[m] {
			t.Fatalf("follower %s received %d keepalives; all must go to the leader", m.Name(), n-k0[m])
		}
	}

	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	newLeader := waitLeader(t, c)
	k2 := keepalives(c)
	waitFor(t, 10*time.Second, "keepalives on the new leader", func() bool { return keepalives(c)[newLeader]-k2[newLeader] >= 30 })
	// Settled on the new leader: no follower gets any for a few rounds.
	k3 := keepalives(c)
	waitFor(t, 10*time.Second, "more keepalives on the new leader", func() bool { return keepalives(c)[newLeader]-k3[newLeader] >= 30 })
	k4 := keepalives(c)
	for m, n := range k4 {
		if m != newLeader && n != k3[m] {
			t.Fatalf("follower %s received %d keepalives after the move", m.Name(), n-k3[m])
		}
	}
	for i, s := range sessions {
		if s.Err() != nil {
			t.Fatalf("session %d lost across the leader crash: %v", i, s.Err())
		}
	}
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
}

func TestUnpinnedKeepalivesStillWork(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli, etcdlock.WithLeaderPinning(false), etcdlock.WithTTL(3*time.Second))
	v0 := s.ValidUntil()
	waitFor(t, 5*time.Second, "an unpinned keepalive", func() bool { return s.ValidUntil().After(v0.Add(500 * time.Millisecond)) })
	var wg sync.WaitGroup
	wg.Wait()
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

var _ = context.Background

// bothModes runs test with batching (the default) and without.
func bothModes(t *testing.T, test func(t *testing.T, opts ...etcdlock.SessionOption)) {
	t.Run("batching", func(t *testing.T) { test(t) })
	t.Run("unbatched", func(t *testing.T) { test(t, etcdlock.WithoutBatching()) })
}
