package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// campaignInOrder starts one Campaign per session, each after the previous
// candidate is in the queue, and returns the channel each winner is sent on.
func campaignInOrder(t *testing.T, cli *clientv3.Client, name string, ss []*Session) <-chan *Leadership {
	t.Helper()
	won := make(chan *Leadership, len(ss))
	ctx := testCtx(t, 2*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := NewElection(s, name).Campaign(ctx, fmt.Sprintf("candidate-%d", i))
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("candidate %d: %v", i, err)
				}
				return
			}
			won <- l
		}()
		waitFor(t, 10*time.Second, "candidate to enqueue", func() bool { return len(keysUnder(t, cli, name)) == i+1 })
	}
	return won
}

func TestElectionFollowsCampaignOrder(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ss := []*Session{openSession(t, cli), openSession(t, cli), openSession(t, cli)}
	won := campaignInOrder(t, cli, name, ss)
	ctx := testCtx(t, time.Minute)
	var last Token
	for i := range ss {
		l := <-won
		info, err := NewElection(ss[0], name).Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("candidate-%d", i)
		if info.Value != want || info.Token != l.Token() || info.Key != l.Key() || info.Lease != ss[i].Lease() {
			t.Fatalf("term %d: leader %+v, want %s with token %d", i, info, want, l.Token())
		}
		if l.Token() <= last {
			t.Fatalf("token %d not above %d", l.Token(), last)
		}
		last = l.Token()
		select {
		case other := <-won:
			t.Fatalf("two leaders at once: %d and %d", l.Token(), other.Token())
		default:
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatalf("second resign: %v", err)
		}
	}
	if _, err := NewElection(ss[0], name).Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader with nobody campaigning: %v", err)
	}
}

func TestLeaderSessionRevoked(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	s1, s2 := openSession(t, cli), openSession(t, newClient(t, nil))
	observer := openSession(t, newClient(t, nil))
	ctx := testCtx(t, time.Minute)
	won := campaignInOrder(t, cli, name, []*Session{s1, s2})
	first := <-won
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := NewElection(observer, name).Observe(octx)
	if got := <-seen; got.Token != first.Token() {
		t.Fatalf("Observe's first value %+v, want the leader %d", got, first.Token())
	}
	lctx := first.Context()
	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), ErrSessionExpired) {
		t.Fatalf("cause %v", context.Cause(lctx))
	}
	second := <-won
	if d := time.Since(revoked); d > s2.TTL()+2*time.Second {
		t.Fatalf("follower led %v after the revoke", d)
	}
	for v := range seen {
		switch v.Token {
		case second.Token():
			return // reached the new leader without seeing the old one again
		case 0:
			continue // "no leader" in between is allowed
		default:
			t.Fatalf("Observe reported %+v after the leader's session was revoked", v)
		}
	}
	t.Fatal("Observe closed before reporting the new leader")
}

