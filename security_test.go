package etcdlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/embedtest"
)

// The security tests run on clusters of their own, with TLS (mutual) and
// etcd authentication on, and two teams whose roles cover exactly their
// names: team-a (user alice) gets readwrite on NamespacePrefix("team-a/"),
// team-b (user bob) on NamespacePrefix("team-b/"); team-a-read (user
// audrey, a dashboard) gets read on NamespacePrefix("team-a/"). Nothing else
// is granted to them: every operation of the library must work with that
// alone.

// secret returns a password no other string in the test contains.
func secret(t testing.TB, who string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return who + "-pw-" + hex.EncodeToString(b[:])
}

// secureCluster is a TLS + auth cluster with the two teams.
type secureCluster struct {
	*embedtest.Cluster
	root                          *clientv3.Client
	rootPW, alicePW, bobPW, audPW string
	alice, bob, audrey            *clientv3.Client
	leaseKeepAlive, authCall      string
}

// startSecure starts a cluster with TLS and auth (and opts), creates the
// teams' roles and users, and returns root, alice and bob clients, closed at
// cleanup.
func startSecure(t testing.TB, opts ...embedtest.Option) *secureCluster {
	t.Helper()
	sc := &secureCluster{
		rootPW:         secret(t, "root"),
		alicePW:        secret(t, "alice"),
		bobPW:          secret(t, "bob"),
		audPW:          secret(t, "audrey"),
		leaseKeepAlive: "/etcdserverpb.Lease/LeaseKeepAlive",
		authCall:       "/etcdserverpb.Auth/Authenticate",
	}
	sc.Cluster = embedtest.Start(t, append([]embedtest.Option{embedtest.WithTLS(), embedtest.WithAuth(sc.rootPW)}, opts...)...)
	sc.root = newClient(t, sc.Cluster)
	ctx := testCtx(t, time.Minute)
	for _, team := range []struct {
		role, user, pw, prefix string
		perm                   clientv3.PermissionType
	}{
		{"team-a", "alice", sc.alicePW, "team-a/", clientv3.PermissionType(clientv3.PermReadWrite)},
		{"team-b", "bob", sc.bobPW, "team-b/", clientv3.PermissionType(clientv3.PermReadWrite)},
		{"team-a-read", "audrey", sc.audPW, "team-a/", clientv3.PermissionType(clientv3.PermRead)},
	} {
		p := NamespacePrefix(team.prefix)
		for _, step := range []func() error{
			func() error { _, err := sc.root.RoleAdd(ctx, team.role); return err },
			func() error {
				_, err := sc.root.RoleGrantPermission(ctx, team.role, p, clientv3.GetPrefixRangeEnd(p), team.perm)
				return err
			},
			func() error { _, err := sc.root.UserAdd(ctx, team.user, team.pw); return err },
			func() error { _, err := sc.root.UserGrantRole(ctx, team.user, team.role); return err },
		} {
			if err := step(); err != nil {
				t.Fatalf("set up %s: %v", team.role, err)
			}
		}
	}
	sc.alice = sc.clientAs(t, "alice", sc.alicePW)
	sc.bob = sc.clientAs(t, "bob", sc.bobPW)
	sc.audrey = sc.clientAs(t, "audrey", sc.audPW)
	return sc
}

