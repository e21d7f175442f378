package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// replica is one of TestRunThreeReplicas's Run callers.
type replica struct {
	s       *etcdlock.Session
	cancel  context.CancelFunc
	running atomic.Int32
	done    chan error
}

// replicaSet is n replicas running one Election: each lead sends its token
// on leading and then, until its term ends, writes through fence every 5 ms
// (admitted records the tokens it let through, in order).
type replicaSet struct {
	fence    etcdlock.Fence
	mu       sync.Mutex
	admitted []etcdlock.Token
	leading  chan etcdlock.Token
	replicas []*replica
}

// startReplicas starts n replicas of name ("replica-<i>"), each on a
// session and client of its own; their Runs end at cleanup at the latest.
func startReplicas(t *testing.T, ctx context.Context, name string, n int) *replicaSet {
	t.Helper()
	rs := &replicaSet{leading: make(chan etcdlock.Token, 100), replicas: make([]*replica, n)}
	for i := range rs.replicas {
		r := &replica{s: locktest.OpenSession(t, shared.TestClient(t)), done: make(chan error, 1)}
		rs.replicas[i] = r
		rctx, cancel := context.WithCancel(ctx)
		r.cancel = cancel
		t.Cleanup(cancel)
		go func() {
			r.done <- etcdlock.NewElection(r.s, name).Run(rctx, fmt.Sprintf("replica-%d", i), rs.lead(t, i, r))
		}()
	}
	return rs
}