func TestCampaignPhantomLeaderGuard(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	leader, err := NewElection(openSession(t, cli), name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, cli)
	errc := make(chan error, 1)
	go func() {
		l, err := NewElection(s, name).Campaign(ctx, "b")
		if err == nil {
			err = fmt.Errorf("phantom leadership with token %d", l.Token())
		}
		errc <- err
	}()
	waitFor(t, 10*time.Second, "candidate", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	for _, k := range keysUnder(t, cli, name) {
		if k != leader.Key() {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The leader resigns right away: a candidate that missed the loss of its
	// own key would now "win".
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrLockLost) {
		t.Fatalf("Campaign after its key was deleted: %v, want ErrLockLost", err)
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestProclaimAndResignAfterLoss(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	s := openSession(t, cli)
	l, err := NewElection(s, name).Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	e := NewElection(openSession(t, cli), name)
	if err := l.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Leader(ctx); err != nil || info.Value != "v2" || info.Token != l.Token() {
		t.Fatalf("after Proclaim: %+v %v", info, err)
	}
	// Someone deletes the leader key and another candidate wins.
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	next, err := e.Campaign(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Proclaim(ctx, "stale"); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("Proclaim after loss: %v, want ErrNotHeld and ErrLockLost", err)
	}
	if err := l.Resign(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resign after loss: %v, want ErrNotHeld", err)
	}
	info, err := e.Leader(ctx)
	if err != nil || info.Value != "other" || info.Token != next.Token() {
		t.Fatalf("the new leader was changed: %+v %v", info, err)
	}
	_ = next.Resign(ctx)
}

func TestElectionBadInput(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := openSession(t, nil)
	for _, tc := range []struct {
		name string
		e    *Election
		want error
	}{
		{"empty name", NewElection(s, ""), ErrInvalidName},
		{"nil session", NewElection(nil, "x"), ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.e.Campaign(ctx, "v"); !errors.Is(err, tc.want) {
				t.Fatalf("Campaign: %v", err)
			}
			if _, err := tc.e.Leader(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Leader: %v", err)
			}
			if err := tc.e.Run(ctx, "v", func(context.Context) error { return nil }); !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v", err)
			}
			if _, ok := <-tc.e.Observe(ctx); ok {
				t.Fatal("Observe of an invalid election delivered a value")
			}
		})
	}
	if err := NewElection(s, "x").Run(ctx, "v", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Run with nil lead: %v", err)
	}
	name := uniqueName(t)
	l := mustLock(t, NewMutex(s, name))
	defer l.Unlock(ctx)
	if _, err := NewElection(s, name).Campaign(ctx, "v"); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("Campaign on a mutex's name: %v", err)
	}
	if _, err := NewElection(s, name).Leader(ctx); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("Leader on a mutex's name: %v", err)
	}
}

func TestObserveSkipsButNeverRepeats(t *testing.T) {
	ch := make(chan LeaderInfo, 1)
	out := latest{ch: ch}
	a, b := LeaderInfo{Token: 1, Value: "a"}, LeaderInfo{Token: 2, Value: "b"}
	out.publish(LeaderInfo{}) // nobody leads
	if got := <-ch; got != (LeaderInfo{}) {
		t.Fatalf("first value %+v", got)
	}
	out.publish(LeaderInfo{}) // no change: nothing sent
	out.publish(a)
	out.publish(b) // replaces a, unread
	out.publish(a) // replaces b
	if got := <-ch; got != a {
		t.Fatalf("got %+v, want the newest, a", got)
	}
	out.publish(b)
	out.publish(a) // the reader last took a: drop b, send nothing
	select {
	case got := <-ch:
		t.Fatalf("repeated %+v", got)
	default:
	}
}