// clientAs returns a client logged in as user, closed at cleanup.
func (sc *secureCluster) clientAs(t testing.TB, user, pw string) *clientv3.Client {
	t.Helper()
	cli, err := sc.ClientAs(user, pw)
	if err != nil {
		t.Fatalf("client as %s: %v", user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// calls sums a method's calls over all members.
func (sc *secureCluster) calls(method string) int64 {
	var n int64
	for _, m := range sc.Members() {
		n += m.Calls(method)
	}
	return n
}

// rootKeys returns every key under the lock root, as root.
func (sc *secureCluster) rootKeys(t testing.TB, prefix string) []string {
	t.Helper()
	resp, err := sc.root.Get(testCtx(t, 10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// denied checks that err wraps etcd's permission error and that the call
// failed at once rather than waiting for its context.
func denied(t testing.TB, what string, err error, took time.Duration) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: succeeded, want permission denied", what)
	case !errors.Is(err, rpctypes.ErrPermissionDenied):
		t.Errorf("%s: %v, want an error wrapping rpctypes.ErrPermissionDenied", what, err)
	case took > 10*time.Second:
		t.Errorf("%s: failed only after %v; a refusal must end the call at once", what, took)
	default:
		t.Logf("%s: %v (after %v)", what, err, took.Round(time.Millisecond))
	}
}

// TestSecurityTeams: alice (team-a) uses every recipe and the inspection
// functions on team-a/ names with only readwrite on that prefix, over TLS,
// her session's keepalives pinned to the leader; on team-b/ names each of
// them fails at once with a permission error and leaves no key; the keys
// hold no secrets.
func TestSecurityTeams(t *testing.T) {
	sc := startSecure(t)
	ctx := testCtx(t, 2*time.Minute)

	leader, err := sc.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kaBefore := leader.Calls(sc.leaseKeepAlive)
	s := openSession(t, sc.alice, WithIdentity("alice/1"), WithTTL(5*time.Second))

	// Mutex: Lock, TryLock, Describe, List.
	l := mustLock(t, NewMutex(s, "team-a/job"))
	if _, err := NewMutex(openSession(t, sc.alice, WithIdentity("alice/2")), "team-a/job").TryLock(ctx); !errors.Is(err, ErrLocked) {
		t.Errorf("TryLock of a held team-a/job: %v, want ErrLocked", err)
	}
	st, err := Describe(ctx, sc.alice, "team-a/job")
	if err != nil {
		t.Fatalf("Describe as alice: %v", err)
	}
	if st.Holder == nil || st.Holder.Token != l.Token() || st.Holder.Identity != "alice/1" {
		t.Errorf("Describe: holder %+v, want alice/1 with token %d", st.Holder, l.Token())
	}
	ls, err := List(ctx, sc.alice, "team-a/")
	if err != nil {
		t.Fatalf("List(team-a/) as alice: %v", err)
	}
	if len(ls) != 1 || ls[0].Name != "team-a/job" {
		t.Errorf("List(team-a/) = %+v, want team-a/job", ls)
	}

	// Election: Campaign, Leader, Observe, Proclaim, Resign.
	e := NewElection(s, "team-a/leader")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := NewElection(openSession(t, sc.alice, WithIdentity("alice/observer")), "team-a/leader").Observe(octx)
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

	// Semaphore and RWMutex.
	sem := NewSemaphore(s, "team-a/pool", 2)
	g1, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore.Acquire: %v", err)
	}
	g2, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore.TryAcquire: %v", err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, ErrLocked) {
		t.Errorf("third TryAcquire of 2: %v, want ErrLocked", err)
	}
	rw := NewRWMutex(s, "team-a/rw")
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, ErrLocked) {
		t.Errorf("TryLock with a reader: %v, want ErrLocked", err)
	}
	for _, g := range []*Lock{g1, g2, r1} {
		if err := g.Unlock(ctx); err != nil {
			t.Errorf("Unlock %s: %v", g.Key(), err)
		}
	}
	w1, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("RWMutex.Lock: %v", err)
	}

	// bob holds team-b/job; alice can neither take, nor wait for, nor see it.
	bs := openSession(t, sc.bob, WithIdentity("bob/1"))
	bl := mustLock(t, NewMutex(bs, "team-b/job"))
	bobKeys := sc.rootKeys(t, NamespacePrefix("team-b/"))
	for _, c := range []struct {
		what string
		do   func(ctx context.Context) error
	}{
		{"Lock team-b/job", func(ctx context.Context) error { _, err := NewMutex(s, "team-b/job").Lock(ctx); return err }},
		{"TryLock team-b/job", func(ctx context.Context) error { _, err := NewMutex(s, "team-b/job").TryLock(ctx); return err }},
		{"Lock team-b/free", func(ctx context.Context) error { _, err := NewMutex(s, "team-b/free").Lock(ctx); return err }},
		{"Describe team-b/job", func(ctx context.Context) error { _, err := Describe(ctx, sc.alice, "team-b/job"); return err }},
		{"List team-b/", func(ctx context.Context) error { _, err := List(ctx, sc.alice, "team-b/"); return err }},
		{"List of everything", func(ctx context.Context) error { _, err := List(ctx, sc.alice, ""); return err }},
		{"Campaign team-b/leader", func(ctx context.Context) error {
			_, err := NewElection(s, "team-b/leader").Campaign(ctx, "x")
			return err
		}},
		{"Leader team-b/leader", func(ctx context.Context) error { _, err := NewElection(s, "team-b/leader").Leader(ctx); return err }},
		{"Semaphore team-b/pool", func(ctx context.Context) error { _, err := NewSemaphore(s, "team-b/pool", 2).Acquire(ctx); return err }},
		{"RLock team-b/rw", func(ctx context.Context) error { _, err := NewRWMutex(s, "team-b/rw").RLock(ctx); return err }},
		{"revoke bob's lease", func(ctx context.Context) error { _, err := sc.alice.Revoke(ctx, bs.Lease()); return err }},
		{"delete bob's key (break)", func(ctx context.Context) error {
			_, err := sc.alice.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(bl.Key()), ">", 0)).
				Then(clientv3.OpDelete(bl.Key())).Commit()
			return err
		}},
	} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		err := c.do(cctx)
		cancel()
		denied(t, c.what, err, time.Since(t0))
	}
	if got := sc.rootKeys(t, NamespacePrefix("team-b/")); strings.Join(got, ",") != strings.Join(bobKeys, ",") {
		t.Errorf("keys under team-b/ after alice's attempts: %q, want only bob's %q", got, bobKeys)
	}
	if bl.Context().Err() != nil {
		t.Errorf("bob's lock ended: %v", context.Cause(bl.Context()))
	}
	if s.Err() != nil {
		t.Fatalf("alice's session ended after her refused attempts: %v", s.Err())
	}

	// The keys hold no secrets: every value is {"v","identity","value"}.
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
		if !strings.HasPrefix(string(kv.Key), keyRoot) {
			t.Errorf("key %q outside %q", kv.Key, keyRoot)
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(kv.Value, &fields); err != nil {
			t.Errorf("value of %q: %v", kv.Key, err)
		}
		for f := range fields {
			if f != "v" && f != "identity" && f != "value" {
				t.Errorf("value of %q has field %q", kv.Key, f)
			}
		}
	}

	// audrey may read team-a/ (Describe, List, Leader, Observe) but not
	// take or break anything there.
	if st, err := Describe(ctx, sc.audrey, "team-a/job"); err != nil || st.Holder == nil || st.Holder.Token != l.Token() {
		t.Errorf("Describe as a reader: %+v, %v", st, err)
	}
	if ls, err := List(ctx, sc.audrey, "team-a/"); err != nil || len(ls) == 0 {
		t.Errorf("List as a reader: %v, %v", ls, err)
	}
	audS := openSession(t, sc.audrey, WithIdentity("audrey/1"))
	lead2, err := NewElection(s, "team-a/leader").Campaign(ctx, "a-3")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := NewElection(audS, "team-a/leader").Leader(ctx); err != nil || info.Value != "a-3" {
		t.Errorf("Leader as a reader: %+v, %v", info, err)
	}
	actx, acancel := context.WithCancel(ctx)
	select {
	case info := <-NewElection(audS, "team-a/leader").Observe(actx):
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
	before := sc.rootKeys(t, NamespacePrefix("team-a/"))
	for _, c := range []struct {
		what string
		do   func(ctx context.Context) error
	}{
		{"a reader's Lock", func(ctx context.Context) error { _, err := NewMutex(audS, "team-a/job").Lock(ctx); return err }},
		{"a reader's TryLock of a free name", func(ctx context.Context) error { _, err := NewMutex(audS, "team-a/free").TryLock(ctx); return err }},
		{"a reader's Campaign", func(ctx context.Context) error {
			_, err := NewElection(audS, "team-a/leader").Campaign(ctx, "x")
			return err
		}},
		{"a reader's break", func(ctx context.Context) error { _, err := sc.audrey.Delete(ctx, l.Key()); return err }},
	} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		err := c.do(cctx)
		cancel()
		denied(t, c.what, err, time.Since(t0))
	}
	if got := sc.rootKeys(t, NamespacePrefix("team-a/")); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Errorf("keys under team-a/ after a reader's attempts: %q, were %q", got, before)
	}

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
	if keys := sc.rootKeys(t, NamespacePrefix("team-a/")); len(keys) != 0 {
		t.Errorf("keys under team-a/ after alice's session closed: %q", keys)
	}
}