// lead returns replica i's lead function.
func (rs *replicaSet) lead(t *testing.T, i int, r *replica) func(context.Context) error {
	return func(lctx context.Context) error {
		if n := r.running.Add(1); n != 1 {
			t.Errorf("replica %d runs %d lead calls at once", i, n)
		}
		defer r.running.Add(-1)
		l, ok := etcdlock.LeadershipFromContext(lctx)
		if !ok {
			t.Error("lead's context carries no Leadership")
			return nil
		}
		rs.leading <- l.Token()
		for {
			rs.mu.Lock()
			if err := rs.fence.Admit(l.Token()); err == nil {
				rs.admitted = append(rs.admitted, l.Token())
			}
			rs.mu.Unlock()
			select {
			case <-lctx.Done():
				return lctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// checkAdmitted checks that the fence admitted some tokens, in order.
func (rs *replicaSet) checkAdmitted(t *testing.T) {
	t.Helper()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i := 1; i < len(rs.admitted); i++ {
		if rs.admitted[i] < rs.admitted[i-1] {
			t.Fatalf("token %d admitted after %d", rs.admitted[i], rs.admitted[i-1])
		}
	}
	if len(rs.admitted) == 0 {
		t.Fatal("no lead wrote anything")
	}
}

// stopAll ends every replica's Run and checks how each ended (stopped's
// result was taken already).
func (rs *replicaSet) stopAll(t *testing.T, stopped *replica) {
	t.Helper()
	for _, r := range rs.replicas {
		r.cancel()
	}
	for _, r := range rs.replicas {
		if r != stopped {
			if err := <-r.done; err != nil {
				t.Fatalf("Run: %v", err)
			}
		}
		if r.s.Err() != nil && r.s.Err() != etcdlock.ErrSessionExpired {
			t.Fatalf("caller's session: %v", r.s.Err())
		}
	}
}

func TestRunThreeReplicas(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 2*time.Minute)
	rs := startReplicas(t, ctx, name, 3)
	e := etcdlock.NewElection(locktest.OpenSession(t, cli), name)
	leaderOf := func(tok etcdlock.Token) etcdlock.LeaderInfo {
		t.Helper()
		info, err := e.Leader(ctx)
		if err != nil || info.Token != tok {
			t.Fatalf("Leader %+v, %v; want token %d", info, err, tok)
		}
		return info
	}
	tok := <-rs.leading
	for round := 0; round < 4; round++ {
		info := leaderOf(tok)
		if _, err := cli.Revoke(ctx, info.Lease); err != nil {
			t.Fatal(err)
		}
		select {
		case next := <-rs.leading:
			if next <= tok {
				t.Fatalf("round %d: token %d not above %d", round, next, tok)
			}
			tok = next
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: leadership did not come back", round)
		}
	}
	// Ending the leader's ctx hands over at once (Resign), not after a TTL.
	info := leaderOf(tok)
	var stopped *replica
	for i, r := range rs.replicas {
		if info.Value == fmt.Sprintf("replica-%d", i) {
			stopped = r
		}
	}
	stopped.cancel()
	start := time.Now()
	select {
	case next := <-rs.leading:
		if d := time.Since(start); d > time.Second {
			t.Fatalf("next replica led %v after the leader's ctx ended; want < 1s", d)
		}
		tok = next
	case <-time.After(5 * time.Second):
		t.Fatal("no replica took over after the leader stopped")
	}
	if err := <-stopped.done; err != nil {
		t.Fatalf("Run after ctx ended: %v", err)
	}
	rs.stopAll(t, stopped)
	rs.checkAdmitted(t)
	_ = tok
}

func TestRunReturnsLeadError(t *testing.T) {
	s := locktest.OpenSession(t, shared.TestClient(t))
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	boom := errors.New("boom")
	if err := etcdlock.NewElection(s, name).Run(ctx, "v", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want lead's error", err)
	}
	if keys := keysUnder(t, s.Client(), name); len(keys) != 0 {
		t.Fatalf("Run did not resign: %v", keys)
	}
	if err := etcdlock.NewElection(s, name).Run(ctx, "v", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Run with lead returning nil: %v", err)
	}
	if s.Err() != nil {
		t.Fatalf("Run closed the caller's session: %v", s.Err())
	}
}

func TestRunReplacesLostSession(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)
	terms := make(chan *etcdlock.Leadership, 4)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- etcdlock.NewElection(s, name).Run(rctx, "v", func(lctx context.Context) error {
			l, _ := etcdlock.LeadershipFromContext(lctx)
			terms <- l
			<-lctx.Done()
			return nil
		})
	}()
	first := <-terms
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	second := <-terms
	replacement := sessionOf(t, second.Context())
	if replacement == s || second.Token() <= first.Token() {
		t.Fatalf("second term on the lost session, or token %d <= %d", second.Token(), first.Token())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(replacement.Err(), etcdlock.ErrSessionClosed) {
		t.Fatalf("Run did not close its replacement session: %v", replacement.Err())
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// TestRunReturnsWhenCallerClosesAfterReplacement checks that closing the
// caller's Session ends Run with ErrSessionClosed at once, ending the term,
// even while Run leads on a replacement session (the caller's own one was
// lost before, so its Err stays ErrSessionExpired).
func TestRunReturnsWhenCallerClosesAfterReplacement(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)
	terms := make(chan *etcdlock.Leadership, 4)
	done := make(chan error, 1)
	go func() {
		done <- etcdlock.NewElection(s, name).Run(ctx, "v", func(lctx context.Context) error {
			l, _ := etcdlock.LeadershipFromContext(lctx)
			terms <- l
			<-lctx.Done()
			return nil
		})
	}()
	<-terms
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	second := <-terms
	if sessionOf(t, second.Context()) == s {
		t.Fatal("second term on the lost session")
	}
	if !errors.Is(s.Err(), etcdlock.ErrSessionExpired) {
		t.Fatalf("caller's session: %v, want ErrSessionExpired", s.Err())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, etcdlock.ErrSessionClosed) {
			t.Fatalf("Run: %v, want ErrSessionClosed", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run kept leading on its replacement session after the caller closed its session")
	}
	if second.Context().Err() == nil {
		t.Fatal("the replacement term still leads after Run returned")
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// sessionOf returns the *etcdlock.Session of the grant ctx carries (a
// Lock's or a Leadership's Context).
func sessionOf(t *testing.T, ctx context.Context) *etcdlock.Session {
	t.Helper()
	ts, _ := testhook.SessionOf(ctx)
	s, ok := ts.(*etcdlock.Session)
	if !ok {
		t.Fatalf("the context carries no grant of an *etcdlock.Session (%T)", ts)
	}
	return s
}
