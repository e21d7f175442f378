package etcdlock_test

// Rounds of "the client's paths black-hole as a wait starts": a waiter, or
// an Observe, whose client's paths black-hole as it starts must never open
// its watch on the client's balanced connection, however long the keeper
// lends none (keyBook.watcher waits for the keeper), and must still hear
// of the grant (or the new leader) within blackHoleBound of it in etcd once
// the keeper lends a connection again. A watch used to wait 1 s for the
// keeper, then open on the balanced connection (testhook.SharedWatch),
// which may take a path that black-holed; watchCtx cancelled it when the
// keeper lent again. Each round holds the keeper from reconnecting
// (testhook.HoldKeeper) for keeperHold after the watch starts to wait
// (testhook.ConnWait), longer than that 1 s, with the anchor watch holding
// the client's watch stream on a cut path: a SharedWatch fails the round.
//
// By default each test runs blackHoleRoundsCI rounds (CI's time is short;
// with the old fallback every round fails); ETCDLOCK_BLACKHOLE_ROUNDS=N
// runs N (about 10 s a round):
//
//	ETCDLOCK_BLACKHOLE_ROUNDS=8 go test -race -run 'BlackHoledAtStart' -v ./tests/etcdlock/

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// blackHoleBound bounds the time from a grant (or a new leader) in
	// etcd to the caller hearing it while its path to the leader is
	// black-holed (DESIGN.md, "What bounds the time from a grant in etcd
	// to the caller hearing it, with a black-holed path"): the keeper
	// leaves the path within 5 s of the cut (two failed status checks),
	// waits at most 1 s before it reconnects, finds a member that answers
	// within 1 s, and the watches move with it; 2 s more for the re-opened
	// watch and the hand-off on a busy machine.
	blackHoleBound = 9 * time.Second
	// blackHoleRoundsCI is the rounds of each test by default.
	blackHoleRoundsCI = 1
	// cutTTL is the cut client's session TTL: the keepalives of a round
	// where every path is cut stop for up to 10 s (cut, the keeper leaves
	// the path, keeperHold, the keeper back on a member), and must not end
	// the session.
	cutTTL = 30 * time.Second
	// keeperHold is how long a round holds the keeper from lending a
	// connection once a watch waits for one: twice the 1 s a watch used
	// to wait before it opened on the balanced connection.
	keeperHold = 2 * time.Second
	// setupBound bounds what a round waits for that the bound does not
	// cover: an enqueue retried past the cut path, the keeper back on the
	// leader after a restore.
	setupBound = 30 * time.Second
)

// blackHoleRounds is the rounds each test runs: ETCDLOCK_BLACKHOLE_ROUNDS,
// else blackHoleRoundsCI.
func blackHoleRounds(t *testing.T) int {
	v := os.Getenv("ETCDLOCK_BLACKHOLE_ROUNDS")
	if v == "" {
		return blackHoleRoundsCI
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("ETCDLOCK_BLACKHOLE_ROUNDS=%q: want a positive count", v)
	}
	return n
}

// awaitSecondKey waits for the put of a second key under name, from
// revision rev on: the waiter (or the second candidate) is in the queue.
func awaitSecondKey(t *testing.T, ctx context.Context, cli *clientv3.Client, name, first string, rev int64) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, setupBound)
	defer cancel()
	wch := cli.Watch(wctx, layout.NamePrefix(name), clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithFilterDelete())
	for resp := range wch {
		for _, ev := range resp.Events {
			if string(ev.Kv.Key) != first {
				return
			}
		}
	}
	t.Fatalf("no second key under %q within %v", name, setupBound)
}

// TestWaiterBlackHoledAtStart: a waiter whose paths are cut as it
// enqueues, while its keeper lends no connection, never opens its watch on
// the client's balanced connection, and is granted within blackHoleBound
// of the holder's release once the keeper lends a connection again.
func TestWaiterBlackHoledAtStart(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	cc := newCutClient(t, c)
	// No own-key monitor: its watch would wait for the keeper too, and its
	// ConnWait, if first, would start the round's hold before the waiter's.
	testhook.SetMonitorDelay(cc.s, time.Hour)
	direct := c.TestClient(t)
	hs := locktest.OpenSession(t, direct)
	runRounds(t, "grant", func() (time.Duration, bool) { return waiterRound(t, cc, hs) })
}

// runRounds runs the test's rounds, each of which returns how long the
// caller took to hear the change, and whether no watch opened on the
// balanced connection and the change was heard within the bound (a round
// that failed either has failed the test and ended its wait).
func runRounds(t *testing.T, what string, round func() (time.Duration, bool)) {
	var worst time.Duration
	n, failed := blackHoleRounds(t), 0
	for i := range n {
		took, ok := round()
		if !ok {
			failed++
			continue
		}
		t.Logf("round %d: %s heard after %v", i, what, took.Round(time.Millisecond))
		worst = max(worst, took)
	}
	t.Logf("%d of %d rounds failed (a shared watch, or the %v bound missed); the slowest %s of the others took %v", failed, n, blackHoleBound, what, worst.Round(time.Millisecond))
}

