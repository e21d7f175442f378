package etcdlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLateProclaimCannotOverwrite: a leader's Proclaim("v1") is held on a cut
// path and given up on (its outcome unknown to the leader); once that path
// is out of the balancer's rotation, Proclaim("v2") succeeds over the other
// path. Only then does the held-back Txn of "v1" reach its member: it must
// not overwrite "v2" (a Proclaim guarded only by the key's create revision
// did), neither for Leader and a direct read nor for an Observe stream,
// which must never report "v1" after "v2".
func TestLateProclaimCannotOverwrite(t *testing.T) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	fs := followersOf(c, leader)
	p := newPaths(t, c, fs...)
	late := p.links[0] // late reaches fs[0]
	direct := c.TestClient(t)
	ls := locktest.OpenSession(t, p.cli, etcdlock.WithTTL(lateTTL), etcdlock.WithIdentity("leader"))
	observer := locktest.OpenSession(t, direct, etcdlock.WithIdentity("observer"))
	t.Cleanup(p.restoreAll)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*time.Minute)

	l, err := etcdlock.NewElection(ls, name).Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	e := etcdlock.NewElection(observer, name)
	rec := recordObserved(t, ctx, e)
	sawV2, observed := rec.sawV2, rec.observed

	// Proclaim("v1") goes over late, held from now on, and is given up on.
	before := proclaimHeld(t, ctx, l, p.cli, late, fs[0])

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

	checkNoOverwrite(t, ctx, e, direct, l, observed)
	// The leader still leads and can proclaim again.
	if err := l.Proclaim(ctx, "v3"); err != nil {
		t.Errorf("Proclaim(v3): %v", err)
	}
}

// observedValues records every value an Observe stream tells, in order;
// sawV2 is closed once it was told "v2".
type observedValues struct {
	mu     sync.Mutex
	values []string
	sawV2  chan struct{}
}

// recordObserved observes e until the test ends, recording what it is told.
func recordObserved(t *testing.T, ctx context.Context, e *etcdlock.Election) *observedValues {
	t.Helper()
	rec := &observedValues{sawV2: make(chan struct{})}
	octx, ocancel := context.WithCancel(ctx)
	obs := e.Observe(octx)
	odone := make(chan struct{})
	go func() {
		defer close(odone)
		v2 := false
		for info := range obs {
			rec.mu.Lock()
			rec.values = append(rec.values, info.Value)
			rec.mu.Unlock()
			if info.Value == "v2" && !v2 {
				v2 = true
				close(rec.sawV2)
			}
		}
	}()
	t.Cleanup(func() { ocancel(); <-odone })
	return rec
}

// observed returns a copy of the values told so far.
func (rec *observedValues) observed() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.values...)
}

// checkNoOverwrite checks that leader l's value is still "v2" for Leader
// and a direct read, and that the observer never heard "v1" after "v2"
// and was last told "v2".
func checkNoOverwrite(t *testing.T, ctx context.Context, e *etcdlock.Election, direct *clientv3.Client, l *etcdlock.Leadership, observed func() []string) {
	t.Helper()
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
		got = testhook.DecodeValue(resp.Kvs[0].Value)
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
}

// proclaimHeld holds late, steers l's Proclaim("v1") onto it and gives up
// on it; it checks that m, behind late, got nothing, and returns m's Txn
// count before.
func proclaimHeld(t *testing.T, ctx context.Context, l *etcdlock.Leadership, cli *clientv3.Client, late *embedtest.Link, m *embedtest.Member) int64 {
	t.Helper()
	late.Hold()
	steer(t, cli, true)
	before := m.Calls(methodTxn)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	err := l.Proclaim(pctx, "v1")
	pcancel()
	if err == nil {
		t.Fatal("Proclaim over a held path succeeded")
	}
	t.Logf("gave up on v1: %v", err)
	if n := m.Calls(methodTxn); n != before {
		t.Fatalf("%s received %d Txn(s) while its path was held", m.Name(), n-before)
	}
	return before
}