// longHold is how long TestSecurityLongSession holds its lock: more than
// two lifetimes of the 10 s auth token, so that the keepalive stream must
// outlive its token at least twice (25 s), or the full 60 s with
// ETCDLOCK_LONG=1. Both variants run in parallel, so the test takes about
// this long.
func longHold() time.Duration {
	if os.Getenv("ETCDLOCK_LONG") == "1" {
		return 60 * time.Second
	}
	return 25 * time.Second
}

// TestSecurityLongSession: with auth tokens that live 10 s (simple tokens,
// which expire 10 s after their last use on each member, and JWTs, which
// expire 10 s after they were issued however much they are used), a
// non-root session of TTL 3 s holding a lock stays live for longHold, its
// keepalives on the stream pinned to the leader, and its client still works
// afterwards.
func TestSecurityLongSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []embedtest.Option
	}{
		{"simple", []embedtest.Option{embedtest.WithAuthTokenTTL(10 * time.Second)}},
		{"jwt", []embedtest.Option{embedtest.WithJWT(), embedtest.WithAuthTokenTTL(10 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := startSecure(t, tc.opts...)
			ctx := testCtx(t, longHold()+2*time.Minute)
			s := openSession(t, sc.alice, WithIdentity("alice/long"), WithTTL(3*time.Second))
			l := mustLock(t, NewMutex(s, "team-a/long"))
			auths0, ka0 := sc.calls(sc.authCall), sc.calls(sc.leaseKeepAlive)
			start := time.Now()

			// Hold, and note the smallest validity left seen on the way.
			minLeft := time.Hour
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			end := time.After(longHold())
		hold:
			for {
				select {
				case <-end:
					break hold
				case <-s.Done():
					t.Fatalf("session lost after %v: %v (the keepalive stream did not outlive its auth token)", time.Since(start).Round(time.Millisecond), s.Err())
				case <-l.Context().Done():
					t.Fatalf("lock lost after %v: %v", time.Since(start).Round(time.Millisecond), context.Cause(l.Context()))
				case <-tick.C:
					minLeft = min(minLeft, time.Until(s.ValidUntil()))
				}
			}
			logins := sc.calls(sc.authCall) - auths0
			t.Logf("held %v; %d keepalives, %d logins meanwhile; smallest validity left %v (TTL %v)",
				time.Since(start).Round(time.Millisecond), sc.calls(sc.leaseKeepAlive)-ka0, logins, minLeft.Round(time.Millisecond), s.TTL())
			if tc.name == "jwt" && logins < 2 {
				// A JWT cannot be renewed: the keepalive stream's token
				// expired at least twice, so its client logged in again.
				t.Errorf("only %d logins in %v with 10 s JWTs: the tokens did not expire as configured", logins, longHold())
			}

			// The lock is still alice's, and her client still works with
			// its token long expired.
			st, err := Describe(ctx, sc.alice, "team-a/long")
			if err != nil {
				t.Fatalf("Describe after the hold: %v", err)
			}
			if st.Holder == nil || st.Holder.Token != l.Token() {
				t.Fatalf("holder after the hold: %+v, want token %d", st.Holder, l.Token())
			}
			if _, err := NewMutex(s, "team-a/long").TryLock(ctx); !errors.Is(err, ErrLocked) {
				t.Errorf("TryLock after the hold: %v, want ErrLocked", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock after the hold: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close after the hold: %v", err)
			}
		})
	}
}

// TestSecurityAuthChange: changing users or roles makes every token older
// than the auth store (etcd then refuses it with "revision of auth store is
// old", an InvalidArgument). A holder's session and a waiter that was
// already waiting survive it, and a waiter that starts afterwards, on the
// same client, queues and is granted.
func TestSecurityAuthChange(t *testing.T) {
	sc := startSecure(t)
	ctx := testCtx(t, 2*time.Minute)
	name := "team-a/change"
	s1 := openSession(t, sc.alice, WithIdentity("alice/1"), WithTTL(3*time.Second))
	s2 := openSession(t, sc.alice, WithIdentity("alice/2"), WithTTL(3*time.Second))
	s3 := openSession(t, sc.alice, WithIdentity("alice/3"), WithTTL(3*time.Second))
	l1 := mustLock(t, NewMutex(s1, name))
	type result struct {
		l   *Lock
		err error
	}
	wait := func(s *Session) <-chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := NewMutex(s, name).Lock(ctx)
			ch <- result{l, err}
		}()
		return ch
	}
	r2 := wait(s2)
	waitFor(t, 30*time.Second, "alice/2 waiting", func() bool {
		st, err := Describe(ctx, sc.root, name)
		return err == nil && len(st.Waiters) == 1
	})

	// The auth store changes twice.
	if _, err := sc.root.UserAdd(ctx, "carol", secret(t, "carol")); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.root.RoleAdd(ctx, "team-c"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	waitFor(t, 30*time.Second, "keepalives acknowledged after the change", func() bool {
		return s1.ValidUntil().After(changed.Add(s1.TTL()))
	})

	r3 := wait(s3) // a new watch, after the change
	waitFor(t, 30*time.Second, "alice/3 waiting", func() bool {
		st, err := Describe(ctx, sc.root, name)
		return err == nil && len(st.Waiters) == 2
	})
	if err := l1.Unlock(ctx); err != nil {
		t.Fatalf("Unlock alice/1: %v", err)
	}
	got2 := <-r2
	if got2.err != nil {
		t.Fatalf("alice/2, waiting across the change: %v", got2.err)
	}
	if err := got2.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock alice/2: %v", err)
	}
	got3 := <-r3
	if got3.err != nil {
		t.Fatalf("alice/3, queued after the change: %v", got3.err)
	}
	if err := got3.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock alice/3: %v", err)
	}
	for _, s := range []*Session{s1, s2, s3} {
		if err := s.Err(); err != nil {
			t.Errorf("session %s: %v", s.Identity(), err)
		}
	}
}

