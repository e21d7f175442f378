package etcdlock

// Regression tests for writes that are applied late: a request held back on
// a cut network path and delivered after the library gave up on it and
// moved on (freed the key's name, reused it). Each test makes its own
// cluster and a client whose endpoints reach two followers, each through a
// Link of its own, so that one path can be cut while the other works (with
// no leader among its endpoints, the session's keeper lends no leader
// connection: every request uses the balanced connection). The
// client's balanced connection takes its connected paths in turn, which
// lets the test steer the library's next request onto a path (steer).
//
// A request the client gave up on is followed on its connection by its
// cancellation (RST_STREAM); delivered together, the member may or may not
// start the request before it sees the cancellation. pulse delivers the
// first bytes a path held back and holds the rest, so the test can arrange
// for a held request to arrive alone, long after its cancellation was sent,
// as a request delayed in the network can.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

const (
	methodTxn    = "/etcdserverpb.KV/Txn"
	methodDelete = "/etcdserverpb.KV/DeleteRange"
	// lateTTL is long enough for a session to outlive the cuts of these
	// tests without a keepalive stall (the stall limit is TTL/5).
	lateTTL = 30 * time.Second
)

// paths is a client whose i-th endpoint reaches members[i] through links[i]
// only (AutoSyncInterval 0: it never learns the members' own endpoints).
type paths struct {
	cli   *clientv3.Client
	links []*embedtest.Link
}

func newPaths(t *testing.T, c *embedtest.Cluster, members ...*embedtest.Member) *paths {
	t.Helper()
	p := &paths{}
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
	// Fixed flow-control windows turn off gRPC's bandwidth probes: a probe
	// ping written after a cut would be what the path first holds back.
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<20))
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

// pulse delivers what each connection through l first held back since l
// was cut, and holds back the rest: it restores l and cuts it again at once.
// A link's proxy forwards the bytes of one read from a connection per
// restore; the read that follows, with whatever the client wrote later,
// waits for the next restore.
func pulse(l *embedtest.Link) {
	l.Restore()
	l.Cut()
}

