package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
	t.Parallel() // touches only its own cluster and names; mostly waits
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late, early := p.links[0], p.links[1] // late reaches fs[0], early fs[1]
	direct := c.TestClient(t)
	holder := locktest.OpenSession(t, p.cli, etcdlock.WithTTL(lateTTL), etcdlock.WithIdentity("holder"))
	waiter := locktest.OpenSession(t, direct, etcdlock.WithIdentity("waiter"))
	t.Cleanup(p.restoreAll)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)

	// The name the session's first key of this lock gets (its slot 0).
	g0 := r.mustAcquire(t, holder, name)
	key := g0.key
	if err := g0.release(ctx); err != nil {
		t.Fatal(err)
	}

	err := giveUpOverCutPaths(t, ctx, r, p.cli, holder, name, early, late)
	early.Restore()
	t.Logf("gave up: %v", err)

	// The session frees the name and reuses it; a waiter queues behind.
	g1, reused := r.reacquire(t, holder, name, key, 30*time.Second)
	t.Logf("holder: %s (token %d), name reused: %v", g1.key, g1.token, reused)
	granted := acquireAsync(ctx, r, waiter, name)
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(keysUnder(t, direct, name)) == 2 })

	// The held-back delete arrives.
	before := fs[0].Calls(methodDelete) + fs[0].Calls(methodTxn)
	if !deliverHeld(late, fs[0], before) {
		t.Logf("no held-back write reached %s", fs[0].Name())
	}
	// Nothing else happens now: the holder holds, the waiter waits.
	stillHeld := func(d time.Duration) { assertStillHeld(t, r, granted, g1, direct, name, d) }
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

// giveUpOverCutPaths cuts early and steers holder's next request (the
// enqueue Txn) onto it, cuts late for the reaper's delete that follows, and
// gives up on the acquisition of name: it returns the acquisition's error
// (the test fails if it was granted).
func giveUpOverCutPaths(t *testing.T, ctx context.Context, r recipe, cli *clientv3.Client, holder *etcdlock.Session, name string, early, late *embedtest.Link) error {
	t.Helper()
	// The enqueue Txn goes over early, cut, and the acquisition gives up:
	// its outcome is unknown. The reaper's delete goes next, over late, cut
	// just before.
	early.Cut()
	steer(t, cli, true)
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
	return err
}

// grantResult is the outcome of an acquisition started by acquireAsync.
type grantResult struct {
	g   grant
	err error
}

// acquireAsync acquires name with r on s in a goroutine and sends the
// outcome on the returned channel.
func acquireAsync(ctx context.Context, r recipe, s *etcdlock.Session, name string) <-chan grantResult {
	granted := make(chan grantResult, 1)
	go func() {
		g, err := r.acquire(ctx, s, name)
		granted <- grantResult{g, err}
	}()
	return granted
}

// assertStillHeld asserts that for d nothing happens: the holder's grant g1
// stays live and the waiter (granted) is not granted.
func assertStillHeld(t *testing.T, r recipe, granted <-chan grantResult, g1 grant, direct *clientv3.Client, name string, d time.Duration) {
	t.Helper()
	held := g1.ctx
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
