package etcdlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// TestLateLockAllLeavesNoPhantomKey is TestLateEnqueueLeavesNoPhantomKey
// for LockAll's Txn (a key in each of two names; the test watches the
// first).
func TestLateLockAllLeavesNoPhantomKey(t *testing.T) { testLateEnqueue(t, lockAllPair) }

// lockAllPair takes name and name+"/pair" with LockAll; the grant is name's.
var lockAllPair = recipe{"lock", func(ctx context.Context, s *etcdlock.Session, name string) (grant, error) {
	ls, err := etcdlock.LockAll(ctx, s, name, name+"/pair")
	if err != nil {
		return grant{}, err
	}
	l := ls.Lock(name)
	return grant{l.Key(), l.Token(), ls.Context(), ls.Unlock}, nil
}}

func testLateEnqueue(t *testing.T, r recipe) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late, other := p.links[0], p.links[1] // late reaches fs[0]
	direct := c.TestClient(t)
	s1 := locktest.OpenSession(t, p.cli, etcdlock.WithTTL(lateTTL), etcdlock.WithIdentity("first"))
	s2 := locktest.OpenSession(t, direct, etcdlock.WithIdentity("second"))
	t.Cleanup(p.restoreAll)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)

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
	wch := watchFrom(t, ctx, direct, mine)
	// noPut asserts that no key of the session is created within d.
	noPut := func(d time.Duration) { assertNoPut(t, wch, s1, d) }
	before := writes(fs[0])
	if !deliverHeld(late, fs[0], before) {
		t.Logf("no held-back write reached %s", fs[0].Name())
	}
	noPut(2 * time.Second) // a write it carries is applied within moments
	// The rest of what late held back (the Txn's cancellation) arrives.
	late.Restore()
	noPut(time.Second)
	assertNoKeyLeft(t, ctx, direct, s2, mine, name)
}

// watchFrom watches the keys under prefix from the revision after the
// current one, until the test ends.
func watchFrom(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) clientv3.WatchChan {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	t.Cleanup(wcancel)
	return cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
}

// assertNoPut asserts that wch reports no key created (of s1's, released
// grant) within d.
func assertNoPut(t *testing.T, wch clientv3.WatchChan, s1 *etcdlock.Session, d time.Duration) {
	t.Helper()
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

// assertNoKeyLeft checks that no key is left under mine (the first
// session's keys of name) and that s2 can TryLock name.
func assertNoKeyLeft(t *testing.T, ctx context.Context, direct *clientv3.Client, s2 *etcdlock.Session, mine, name string) {
	t.Helper()
	gresp, err := direct.Get(ctx, mine, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range gresp.Kvs {
		t.Errorf("key with no grant: %s (lease %x, value %q)", kv.Key, kv.Lease, kv.Value)
	}
	tl, err := etcdlock.NewMutex(s2, name).TryLock(ctx)
	if err != nil {
		t.Fatalf("another session's TryLock: %v", err)
	}
	if err := tl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