// steer leaves cli's round-robin balancer, over exactly two connected paths
// of which one is cut, so that its next request goes over the cut path
// (toCut) or the open one. The balancer takes the paths in turn: a probe
// that times out went over the cut path, so the next request goes over the
// open one, and vice versa. steer stops after one probe of each kind, the
// last one over the path the next request must not take: so the cut path
// is known to be in the rotation, and the open one has just been answered
// (its client sends no keepalive ping for a while, a ping that could be
// the first thing the open path holds back if it is cut next).
func steer(t *testing.T, cli *clientv3.Client, toCut bool) {
	t.Helper()
	prev := false
	for i := 0; i < 10; i++ {
		ok := probe(cli)
		if i > 0 && ok != prev && ok == toCut {
			return
		}
		prev = ok
	}
	t.Fatal("cannot steer the balancer: the cut path is not in its rotation")
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

// deliverHeld pulses l until member m has received a write more than
// before (at most three pulses, two seconds each): the first thing l held
// back was a request, or the first part of one (gRPC may write a request's
// headers and its message apart), whose rest the next pulse delivers. It
// reports whether a write arrived.
func deliverHeld(l *embedtest.Link, m *embedtest.Member, before int64) bool {
	for i := 0; i < 3; i++ {
		pulse(l)
		if awaitDelivery(m, before, 2*time.Second) {
			return true
		}
	}
	return false
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

// grant is what the tests need of a Lock or a Leadership.
type grant struct {
	key     string
	token   Token
	ctx     context.Context // the grant's Context (its monitor started)
	release func(context.Context) error
}

// recipe acquires a name the way one of the package's recipes does.
type recipe struct {
	what    string // for messages: "lock", "leadership"
	acquire func(ctx context.Context, s *Session, name string) (grant, error)
}

func lockGrant(l *Lock) grant { return grant{l.Key(), l.Token(), l.Context(), l.Unlock} }

var (
	mutexLock = recipe{"lock", func(ctx context.Context, s *Session, name string) (grant, error) {
		l, err := NewMutex(s, name).Lock(ctx)
		if err != nil {
			return grant{}, err
		}
		return lockGrant(l), nil
	}}
	mutexTryLock = recipe{"lock", func(ctx context.Context, s *Session, name string) (grant, error) {
		l, err := NewMutex(s, name).TryLock(ctx)
		if err != nil {
			return grant{}, err
		}
		return lockGrant(l), nil
	}}
	campaign = recipe{"leadership", func(ctx context.Context, s *Session, name string) (grant, error) {
		l, err := NewElection(s, name).Campaign(ctx, s.Identity())
		if err != nil {
			return grant{}, err
		}
		return grant{l.Key(), l.Token(), l.Context(), l.Resign}, nil
	}}
)

// mustAcquire acquires name with r on s or fails the test.
func (r recipe) mustAcquire(t *testing.T, s *Session, name string) grant {
	t.Helper()
	g, err := r.acquire(testCtx(t, 30*time.Second), s, name)
	if err != nil {
		t.Fatalf("%s %q: %v", r.what, name, err)
	}
	return g
}

// reacquire acquires name with r on s until it gets the key name want (a
// name the session used before and must free first), for at most d; it
// returns the last grant either way and whether its key is want. It polls:
// when a session frees a name is not observable.
func (r recipe) reacquire(t *testing.T, s *Session, name, want string, d time.Duration) (grant, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		g := r.mustAcquire(t, s, name)
		if g.key == want || time.Now().After(deadline) {
			return g, g.key == want
		}
		if err := g.release(testCtx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLateDeleteCannotFreeAReusedName: a Lock given up while its enqueue
// Txn is held on a cut path leaves a key of unknown outcome. The reaper's
// first delete of it goes over the other path, which is cut too, and is held
// there; it times out, and a retry succeeds over the first path, healed. The
// session frees the name and takes it again for a new grant, and another
// session waits behind it. When the held-back delete arrives, it must not
// delete the new grant's key: the waiter must not be granted, nor the holder
// lose its grant, while the holder holds (it never unlocks).
func TestLateDeleteCannotFreeAReusedName(t *testing.T) { testLateDelete(t, mutexLock) }

// TestLateDeleteCannotMakeTwoLeaders is TestLateDeleteCannotFreeAReusedName
// for an Election: a held-back delete must not make a second candidate
// leader while the first one's leadership is live.
func TestLateDeleteCannotMakeTwoLeaders(t *testing.T) { testLateDelete(t, campaign) }

func testLateDelete(t *testing.T, r recipe) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late, early := p.links[0], p.links[1] // late reaches fs[0], early fs[1]
	direct := newClient(t, c)
	holder := openSession(t, p.cli, WithTTL(lateTTL), WithIdentity("holder"))
	waiter := openSession(t, direct, WithIdentity("waiter"))
	t.Cleanup(p.restoreAll)
	name := uniqueName(t)
	ctx := testCtx(t, time.Minute)

	// The name the session's first key of this lock gets (its slot 0).
	g0 := r.mustAcquire(t, holder, name)
	key := g0.key
	if err := g0.release(ctx); err != nil {
		t.Fatal(err)
	}

	// The enqueue Txn goes over early, cut, and the acquisition gives up:
	// its outcome is unknown. The reaper's delete goes next, over late, cut
	// just before.
	early.Cut()
	steer(t, p.cli, true)
	late.Cut()
	lctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := r.acquire(lctx, holder, name)
		errc <- err
	}()
	// While the Txn is in flight: whatever late's connection wrote after
	// the cut (say, the ack of a ping the member sent with the probe's
	// answer) goes through now, so that the first thing late holds back is
	// the reaper's delete. Without this pulse the test missed in about two
	// runs of five.
	time.Sleep(500 * time.Millisecond) // settling; nothing to await
	pulse(late)
	cancel()
	err := <-errc
	if err == nil {
		t.Fatalf("%s over a cut path granted", r.what)
	}
	early.Restore()
	t.Logf("gave up: %v", err)

	// The session frees the name and reuses it; a waiter queues behind.
	g1, reused := r.reacquire(t, holder, name, key, 30*time.Second)
	t.Logf("holder: %s (token %d), name reused: %v", g1.key, g1.token, reused)
	held := g1.ctx
	type result struct {
		g   grant
		err error
	}
	granted := make(chan result, 1)
	go func() {
		g, err := r.acquire(ctx, waiter, name)
		granted <- result{g, err}
	}()
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(keysUnder(t, direct, name)) == 2 })

	// The held-back delete arrives.
	before := fs[0].Calls(methodDelete) + fs[0].Calls(methodTxn)
	if !deliverHeld(late, fs[0], before) {
		t.Logf("no held-back write reached %s", fs[0].Name())
	}
	// Nothing else happens now: the holder holds, the waiter waits.
	stillHeld := func(d time.Duration) {
		select {
		case g := <-granted:
			if g.err != nil {
				t.Fatalf("waiter: %v", g.err)
			}
			t.Fatalf("two holders: the waiter was granted the %s, %s (token %d), while %s (token %d) never released it (its context then: %v); keys now %v",
				r.what, g.g.key, g.g.token, g1.key, g1.token, held.Err(), keysUnder(t, direct, name))
		case <-held.Done():
			t.Fatalf("the holder lost the %s, %s (token %d), without releasing it: %v; keys now %v",
				r.what, g1.key, g1.token, context.Cause(held), keysUnder(t, direct, name))
		case <-time.After(d): // asserts that nothing happens
		}
	}
	stillHeld(3 * time.Second)
	// The rest of what late held back (the delete's cancellation) arrives.
	late.Restore()
	stillHeld(time.Second)
	if err := g1.release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case g := <-granted:
		if g.err != nil {
			t.Fatalf("waiter: %v", g.err)
		}
		_ = g.g.release(ctx)
	case <-ctx.Done():
		t.Fatal("the waiter was never granted after the holder unlocked")
	}
}

