package etcdlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSecurityTeams: alice (team-a) uses every recipe and the inspection
// functions on team-a/ names with only readwrite on that prefix, over TLS,
// her session's keepalives pinned to the leader; on team-b/ names each of
// them fails at once with a permission error and leaves no key; the keys
// hold no secrets.
func TestSecurityTeams(t *testing.T) {
	sc := startSecure(t)
	ctx := embedtest.Context(t, 2*time.Minute)

	leader, err := sc.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kaBefore := leader.Calls(sc.leaseKeepAlive)
	s := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/1"), etcdlock.WithTTL(5*time.Second))

	l := teamsMutex(t, ctx, sc, s)
	teamsElection(t, ctx, sc, s)
	w1 := teamsSemaphoreAndRWMutex(t, ctx, s)
	teamsOtherTeamDenied(t, ctx, sc, s)
	teamsNoSecrets(t, ctx, sc)
	teamsReader(t, ctx, sc, s, l)

	// alice's session renews its lease on the leader's pinned stream, with
	// only her own permissions (the stream finds the leader with Status).
	v0 := s.ValidUntil()
	waitFor(t, 30*time.Second, "alice's keepalives to be acknowledged", func() bool {
		return s.ValidUntil().After(v0.Add(time.Second))
	})
	if got := leader.Calls(sc.leaseKeepAlive) - kaBefore; got == 0 {
		t.Errorf("the leader %s got no keepalive from alice's sessions", leader.Name())
	}

	if err := w1.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close of alice's session (revoke): %v", err)
	}
	if keys := sc.rootKeys(t, layout.ListPrefix("team-a/")); len(keys) != 0 {
		t.Errorf("keys under team-a/ after alice's session closed: %q", keys)
	}
}

// teamsMutex: Mutex Lock, TryLock, Describe and List as alice; it returns
// her lock of team-a/job, held.
func teamsMutex(t *testing.T, ctx context.Context, sc *secureCluster, s *etcdlock.Session) *etcdlock.Lock {
	t.Helper()
	l := mustLock(t, etcdlock.NewMutex(s, "team-a/job"))
	if _, err := etcdlock.NewMutex(locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/2")), "team-a/job").TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Errorf("TryLock of a held team-a/job: %v, want ErrLocked", err)
	}
	st, err := etcdlock.Describe(ctx, sc.alice, "team-a/job")
	if err != nil {
		t.Fatalf("Describe as alice: %v", err)
	}
	if st.Holder == nil || st.Holder.Token != l.Token() || st.Holder.Identity != "alice/1" {
		t.Errorf("Describe: holder %+v, want alice/1 with token %d", st.Holder, l.Token())
	}
	ls, err := etcdlock.List(ctx, sc.alice, "team-a/")
	if err != nil {
		t.Fatalf("List(team-a/) as alice: %v", err)
	}
	if len(ls) != 1 || ls[0].Name != "team-a/job" {
		t.Errorf("List(team-a/) = %+v, want team-a/job", ls)
	}
	return l
}

// teamsElection: Election Campaign, Leader, Observe, Proclaim and Resign as
// alice.
func teamsElection(t *testing.T, ctx context.Context, sc *secureCluster, s *etcdlock.Session) {
	t.Helper()
	e := etcdlock.NewElection(s, "team-a/leader")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := etcdlock.NewElection(locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/observer")), "team-a/leader").Observe(octx)
	lead, err := e.Campaign(ctx, "a-1")
	if err != nil {
		t.Fatalf("Campaign as alice: %v", err)
	}
	if info, err := e.Leader(ctx); err != nil || info.Value != "a-1" || info.Token != lead.Token() {
		t.Errorf("Leader = %+v, %v; want a-1", info, err)
	}
	if err := lead.Proclaim(ctx, "a-2"); err != nil {
		t.Errorf("Proclaim: %v", err)
	}
	for seen := false; !seen; {
		select {
		case info, ok := <-obs:
			if !ok {
				t.Fatal("Observe closed")
			}
			seen = info.Value == "a-2"
		case <-ctx.Done():
			t.Fatal("Observe never saw a-2")
		}
	}
	if err := lead.Resign(ctx); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

// teamsSemaphoreAndRWMutex: Semaphore and RWMutex as alice; it returns her
// write lock of team-a/rw, held.
func teamsSemaphoreAndRWMutex(t *testing.T, ctx context.Context, s *etcdlock.Session) *etcdlock.Lock {
	t.Helper()
	sem := etcdlock.NewSemaphore(s, "team-a/pool", 2)
	g1, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore.Acquire: %v", err)
	}
	g2, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore.TryAcquire: %v", err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Errorf("third TryAcquire of 2: %v, want ErrLocked", err)
	}
	rw := etcdlock.NewRWMutex(s, "team-a/rw")
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
		t.Errorf("TryLock with a reader: %v, want ErrLocked", err)
	}
	for _, g := range []*etcdlock.Lock{g1, g2, r1} {
		if err := g.Unlock(ctx); err != nil {
			t.Errorf("Unlock %s: %v", g.Key(), err)
		}
	}
	w1, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("RWMutex.Lock: %v", err)
	}
	return w1
}