// TestSecurityRevokedRole: once a user's role is revoked, etcd refuses her
// lease renewals (it checks write permission on the lease's keys), so her
// session is lost within its TTL and her lock passes to the next waiter,
// as after a crash.
func TestSecurityRevokedRole(t *testing.T) {
	sc := startSecure(t)
	ctx := testCtx(t, 2*time.Minute)
	name := "team-a/revoked"
	// A second team-a user, whose role stays.
	for _, step := range []func() error{
		func() error { _, err := sc.root.UserAdd(ctx, "anna", sc.alicePW+"-anna"); return err },
		func() error { _, err := sc.root.UserGrantRole(ctx, "anna", "team-a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	anna := sc.clientAs(t, "anna", sc.alicePW+"-anna")
	s := openSession(t, sc.alice, WithIdentity("alice/1"), WithTTL(3*time.Second))
	l := mustLock(t, NewMutex(s, name))
	next := openSession(t, anna, WithIdentity("anna/1"), WithTTL(3*time.Second))
	granted := make(chan error, 1)
	go func() {
		nl, err := NewMutex(next, name).Lock(ctx)
		if err == nil && nl.Token() <= l.Token() {
			err = errors.New("token did not increase")
		}
		granted <- err
	}()
	waitFor(t, 30*time.Second, "anna waiting", func() bool {
		st, err := Describe(ctx, sc.root, name)
		return err == nil && len(st.Waiters) == 1
	})

	revoked := time.Now()
	if _, err := sc.root.UserRevokeRole(ctx, "alice", "team-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		t.Logf("alice's session lost %v after the revocation: %v", time.Since(revoked).Round(time.Millisecond), s.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("alice's session outlived the revocation of her role")
	}
	// A context's Done closes before its children are canceled: await the lock's own.
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("alice's lock context outlived her session")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrSessionExpired) {
		t.Errorf("alice's lock cause: %v, want ErrSessionExpired", cause)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("anna's Lock: %v", err)
		}
		t.Logf("anna granted %v after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("anna never got the lock")
	}
}
