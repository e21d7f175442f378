package etcdlock_test

// The cut client of the black-hole tests (blackhole_test.go,
// attack_grants_watch_test.go): a session whose paths to the members can be
// cut one by one, and what its session hook reports of its watches.

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// cutClient is a session on a client whose path to every member goes
// through a Link of its own (endpoint i is link i's endpoint i), so that
// any one member's path can be cut. It has no gRPC keepalive (etcd's client
// default): a cut path stays READY in its balancer, as a path that silently
// drops packets does.
type cutClient struct {
	c     *embedtest.Cluster
	cli   *clientv3.Client
	links []*embedtest.Link
	s     *etcdlock.Session
}

func newCutClient(t *testing.T, c *embedtest.Cluster) *cutClient {
	t.Helper()
	cc := &cutClient{c: c}
	cfg := c.ClientConfig()
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0
	cfg.AutoSyncInterval = 0 // never learn the members' own endpoints
	cfg.Endpoints = nil
	for i := range c.Members() {
		l, err := c.NewLink()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		cc.links = append(cc.links, l)
		cfg.Endpoints = append(cfg.Endpoints, l.Endpoints()[i])
	}
	cc.cli = clientFromConfig(t, cfg)
	// A TTL that outlasts a round's cut of every path (cutTTL).
	cc.s, _ = keptSession(t, c, cc.cli, etcdlock.WithTTL(cutTTL))
	t.Cleanup(cc.restore) // runs before the session's Close
	return cc
}

func (cc *cutClient) restore() { cc.restoreAllBut(-1) }

// restoreAllBut restores every path but member i's.
func (cc *cutClient) restoreAllBut(i int) {
	for j, l := range cc.links {
		if j != i {
			l.Restore()
		}
	}
}

// cutAll cuts the path to every member.
func (cc *cutClient) cutAll() {
	for _, l := range cc.links {
		l.Cut()
	}
}

// watchMethod is etcd's Watch RPC (each message a member receives on a
// watch stream counts in its Calls).
const watchMethod = "/etcdserverpb.Watch/Watch"

// anchorWatch opens a watch of the cut client's own with
// WithRequireLeader, as the library opens its watches: clientv3 runs all of
// a client's watches with the same metadata on one gRPC stream, so a watch
// the library opens on the client's balanced connection joins this one's
// stream, on the path it took (the balancer's pick). It returns the index
// of the member at the end of that path, and a func that ends the watch.
func (cc *cutClient) anchorWatch(t *testing.T, ctx context.Context) (int, func()) {
	t.Helper()
	ms := cc.c.Members()
	counts := func() []int64 {
		n := make([]int64, len(ms))
		for i, m := range ms {
			n[i] = m.Calls(watchMethod)
		}
		return n
	}
	for try := 0; try < 5; try++ {
		before := counts()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cc.cli.Watch(wctx, "blackhole-anchor", clientv3.WithCreatedNotify())
		if resp, ok := <-wch; !ok || !resp.Created {
			cancel()
			t.Fatalf("the anchor watch was not created: %v", resp.Err())
		}
		// Another watch may open meanwhile (the library's own, on the
		// keeper's connection): only a count that grew on one member alone
		// tells where the anchor runs.
		at := -1
		for i, n := range counts() {
			if n == before[i] {
				continue
			}
			if at >= 0 {
				at = -2
				break
			}
			at = i
		}
		if at >= 0 {
			return at, cancel
		}
		cancel()
	}
	t.Fatal("could not tell which path the anchor watch took")
	return 0, nil
}

// awaitPinned waits until the session's keeper runs on the leader's
// connection (after the previous round's cut, it moves back there).
func (cc *cutClient) awaitPinned(t *testing.T) {
	t.Helper()
	waitFor(t, setupBound, "the keeper pinned to the leader", func() bool {
		lent, leader := testhook.LentConn(cc.s)
		return lent && leader
	})
}

// watchHooks is what cc's session hook reports: waits gets a value when a
// watch waits for the keeper to lend a connection (ConnWait), shared when
// a watch opens on the client's balanced connection (SharedWatch), which
// a live pinned session's watch must never do.
type watchHooks struct {
	waits, shared chan struct{}
}

// watchHooks sets cc's session hook until the test ends; onEnqueued (if
// not nil) runs when an enqueue is answered.
func (cc *cutClient) watchHooks(t *testing.T, onEnqueued func()) *watchHooks {
	h := &watchHooks{waits: make(chan struct{}, 1), shared: make(chan struct{}, 1)}
	testhook.SetHook(cc.s, func(p testhook.Point, err error) error {
		switch {
		case p == testhook.Enqueued && err == nil && onEnqueued != nil:
			onEnqueued()
		case p == testhook.ConnWait:
			signal(h.waits)
		case p == testhook.SharedWatch:
			signal(h.shared)
		}
		return err
	})
	t.Cleanup(func() { testhook.SetHook(cc.s, nil) })
	return h
}

// signal sends on ch unless a value is already waiting there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// noSharedWatch waits d and reports whether no watch opened on the
// client's balanced connection so far; if one did, it fails the test.
func (h *watchHooks) noSharedWatch(t *testing.T, d time.Duration) bool {
	t.Helper()
	select {
	case <-h.shared:
	case <-time.After(d):
		select {
		case <-h.shared:
		default:
			return true
		}
	}
	t.Errorf("a watch opened on the client's balanced connection while the keeper lent none")
	return false
}