// attempt is an operation a permission must refuse.
type attempt struct {
	what string
	do   func(ctx context.Context) error
}

// expectDenied runs each attempt (30 s each at most) and checks it was
// refused at once (see denied).
func expectDenied(t *testing.T, ctx context.Context, attempts []attempt) {
	t.Helper()
	for _, c := range attempts {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		err := c.do(cctx)
		cancel()
		denied(t, c.what, err, time.Since(t0))
	}
}

// teamsOtherTeamDenied: bob holds team-b/job; alice can neither take, nor
// wait for, nor see it.
func teamsOtherTeamDenied(t *testing.T, ctx context.Context, sc *secureCluster, s *etcdlock.Session) {
	t.Helper()
	bs := locktest.OpenSession(t, sc.bob, etcdlock.WithIdentity("bob/1"))
	bl := mustLock(t, etcdlock.NewMutex(bs, "team-b/job"))
	bobKeys := sc.rootKeys(t, layout.ListPrefix("team-b/"))
	expectDenied(t, ctx, []attempt{
		{"Lock team-b/job", func(ctx context.Context) error { _, err := etcdlock.NewMutex(s, "team-b/job").Lock(ctx); return err }},
		{"TryLock team-b/job", func(ctx context.Context) error { _, err := etcdlock.NewMutex(s, "team-b/job").TryLock(ctx); return err }},
		{"Lock team-b/free", func(ctx context.Context) error { _, err := etcdlock.NewMutex(s, "team-b/free").Lock(ctx); return err }},
		{"Describe team-b/job", func(ctx context.Context) error { _, err := etcdlock.Describe(ctx, sc.alice, "team-b/job"); return err }},
		{"List team-b/", func(ctx context.Context) error { _, err := etcdlock.List(ctx, sc.alice, "team-b/"); return err }},
		{"List of everything", func(ctx context.Context) error { _, err := etcdlock.List(ctx, sc.alice, ""); return err }},
		{"Campaign team-b/leader", func(ctx context.Context) error {
			_, err := etcdlock.NewElection(s, "team-b/leader").Campaign(ctx, "x")
			return err
		}},
		{"Leader team-b/leader", func(ctx context.Context) error {
			_, err := etcdlock.NewElection(s, "team-b/leader").Leader(ctx)
			return err
		}},
		{"Semaphore team-b/pool", func(ctx context.Context) error {
			_, err := etcdlock.NewSemaphore(s, "team-b/pool", 2).Acquire(ctx)
			return err
		}},
		{"RLock team-b/rw", func(ctx context.Context) error { _, err := etcdlock.NewRWMutex(s, "team-b/rw").RLock(ctx); return err }},
		{"revoke bob's lease", func(ctx context.Context) error { _, err := sc.alice.Revoke(ctx, bs.Lease()); return err }},
		{"delete bob's key (break)", func(ctx context.Context) error {
			_, err := sc.alice.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(bl.Key()), ">", 0)).
				Then(clientv3.OpDelete(bl.Key())).Commit()
			return err
		}},
	})
	if got := sc.rootKeys(t, layout.ListPrefix("team-b/")); strings.Join(got, ",") != strings.Join(bobKeys, ",") {
		t.Errorf("keys under team-b/ after alice's attempts: %q, want only bob's %q", got, bobKeys)
	}
	if bl.Context().Err() != nil {
		t.Errorf("bob's lock ended: %v", context.Cause(bl.Context()))
	}
	if s.Err() != nil {
		t.Fatalf("alice's session ended after her refused attempts: %v", s.Err())
	}
}