// waiterRound is one round of TestWaiterBlackHoledAtStart: it returns the
// time from the release to the grant, and whether it was heard in time and
// no watch opened on the balanced connection.
//
// The keeper is held from reconnecting, and the paths are cut the moment
// the waiter's enqueue is answered (Enqueued): its watch opens on the
// keeper's connection, which the keeper leaves (it retires the
// connection's watcher, which ends the watch); the re-opened watch waits
// for the keeper (ConnWait). For keeperHold it must not open on the
// client's balanced connection (SharedWatch), which would join the
// client's watch stream, held by the anchor watch on the cut path at.
// Then every other path is restored, the keeper let go, and the holder
// releases: the keeper finds a member and lends its connection, and the
// watch opens there.
func waiterRound(t *testing.T, cc *cutClient, hs *etcdlock.Session) (time.Duration, bool) {
	t.Helper()
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*setupBound)
	holder, err := etcdlock.NewMutex(hs, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cc.awaitPinned(t)
	at, unanchor := cc.anchorWatch(t, ctx)
	defer unanchor()
	defer cc.restore()
	release := testhook.HoldKeeper(cc.s)
	defer release()
	var cut sync.Once
	h := cc.watchHooks(t, func() { cut.Do(cc.cutAll) })
	lctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	type result struct {
		l   *etcdlock.Lock
		err error
		at  time.Time
	}
	granted := make(chan result, 1)
	go func() {
		l, err := etcdlock.NewMutex(cc.s, name).Lock(lctx)
		granted <- result{l, err, time.Now()}
	}()
	select {
	case <-h.waits:
	case r := <-granted:
		t.Fatalf("the waiter returned (%v) before its watch waited for the keeper", r.err)
	case <-time.After(setupBound):
		t.Fatalf("no watch of the waiter waited for the keeper within %v", setupBound)
	}
	ok := h.noSharedWatch(t, keeperHold)
	cc.restoreAllBut(at)
	release()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	r := <-granted
	if r.at.Sub(released) > blackHoleBound {
		t.Errorf("the waiter not granted %v after the release", blackHoleBound)
		ok = false
	}
	if r.err != nil && ok {
		t.Fatalf("the waiter: %v", r.err)
	}
	if r.l != nil {
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatalf("unlock: %v", err)
		}
	}
	return r.at.Sub(released), h.noSharedWatch(t, 0) && ok
}

// TestObserveBlackHoledAtStart: an Observe whose paths are cut while its
// keeper lends no connection never opens its watch on the client's
// balanced connection, and reports the new leader within blackHoleBound of
// the old one's resignation once the keeper lends a connection again.
func TestObserveBlackHoledAtStart(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	cc := newCutClient(t, c)
	direct := c.TestClient(t)
	sa, sb := locktest.OpenSession(t, direct), locktest.OpenSession(t, direct)
	runRounds(t, "new leader", func() (time.Duration, bool) { return observeRound(t, cc, sa, sb, direct) })
}

// observeRound is one round of TestObserveBlackHoledAtStart: it returns
// the time from the resignation to the report of the new leader, and
// whether it was reported in time and no watch opened on the balanced
// connection.
//
// As in waiterRound, the keeper is held from reconnecting, every path is
// cut once Observe follows the leader, and the keeper leaves its path.
// Observe reads the leader again before it watches, and a read needs a
// path: so every path but the anchor's is restored at once. Observe's
// watch then waits for the keeper (ConnWait), and for keeperHold it must
// not open on the balanced connection (SharedWatch), which would join the
// anchor's stream down the cut path. Then the keeper may reconnect, and
// the leader resigns.
func observeRound(t *testing.T, cc *cutClient, sa, sb *etcdlock.Session, direct *clientv3.Client) (time.Duration, bool) {
	t.Helper()
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*setupBound)
	a, err := etcdlock.NewElection(sa, name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *etcdlock.Leadership, 1)
	go func() {
		l, _ := etcdlock.NewElection(sb, name).Campaign(ctx, "b")
		won <- l // nil if the round failed first
	}()
	awaitSecondKey(t, ctx, direct, name, a.Key(), a.Token().Revision())
	cc.awaitPinned(t)
	at, unanchor := cc.anchorWatch(t, ctx)
	defer unanchor()
	defer cc.restore()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := etcdlock.NewElection(cc.s, name).Observe(octx)
	if !awaitObserved(t, seen, "a", setupBound) {
		t.FailNow()
	}
	h := cc.watchHooks(t, nil)
	release := testhook.HoldKeeper(cc.s)
	defer release()
	cc.cutAll()
	waitFor(t, setupBound, "the keeper to leave the cut path", func() bool {
		lent, _ := testhook.LentConn(cc.s)
		return !lent
	})
	cc.restoreAllBut(at)
	select {
	case <-h.waits:
	case <-time.After(setupBound):
		t.Fatalf("Observe's watch did not wait for the keeper within %v", setupBound)
	}
	ok := h.noSharedWatch(t, keeperHold)
	release()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	ok = awaitObserved(t, seen, "b", blackHoleBound) && ok
	took := time.Since(resigned)
	if b := <-won; b == nil {
		t.Fatal("the second candidate did not win")
	} else if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	return took, h.noSharedWatch(t, 0) && ok
}

// awaitObserved reads seen until it reports a leader with value, within
// d; else it fails the test and returns false.
func awaitObserved(t *testing.T, seen <-chan etcdlock.LeaderInfo, value string, d time.Duration) bool {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case v, ok := <-seen:
			if !ok {
				t.Fatal("Observe closed")
			}
			if v.Value == value {
				return true
			}
		case <-deadline:
			t.Errorf("Observe did not report leader %q within %v (its watch opened down a cut path)", value, d)
			return false
		}
	}
}
