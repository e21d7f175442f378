package etcdlock

// Regression tests for writes that are applied late: a request held back on
// a cut network path and delivered after the library has given up on it and
// moved on (reused the key's name, freed it). Each test makes its own
// cluster and a client whose endpoints reach two followers, each through a
// Link of its own, so one path can be cut while the other works. The
// balanced connection takes the connected paths in turn, so of several
// acquisitions started at once about half send their first request over
// the cut path: each test runs lateNames of them, since a request held back
// together with its cancellation (the client gave up on it) is applied by
// the member only when the member starts it before it sees the cancellation.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	methodTxn    = "/etcdserverpb.KV/Txn"
	methodDelete = "/etcdserverpb.KV/DeleteRange"
	// lateTTL is long enough for a session to outlive the cuts of these
	// tests without a keepalive stall (the stall limit is TTL/5).
	lateTTL = 30 * time.Second
	// lateNames is how many names each test acquires at once.
	lateNames = 6
)

// paths is a client whose i-th endpoint reaches members[i] through links[i]
// only (AutoSyncInterval 0: it never learns the members' own endpoints).
type paths struct {
	cli     *clientv3.Client
	members []*embedtest.Member
	links   []*embedtest.Link
}

func newPaths(t *testing.T, c *embedtest.Cluster, members ...*embedtest.Member) *paths {
	t.Helper()
	p := &paths{members: members}
	var eps []string
	for _, m := range members {
		l, err := c.NewLink()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		idx := -1
		for i, cm := range c.Members() {
			if cm == m {
				idx = i
			}
		}
		p.links = append(p.links, l)
		eps = append(eps, l.Endpoints()[idx])
	}
	cfg := c.ClientConfig()
	cfg.Endpoints = eps
	cfg.AutoSyncInterval = 0
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	p.cli = cli
	return p
}

// restoreAll restores every link (registered as a cleanup after the
// sessions, so it runs before they close and their revokes get through).
func (p *paths) restoreAll() {
	for _, l := range p.links {
		l.Restore()
	}
}

// writes counts the writes (Txn, DeleteRange) member m has received.
func writes(m *embedtest.Member) int64 { return m.Calls(methodTxn) + m.Calls(methodDelete) }

// probe sends a serializable Get over cli with a short timeout: true if it
// was answered (the balancer picked an open path), false if it timed out (it
// picked a cut one; the Get is held there, harmless).
func probe(cli *clientv3.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := cli.Get(ctx, "latewrite/probe", clientv3.WithSerializable())
	return err == nil
}

// awaitPathDown waits until cli's balancer no longer uses a cut path (the
// client's keepalive closed its connection, and a new one cannot complete
// its handshake while the path is cut): two probes in a row are answered.
func awaitPathDown(t *testing.T, cli *clientv3.Client, d time.Duration) {
	t.Helper()
	ok := 0
	waitFor(t, d, "the cut path to leave the balancer's rotation", func() bool {
		if probe(cli) {
			ok++
		} else {
			ok = 0
		}
		return ok >= 2
	})
}

