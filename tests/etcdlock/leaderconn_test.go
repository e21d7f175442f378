package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/connectivity"
)

// ackObserver signals the first keepalive acknowledgement: by then the
// keeper's stream runs on its connection (the leader's, when pinned).
type ackObserver struct {
	etcdlock.NopObserver
	once  sync.Once
	acked chan struct{}
}

func (o *ackObserver) KeepaliveAcked(time.Duration, time.Duration) {
	o.once.Do(func() { close(o.acked) })
}

// keptSession opens a session on cli (a client of c) and waits for its first
// keepalive acknowledgement, so that its keeper's stream runs (on the
// leader's connection, when pinned); it returns the session and c's leader.
func keptSession(t testing.TB, c *embedtest.Cluster, cli *clientv3.Client, opts ...etcdlock.SessionOption) (*etcdlock.Session, *embedtest.Member) {
	t.Helper()
	obs := &ackObserver{acked: make(chan struct{})}
	s := locktest.OpenSession(t, cli, append(opts, etcdlock.WithObserver(obs))...)
	ctx := embedtest.Context(t, 30*time.Second)
	select {
	case <-obs.acked:
	case <-ctx.Done():
		t.Fatal("no keepalive acknowledged")
	}
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, leader
}

// TestQueueWritesGoToLeader: with leader pinning (the default) a grant's
// enqueue Txn and its release go straight to the etcd leader, saving a
// follower's forwarding hop; with pinning off, or on a client whose KV is
// wrapped (a namespace, which requests on another connection would bypass),
// they use the client's balanced connection, and a namespace is respected.
func TestQueueWritesGoToLeader(t *testing.T) {
	c := embedtest.Start(t)
	for _, tc := range []struct {
		name      string
		pinning   bool
		namespace string
		toLeader  bool
	}{
		{"pinned", true, "", true},
		{"pinning off", false, "", false},
		{"namespaced client", true, "team-ns/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := c.TestClient(t)
			if tc.namespace != "" {
				cli.KV = namespace.NewKV(cli.KV, tc.namespace)
				cli.Watcher = namespace.NewWatcher(cli.Watcher, tc.namespace)
			}
			s, leader := keptSession(t, c, cli, etcdlock.WithLeaderPinning(tc.pinning))
			ctx := embedtest.Context(t, 30*time.Second)
			count := func() (onLeader, elsewhere int64) { return writesBy(c, leader) }
			l0, e0 := count()
			const cycles = 12
			name := embedtest.UniqueName(t, "test")
			for i := 0; i < cycles; i++ {
				l, err := etcdlock.NewMutex(s, name).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 && tc.namespace != "" {
					checkNamespacedKey(t, ctx, c, tc.namespace, name, l)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			l1, e1 := count()
			onLeader, elsewhere := l1-l0, e1-e0
			if onLeader+elsewhere < 2*cycles {
				t.Fatalf("counted %d writes for %d grants; want at least %d", onLeader+elsewhere, cycles, 2*cycles)
			}
			if tc.toLeader && elsewhere != 0 {
				t.Fatalf("%d of %d writes went to followers; want all on the leader", elsewhere, onLeader+elsewhere)
			}
			if !tc.toLeader && elsewhere == 0 {
				t.Fatalf("all %d writes went to the leader; want the balanced connection", onLeader)
			}
		})
	}
}

// writesBy sums the writes (Txn, DeleteRange) the leader and the other
// members of c have received.
func writesBy(c *embedtest.Cluster, leader *embedtest.Member) (onLeader, elsewhere int64) {
	for _, m := range c.Members() {
		n := m.Calls("/etcdserverpb.KV/Txn") + m.Calls("/etcdserverpb.KV/DeleteRange")
		if m == leader {
			onLeader += n
		} else {
			elsewhere += n
		}
	}
	return onLeader, elsewhere
}

// checkNamespacedKey checks that l's key of name lives under the client's
// namespace ns.
func checkNamespacedKey(t *testing.T, ctx context.Context, c *embedtest.Cluster, ns, name string, l *etcdlock.Lock) {
	t.Helper()
	raw := c.TestClient(t)
	resp, err := raw.Get(ctx, ns+layout.NamePrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 || !strings.HasPrefix(l.Key(), layout.NamePrefix(name)) {
		t.Fatalf("%d keys under the namespace for %q (key %q); want 1", resp.Count, name, l.Key())
	}
}

// TestStreamConnOutlivesBorrowers: a retired keeper connection stays open
// for a request that borrowed it before, and closes when that request is
// done; after retirement nobody can borrow it.
func TestStreamConnOutlivesBorrowers(t *testing.T) {
	cli := shared.TestClient(t)
	conn, err := cli.Dial(cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	borrow, retire, giveBack, kv := testhook.StreamConn(cli, conn)
	if !borrow() {
		t.Fatal("cannot borrow a fresh connection")
	}
	retire()
	if borrow() {
		t.Fatal("borrowed a retired connection")
	}
	if _, err := kv.Get(embedtest.Context(t, 10*time.Second), "any"); err != nil {
		t.Fatalf("a request that borrowed before the retirement failed: %v", err)
	}
	if st := conn.GetState(); st == connectivity.Shutdown {
		t.Fatal("closed while borrowed")
	}
	giveBack()
	if st := conn.GetState(); st != connectivity.Shutdown {
		t.Fatalf("state %v after the last borrower, want Shutdown", st)
	}
}

// TestWaiterWatchesOnLeader: with leader pinning a waiter's predecessor watch
// runs on the leader's connection, which applies each release first.
func TestWaiterWatchesOnLeader(t *testing.T) {
	c := embedtest.Start(t)
	s, leader := keptSession(t, c, c.TestClient(t))
	setMonitorDelay(t, time.Minute, s) // only the predecessor watch
	ctx := embedtest.Context(t, 30*time.Second)
	watches := func() map[*embedtest.Member]int64 {
		n := map[*embedtest.Member]int64{}
		for _, m := range c.Members() {
			n[m] = m.Calls("/etcdserverpb.Watch/Watch")
		}
		return n
	}
	name := embedtest.UniqueName(t, "test")
	holder := mustLock(t, etcdlock.NewMutex(s, name))
	before := watches()
	hooks := countHooks(t, s)
	granted := lockAndUnlock(ctx, etcdlock.NewMutex(s, name))
	hooks.awaitWatchCreated(t, ctx)
	after := watches()
	for _, m := range c.Members() {
		d := after[m] - before[m]
		if m == leader && d != 1 || m != leader && d != 0 {
			t.Errorf("member %s (leader %v) opened %d watch streams; want 1 on the leader, 0 elsewhere", m.Name(), m == leader, d)
		}
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
}

// TestRetryLeavesLeaderConn: an enqueue retried after an attempt of unknown
// outcome goes over the client's balanced connection, not the leader's
// (which may lead to a dead member until the keeper notices).
func TestRetryLeavesLeaderConn(t *testing.T) {
	c := embedtest.Start(t)
	s, leader := keptSession(t, c, c.TestClient(t))
	ctx := embedtest.Context(t, 30*time.Second)
	followerTxns := func() (n int64) {
		for _, m := range c.Members() {
			if m != leader {
				n += m.Calls("/etcdserverpb.KV/Txn")
			}
		}
		return n
	}
	var faked atomic.Bool
	hook := func(p testhook.Point, err error) error {
		if p == testhook.Enqueued && err == nil && !faked.Swap(true) {
			return errors.New("fake: the answer was lost") // the Txn was applied
		}
		return err
	}
	setHook(t, hook, s)
	before := followerTxns()
	// Each retry goes to a follower two times in three; 12 retries all on
	// the leader by chance would happen once in half a million runs.
	const n = 12
	for i := 0; i < n; i++ {
		faked.Store(false)
		l, err := etcdlock.NewMutex(s, embedtest.UniqueName(t, "test")).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !faked.Load() {
			t.Fatal("the hook did not fake a lost answer")
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d := followerTxns() - before; d == 0 {
		t.Fatalf("none of %d retried enqueues reached a follower; want them on the balanced connection", n)
	}
}

// TestKeeperLeavesUnansweringLeader: when the leader's endpoint stops
// answering this client while it stays leader, the keeper drops the pinned
// stream after two failed status checks (a few seconds) instead of waiting
// for a keepalive to go unanswered (with a one-minute TTL the stall watchdog
// would take 12-18 s, and the queue's requests lent that connection would
// time out meanwhile), and the session keeps working over the other members.
func TestKeeperLeavesUnansweringLeader(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	ctx := embedtest.Context(t, time.Minute)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Only the client's path to the leader goes through the link.
	link, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	cfg := c.ClientConfig()
	cfg.Endpoints = nil
	// Without gRPC's own keepalive pings (which end a silent connection
	// after about 10 s), only the stall watchdog (12 s or more) competes.
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0
	for i, m := range c.Members() {
		ep := m.Endpoint()
		if m == leader {
			ep = link.Endpoints()[i]
		}
		cfg.Endpoints = append(cfg.Endpoints, ep)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	core, logs := observer.New(zapcore.DebugLevel)
	s, _ := keptSession(t, c, cli, etcdlock.WithTTL(time.Minute), etcdlock.WithLogger(zap.New(core)))
	waitFor(t, 20*time.Second, "the keepalive stream pinned to the leader", func() bool { _, leader := testhook.LentConn(s); return leader })
	endedBefore := logs.FilterMessage("keepalive stream ended").Len()

	link.Cut()
	t.Cleanup(link.Restore) // before the session's and the client's Close
	var ended []observer.LoggedEntry
	waitFor(t, 40*time.Second, "the pinned stream to end", func() bool {
		ended = logs.FilterMessage("keepalive stream ended").All()
		return len(ended) > endedBefore
	})
	if got := ended[endedBefore].ContextMap()["error"]; got != testhook.ErrUnanswered.Error() {
		t.Fatalf("the pinned stream ended with %q; want %q", got, testhook.ErrUnanswered)
	}
	l, err := etcdlock.NewMutex(s, embedtest.UniqueName(t, "test")).Lock(ctx)
	if err != nil {
		t.Fatalf("lock with the leader unreachable: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session lost: %v", err)
	}
}