func TestRunThreeReplicas(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 2*time.Minute)
	var (
		fence    Fence
		mu       sync.Mutex
		admitted []Token
		leading  = make(chan Token, 100)
	)
	type replica struct {
		s       *Session
		cancel  context.CancelFunc
		running atomic.Int32
		done    chan error
	}
	replicas := make([]*replica, 3)
	for i := range replicas {
		r := &replica{s: openSession(t, newClient(t, nil)), done: make(chan error, 1)}
		replicas[i] = r
		rctx, cancel := context.WithCancel(ctx)
		r.cancel = cancel
		t.Cleanup(cancel)
		go func() {
			r.done <- NewElection(r.s, name).Run(rctx, fmt.Sprintf("replica-%d", i), func(lctx context.Context) error {
				if n := r.running.Add(1); n != 1 {
					t.Errorf("replica %d runs %d lead calls at once", i, n)
				}
				defer r.running.Add(-1)
				l, ok := LeadershipFromContext(lctx)
				if !ok {
					t.Error("lead's context carries no Leadership")
					return nil
				}
				leading <- l.Token()
				for {
					mu.Lock()
					if err := fence.Admit(l.Token()); err == nil {
						admitted = append(admitted, l.Token())
					}
					mu.Unlock()
					select {
					case <-lctx.Done():
						return lctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
		}()
	}
	e := NewElection(openSession(t, cli), name)
	leaderOf := func(tok Token) LeaderInfo {
		t.Helper()
		info, err := e.Leader(ctx)
		if err != nil || info.Token != tok {
			t.Fatalf("Leader %+v, %v; want token %d", info, err, tok)
		}
		return info
	}
	tok := <-leading
	for round := 0; round < 4; round++ {
		info := leaderOf(tok)
		if _, err := cli.Revoke(ctx, info.Lease); err != nil {
			t.Fatal(err)
		}
		select {
		case next := <-leading:
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
	for i, r := range replicas {
		if info.Value == fmt.Sprintf("replica-%d", i) {
			stopped = r
		}
	}
	stopped.cancel()
	start := time.Now()
	select {
	case next := <-leading:
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
	for _, r := range replicas {
		r.cancel()
	}
	for _, r := range replicas {
		if r != stopped {
			if err := <-r.done; err != nil {
				t.Fatalf("Run: %v", err)
			}
		}
		if r.s.Err() != nil && r.s.Err() != ErrSessionExpired {
			t.Fatalf("caller's session: %v", r.s.Err())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(admitted); i++ {
		if admitted[i] < admitted[i-1] {
			t.Fatalf("token %d admitted after %d", admitted[i], admitted[i-1])
		}
	}
	if len(admitted) == 0 {
		t.Fatal("no lead wrote anything")
	}
	_ = tok
}

func TestRunReturnsLeadError(t *testing.T) {
	s := openSession(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	boom := errors.New("boom")
	if err := NewElection(s, name).Run(ctx, "v", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want lead's error", err)
	}
	if keys := keysUnder(t, s.Client(), name); len(keys) != 0 {
		t.Fatalf("Run did not resign: %v", keys)
	}
	if err := NewElection(s, name).Run(ctx, "v", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Run with lead returning nil: %v", err)
	}
	if s.Err() != nil {
		t.Fatalf("Run closed the caller's session: %v", s.Err())
	}
}

func TestRunReplacesLostSession(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, time.Minute)
	terms := make(chan *Leadership, 4)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- NewElection(s, name).Run(rctx, "v", func(lctx context.Context) error {
			l, _ := LeadershipFromContext(lctx)
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
	if second.g.w.q.s == s || second.Token() <= first.Token() {
		t.Fatalf("second term on the lost session, or token %d <= %d", second.Token(), first.Token())
	}
	replacement := second.g.w.q.s
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(replacement.Err(), ErrSessionClosed) {
		t.Fatalf("Run did not close its replacement session: %v", replacement.Err())
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestObserveAcrossCompactionAndLeaderCrash(t *testing.T) {
	c := embedtest.Start(t)
	leader := waitLeader(t, c)
	cli := newClient(t, c)
	name := uniqueName(t)
	ctx := testCtx(t, time.Minute)
	s := openSession(t, cli)
	seen := NewElection(openSession(t, newClient(t, c)), name).Observe(ctx)
	if v := <-seen; v != (LeaderInfo{}) {
		t.Fatalf("first value %+v, want no leader", v)
	}
	l, err := NewElection(s, name).Campaign(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(value string) {
		t.Helper()
		for {
			select {
			case v, ok := <-seen:
				if !ok {
					t.Fatal("Observe closed")
				}
				if v.Value == value && v.Token == l.Token() {
					return
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("Observe never reported %q", value)
			}
		}
	}
	expect("one")
	for i := 0; i < 10; i++ {
		if _, err := cli.Put(ctx, name+"-filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if err := l.Proclaim(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	expect("two")
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, c)
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		err := l.Proclaim(pctx, "three")
		if err == nil {
			break
		}
		if errors.Is(err, ErrNotHeld) || pctx.Err() != nil {
			t.Fatal(err)
		}
	}
	expect("three")
}

// TestRunReturnsWhenCallerClosesAfterReplacement checks that closing the
// caller's Session ends Run with ErrSessionClosed at once, ending the term,
// even while Run leads on a replacement session (the caller's own one was
// lost before, so its Err stays ErrSessionExpired).
func TestRunReturnsWhenCallerClosesAfterReplacement(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, time.Minute)
	terms := make(chan *Leadership, 4)
	done := make(chan error, 1)
	go func() {
		done <- NewElection(s, name).Run(ctx, "v", func(lctx context.Context) error {
			l, _ := LeadershipFromContext(lctx)
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
	if second.g.w.q.s == s {
		t.Fatal("second term on the lost session")
	}
	if !errors.Is(s.Err(), ErrSessionExpired) {
		t.Fatalf("caller's session: %v, want ErrSessionExpired", s.Err())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrSessionClosed) {
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