// teamsNoSecrets: the keys hold no secrets: every value is
// {"v","identity","value","at","granted"} (a break marker's: {"v","token","at"}; a
// barrier has none).
func teamsNoSecrets(t *testing.T, ctx context.Context, sc *secureCluster) {
	t.Helper()
	resp, err := sc.root.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatal("no keys while locks are held")
	}
	for _, kv := range resp.Kvs {
		for _, pw := range []string{sc.rootPW, sc.alicePW, sc.bobPW, sc.audPW} {
			if strings.Contains(string(kv.Key), pw) || strings.Contains(string(kv.Value), pw) {
				t.Errorf("key %q (value %q) holds a password", kv.Key, kv.Value)
			}
		}
		if !strings.HasPrefix(string(kv.Key), layout.KeyRoot) {
			t.Errorf("key %q outside %q", kv.Key, layout.KeyRoot)
			continue
		}
		if _, _, ok := layout.SessionOfKey(string(kv.Key)); ok {
			if len(kv.Value) != 0 {
				t.Errorf("barrier %q holds %q, want nothing", kv.Key, kv.Value)
			}
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(kv.Value, &fields); err != nil {
			t.Errorf("value of %q: %v", kv.Key, err)
		}
		allowed := map[string]bool{"v": true, "identity": true, "value": true, "at": true, "granted": true}
		if _, ok := layout.BrokenOf(kv); ok {
			allowed = map[string]bool{"v": true, "token": true, "at": true}
		}
		for f := range fields {
			if !allowed[f] {
				t.Errorf("value of %q has field %q", kv.Key, f)
			}
		}
	}
}

// teamsReader: audrey may read team-a/ (Describe, List, Leader, Observe)
// but not take or break anything there; l is alice's lock of team-a/job.
func teamsReader(t *testing.T, ctx context.Context, sc *secureCluster, s *etcdlock.Session, l *etcdlock.Lock) {
	t.Helper()
	if st, err := etcdlock.Describe(ctx, sc.audrey, "team-a/job"); err != nil || st.Holder == nil || st.Holder.Token != l.Token() {
		t.Errorf("Describe as a reader: %+v, %v", st, err)
	}
	if ls, err := etcdlock.List(ctx, sc.audrey, "team-a/"); err != nil || len(ls) == 0 {
		t.Errorf("List as a reader: %v, %v", ls, err)
	}
	audS := locktest.OpenSession(t, sc.audrey, etcdlock.WithIdentity("audrey/1"))
	teamsReaderElection(t, ctx, s, audS)
	before := sc.rootKeys(t, layout.ListPrefix("team-a/"))
	expectDenied(t, ctx, []attempt{
		{"a reader's Lock", func(ctx context.Context) error { _, err := etcdlock.NewMutex(audS, "team-a/job").Lock(ctx); return err }},
		{"a reader's TryLock of a free name", func(ctx context.Context) error {
			_, err := etcdlock.NewMutex(audS, "team-a/free").TryLock(ctx)
			return err
		}},
		{"a reader's Campaign", func(ctx context.Context) error {
			_, err := etcdlock.NewElection(audS, "team-a/leader").Campaign(ctx, "x")
			return err
		}},
		{"a reader's break", func(ctx context.Context) error { _, err := sc.audrey.Delete(ctx, l.Key()); return err }},
	})
	if got := sc.rootKeys(t, layout.ListPrefix("team-a/")); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Errorf("keys under team-a/ after a reader's attempts: %q, were %q", got, before)
	}
}

// teamsReaderElection: the reader audS sees alice's (s) leader with Leader
// and Observe.
func teamsReaderElection(t *testing.T, ctx context.Context, s, audS *etcdlock.Session) {
	t.Helper()
	lead2, err := etcdlock.NewElection(s, "team-a/leader").Campaign(ctx, "a-3")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := etcdlock.NewElection(audS, "team-a/leader").Leader(ctx); err != nil || info.Value != "a-3" {
		t.Errorf("Leader as a reader: %+v, %v", info, err)
	}
	actx, acancel := context.WithCancel(ctx)
	select {
	case info := <-etcdlock.NewElection(audS, "team-a/leader").Observe(actx):
		if info.Value != "a-3" {
			t.Errorf("Observe as a reader: %+v", info)
		}
	case <-ctx.Done():
		t.Error("Observe as a reader sent nothing")
	}
	acancel()
	if err := lead2.Resign(ctx); err != nil {
		t.Error(err)
	}
}