// awaitDelivery waits (at most d) until member m has received a write more
// than before: the held-back bytes of a restored link reached it. It reports
// whether that was seen.
func awaitDelivery(m *embedtest.Member, before int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for writes(m) <= before {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// followersOf returns the members other than leader.
func followersOf(c *embedtest.Cluster, leader *embedtest.Member) []*embedtest.Member {
	var out []*embedtest.Member
	for _, m := range c.Members() {
		if m != leader {
			out = append(out, m)
		}
	}
	return out
}

// relock locks name on s until it gets the key name want (a name the
// session used before and must free first), for at most d; it returns the
// last grant either way and whether its key is want. It polls: when a
// session frees a name is not observable.
func relock(t *testing.T, s *Session, name, want string, d time.Duration) (*Lock, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l := mustLock(t, NewMutex(s, name))
		if l.Key() == want || time.Now().After(deadline) {
			return l, l.Key() == want
		}
		if err := l.Unlock(testCtx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}


// lateNamesOf returns lateNames names under base.
func lateNamesOf(base string) []string {
	names := make([]string, lateNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s/%d", base, i)
	}
	return names
}

// TestLateDeleteCannotFreeAReusedName: Lock calls given up while their
// enqueue Txns are held on cut paths leave keys of unknown outcome; the
// reaper's deletes of them that go over the path that stays cut are held
// and time out, and retries over the healed path succeed. Each session frees
// its name and takes it again for a new grant, with another session waiting
// behind it. When the path heals, the held-back deletes must not delete the
// new grants' keys: no waiter may be granted, and no holder lose its grant,
// while the holders hold (they never unlock).
func TestLateDeleteCannotFreeAReusedName(t *testing.T) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late, early := p.links[0], p.links[1] // late reaches fs[0], early fs[1]
	direct := newClient(t, c)
	names := lateNamesOf(uniqueName(t))
	holders := make([]*Session, len(names)) // one each: each has its own reaper
	for i := range holders {
		holders[i] = openSession(t, p.cli, WithTTL(lateTTL), WithIdentity(fmt.Sprintf("holder-%d", i)))
	}
	waiter := openSession(t, direct, WithIdentity("waiter"))
	t.Cleanup(p.restoreAll)
	ctx := testCtx(t, time.Minute)

	// The name each session's first key of its lock gets (its slot 0).
	keys := make([]string, len(names))
	for i, name := range names {
		l := mustLock(t, NewMutex(holders[i], name))
		keys[i] = l.Key()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// With both paths cut, every enqueue Txn is held and every Lock gives
	// up: the keys' outcomes are unknown. The reapers' deletes go out over
	// both paths; early heals at once (what it held is applied now), late
	// holds its deletes until after the names are reused.
	late.Cut()
	early.Cut()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := NewMutex(holders[i], name).Lock(lctx); err == nil {
				t.Error("Lock over cut paths succeeded")
			}
		}()
	}
	wg.Wait()
	early.Restore()

	// Each session frees its name and reuses it; a waiter queues behind.
	type event struct {
		i   int
		l   *Lock
		err error
	}
	granted := make(chan event, len(names))
	grants := make([]*Lock, len(names))
	for i, name := range names {
		l, reused := relock(t, holders[i], name, keys[i], 30*time.Second)
		if !reused {
			t.Logf("%s: name %s not reused (holds %s)", name, keys[i], l.Key())
		}
		grants[i] = l
		go func() {
			l, err := NewMutex(waiter, name).Lock(ctx)
			granted <- event{i, l, err}
		}()
	}
	for _, name := range names {
		waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(keysUnder(t, direct, name)) == 2 })
	}
	lost := make(chan int, len(names))
	for i, l := range grants {
		held := l.Context()
		go func() {
			select {
			case <-held.Done():
				lost <- i
			case <-ctx.Done():
			}
		}()
	}

	// Heal: what late held back reaches its member.
	before := writes(fs[0])
	late.Restore()
	if !awaitDelivery(fs[0], before, 10*time.Second) {
		t.Logf("no held-back write reached %s", fs[0].Name())
	}
	// Nothing else happens now: the holders hold, the waiter waits.
	select {
	case ev := <-granted:
		if ev.err != nil {
			t.Fatalf("waiter on %s: %v", names[ev.i], ev.err)
		}
		h := grants[ev.i]
		t.Fatalf("two holders of %s: the waiter was granted %s (token %d) while %s (token %d) never unlocked (its context then: %v); keys now %v",
			names[ev.i], ev.l.Key(), ev.l.Token(), h.Key(), h.Token(), h.Context().Err(), keysUnder(t, direct, names[ev.i]))
	case i := <-lost:
		h := grants[i]
		t.Fatalf("%s: the holder lost %s (token %d) without unlocking: %v; keys now %v",
			names[i], h.Key(), h.Token(), context.Cause(h.Context()), keysUnder(t, direct, names[i]))
	case <-time.After(3 * time.Second): // asserts that nothing happens
	}
	for _, l := range grants {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("unlock: %v", err)
		}
	}
	for range names {
		select {
		case ev := <-granted:
			if ev.err != nil {
				t.Fatalf("waiter on %s: %v", names[ev.i], ev.err)
			}
			_ = ev.l.Unlock(ctx)
		case <-ctx.Done():
			t.Fatal("a waiter was never granted after its holder unlocked")
		}
	}
}

// TestLateEnqueueLeavesNoPhantomKey: Locks whose first enqueue Txn is held
// on a cut path are granted on a retry over the open path; the locks are
// released and their names freed (the session reuses each). When the path
// heals, the held-back Txns must not re-create the keys on the session's
// live lease: no key may remain that no grant accounts for, and another
// session's TryLock must succeed on every name.
func TestLateEnqueueLeavesNoPhantomKey(t *testing.T) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late := p.links[0] // reaches fs[0]
	direct := newClient(t, c)
	s1 := openSession(t, p.cli, WithTTL(lateTTL), WithIdentity("first"))
	s2 := openSession(t, direct, WithIdentity("second"))
	t.Cleanup(p.restoreAll)
	base := uniqueName(t)
	names := lateNamesOf(base)
	ctx := testCtx(t, time.Minute)

	// About half of the first attempts go over the cut path and are held;
	// their retries go over the open one.
	late.Cut()
	grants := make([]*Lock, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := NewMutex(s1, name).Lock(ctx)
			if err != nil {
				t.Errorf("lock %s: %v", name, err)
				return
			}
			grants[i] = l
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Release once the cut path is out of the rotation, so the releases and
	// whatever follows them go over the open path.
	awaitPathDown(t, p.cli, 15*time.Second)
	for _, l := range grants {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The session frees each name: it takes it again (and lets it go).
	for i, name := range names {
		l, reused := relock(t, s1, name, grants[i].Key(), 30*time.Second)
		if !reused {
			t.Logf("%s: name %s not reused", name, grants[i].Key())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Heal, watching the locks' keys: the held-back Txns reach their member.
	all := listPrefix(base + "/")
	resp, err := direct.Get(ctx, all, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := direct.Watch(wctx, all, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	before := writes(fs[0])
	late.Restore()
	if !awaitDelivery(fs[0], before, 10*time.Second) {
		t.Logf("no held-back write reached %s", fs[0].Name())
	}
	// A write they carry is applied within moments of its arrival.
	window := time.After(2 * time.Second) // asserts that nothing happens
watch:
	for {
		select {
		case wr := <-wch:
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.PUT {
					t.Errorf("phantom key: %s created at revision %d on lease %x (s1's: %x) after its grant was released",
						ev.Kv.Key, ev.Kv.CreateRevision, ev.Kv.Lease, int64(s1.Lease()))
				}
			}
		case <-window:
			break watch
		}
	}
	if resp, err := direct.Get(ctx, all, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	} else {
		for _, kv := range resp.Kvs {
			t.Errorf("key with no grant: %s (lease %x, value %q)", kv.Key, kv.Lease, kv.Value)
		}
	}
	for _, name := range names {
		l, err := NewMutex(s2, name).TryLock(ctx)
		if err != nil {
			t.Errorf("another session's TryLock on %s: %v", name, err)
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