// TestLateEnqueueLeavesNoPhantomKey: a Lock's first enqueue Txn is held on
// a cut path; its retry over the open path is granted, and the lock is
// released and its name freed (the session reuses it). When the held-back
// Txn arrives, it must not re-create the key on the session's live lease: no
// key may remain that no grant accounts for, and another session's TryLock
// must succeed.
func TestLateEnqueueLeavesNoPhantomKey(t *testing.T) { testLateEnqueue(t, mutexLock) }

// TestLateTryLockLeavesNoPhantomKey is TestLateEnqueueLeavesNoPhantomKey
// for TryLock's Txn (a Put if the name has no key at all).
func TestLateTryLockLeavesNoPhantomKey(t *testing.T) { testLateEnqueue(t, mutexTryLock) }

func testLateEnqueue(t *testing.T, r recipe) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late, other := p.links[0], p.links[1] // late reaches fs[0]
	direct := newClient(t, c)
	s1 := openSession(t, p.cli, WithTTL(lateTTL), WithIdentity("first"))
	s2 := openSession(t, direct, WithIdentity("second"))
	t.Cleanup(p.restoreAll)
	name := uniqueName(t)
	ctx := testCtx(t, time.Minute)

	// The first attempt goes over late, cut just before (the first thing it
	// holds back); the retry goes over the other path.
	other.Cut()
	steer(t, p.cli, false)
	other.Restore()
	late.Cut()
	start := time.Now()
	g := r.mustAcquire(t, s1, name)
	key := g.key
	t.Logf("granted %s (token %d) after %v", key, g.token, time.Since(start).Round(time.Millisecond))
	// Release once late is out of the rotation, so the release and what
	// follows it go over the other path.
	awaitPathDown(t, p.cli, 15*time.Second)
	if err := g.release(ctx); err != nil {
		t.Fatal(err)
	}
	// The session frees the name: it takes it again, and lets it go.
	g2, reused := r.reacquire(t, s1, name, key, 30*time.Second)
	t.Logf("name reused: %v", reused)
	if err := g2.release(ctx); err != nil {
		t.Fatal(err)
	}

	// The held-back Txn arrives, while a watch looks at the session's keys
	// of this name ("<queue>/<lease>-<slot>"; a slot is any suffix).
	mine := key[:strings.LastIndex(key, "-")+1]
	resp, err := direct.Get(ctx, mine, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := direct.Watch(wctx, mine, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	// noPut asserts that no key of the session is created within d.
	noPut := func(d time.Duration) {
		window := time.After(d) // asserts that nothing happens
		for {
			select {
			case wr, ok := <-wch:
				if !ok {
					t.Fatal("watch ended")
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.PUT {
						t.Errorf("phantom key: %s created at revision %d on lease %x (s1's: %x) after its grant was released",
							ev.Kv.Key, ev.Kv.CreateRevision, ev.Kv.Lease, int64(s1.Lease()))
					}
				}
			case <-window:
				return
			}
		}
	}
	before := writes(fs[0])
	if !deliverHeld(late, fs[0], before) {
		t.Logf("no held-back write reached %s", fs[0].Name())
	}
	noPut(2 * time.Second) // a write it carries is applied within moments
	// The rest of what late held back (the Txn's cancellation) arrives.
	late.Restore()
	noPut(time.Second)
	gresp, err := direct.Get(ctx, mine, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range gresp.Kvs {
		t.Errorf("key with no grant: %s (lease %x, value %q)", kv.Key, kv.Lease, kv.Value)
	}
	tl, err := NewMutex(s2, name).TryLock(ctx)
	if err != nil {
		t.Fatalf("another session's TryLock: %v", err)
	}
	if err := tl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLateProclaimCannotOverwrite: a leader's Proclaim("v1") is held on a cut
// path and given up on (its outcome unknown to the leader); once that path
// is out of the balancer's rotation, Proclaim("v2") succeeds over the other
// path. Only then does the held-back Txn of "v1" reach its member: it must
// not overwrite "v2" (a Proclaim guarded only by the key's create revision
// did), neither for Leader and a direct read nor for an Observe stream,
// which must never report "v1" after "v2".
func TestLateProclaimCannotOverwrite(t *testing.T) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late := p.links[0] // late reaches fs[0]
	direct := newClient(t, c)
	ls := openSession(t, p.cli, WithTTL(lateTTL), WithIdentity("leader"))
	observer := openSession(t, direct, WithIdentity("observer"))
	t.Cleanup(p.restoreAll)
	name := uniqueName(t)
	ctx := testCtx(t, 2*time.Minute)

	l, err := NewElection(ls, name).Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	e := NewElection(observer, name)
	// Every value the observer is told, in order; sawV2 is closed once it
	// was told "v2".
	var (
		mu     sync.Mutex
		values []string
	)
	sawV2 := make(chan struct{})
	octx, ocancel := context.WithCancel(ctx)
	obs := e.Observe(octx)
	odone := make(chan struct{})
	go func() {
		defer close(odone)
		v2 := false
		for info := range obs {
			mu.Lock()
			values = append(values, info.Value)
			mu.Unlock()
			if info.Value == "v2" && !v2 {
				v2 = true
				close(sawV2)
			}
		}
	}()
	t.Cleanup(func() { ocancel(); <-odone })
	observed := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), values...)
	}

	// Proclaim("v1") goes over late, held from now on, and is given up on.
	late.Hold()
	steer(t, p.cli, true)
	before := fs[0].Calls(methodTxn)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	err = l.Proclaim(pctx, "v1")
	pcancel()
	if err == nil {
		t.Fatal("Proclaim over a held path succeeded")
	}
	t.Logf("gave up on v1: %v", err)
	if n := fs[0].Calls(methodTxn); n != before {
		t.Fatalf("%s received %d Txn(s) while its path was held", fs[0].Name(), n-before)
	}

	// Once late is out of the rotation, Proclaim("v2") goes over the other
	// path (whatever it sends first: a read of the key, or the Txn) and
	// succeeds; the observer is told.
	awaitPathDown(t, p.cli, 30*time.Second)
	if err := l.Proclaim(ctx, "v2"); err != nil {
		t.Fatalf("Proclaim(v2) after the path healed: %v", err)
	}
	select {
	case <-sawV2:
	case <-ctx.Done():
		t.Fatalf("the observer was never told v2; told %q", observed())
	}

	// The held-back Txn of v1 arrives now, without its cancellation.
	late.Restore()
	if !awaitDelivery(fs[0], before, 10*time.Second) {
		t.Fatalf("the held-back Proclaim never reached %s", fs[0].Name())
	}
	// Its write, if allowed, is applied within moments: a window in which
	// nothing may happen (absence cannot be awaited).
	time.Sleep(3 * time.Second)

	info, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	resp, err := direct.Get(ctx, l.Key())
	if err != nil {
		t.Fatal(err)
	}
	got := "<no key>"
	if len(resp.Kvs) == 1 {
		got = decodeValue(resp.Kvs[0].Value).Value
	}
	vs := observed()
	after := false
	for _, v := range vs {
		after = after || v == "v2"
		if after && v == "v1" {
			t.Errorf("Observe reported v1 after v2: told %q", vs)
			break
		}
	}
	if info.Value != "v2" || got != "v2" {
		t.Errorf("the late Proclaim overwrote the leader's value: Leader = %q, key %s = %q, want v2 (observer told %q)",
			info.Value, l.Key(), got, vs)
	}
	if vs[len(vs)-1] != "v2" {
		t.Errorf("the observer was last told %q, want v2 (told %q)", vs[len(vs)-1], vs)
	}
	// The leader still leads and can proclaim again.
	if err := l.Proclaim(ctx, "v3"); err != nil {
		t.Errorf("Proclaim(v3): %v", err)
	}
}
