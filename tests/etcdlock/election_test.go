package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// campaignInOrder starts one Campaign per session, each after the previous
// candidate is in the queue, and returns the channel each winner is sent on.
func campaignInOrder(t *testing.T, cli *clientv3.Client, name string, ss []*etcdlock.Session) <-chan *etcdlock.Leadership {
	t.Helper()
	won := make(chan *etcdlock.Leadership, len(ss))
	ctx := embedtest.Context(t, 2*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := etcdlock.NewElection(s, name).Campaign(ctx, fmt.Sprintf("candidate-%d", i))
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
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ss := []*etcdlock.Session{locktest.OpenSession(t, cli), locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)}
	won := campaignInOrder(t, cli, name, ss)
	ctx := embedtest.Context(t, time.Minute)
	var last etcdlock.Token
	for i := range ss {
		l := <-won
		info, err := etcdlock.NewElection(ss[0], name).Leader(ctx)
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
	if _, err := etcdlock.NewElection(ss[0], name).Leader(ctx); !errors.Is(err, etcdlock.ErrNoLeader) {
		t.Fatalf("Leader with nobody campaigning: %v", err)
	}
}

func TestLeaderSessionRevoked(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	s1, s2 := locktest.OpenSession(t, cli), locktest.OpenSession(t, shared.TestClient(t))
	observer := locktest.OpenSession(t, shared.TestClient(t))
	ctx := embedtest.Context(t, time.Minute)
	won := campaignInOrder(t, cli, name, []*etcdlock.Session{s1, s2})
	first := <-won
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := etcdlock.NewElection(observer, name).Observe(octx)
	if got := <-seen; got.Token != first.Token() {
		t.Fatalf("Observe's first value %+v, want the leader %d", got, first.Token())
	}
	lctx := first.Context()
	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), etcdlock.ErrSessionExpired) {
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
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	leader, err := etcdlock.NewElection(locktest.OpenSession(t, cli), name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	s := locktest.OpenSession(t, cli)
	errc := make(chan error, 1)
	go func() {
		l, err := etcdlock.NewElection(s, name).Campaign(ctx, "b")
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
	if err := <-errc; !errors.Is(err, etcdlock.ErrLockLost) {
		t.Fatalf("Campaign after its key was deleted: %v, want ErrLockLost", err)
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestProclaimAndResignAfterLoss(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	s := locktest.OpenSession(t, cli)
	l, err := etcdlock.NewElection(s, name).Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	e := etcdlock.NewElection(locktest.OpenSession(t, cli), name)
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
	if err := l.Proclaim(ctx, "stale"); !errors.Is(err, etcdlock.ErrNotHeld) || !errors.Is(err, etcdlock.ErrLockLost) {
		t.Fatalf("Proclaim after loss: %v, want ErrNotHeld and ErrLockLost", err)
	}
	if err := l.Resign(ctx); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("Resign after loss: %v, want ErrNotHeld", err)
	}
	info, err := e.Leader(ctx)
	if err != nil || info.Value != "other" || info.Token != next.Token() {
		t.Fatalf("the new leader was changed: %+v %v", info, err)
	}
	_ = next.Resign(ctx)
}

func TestElectionBadInput(t *testing.T) {
	ctx := embedtest.Context(t, 10*time.Second)
	s := locktest.OpenSession(t, shared.TestClient(t))
	for _, tc := range []struct {
		name string
		e    *etcdlock.Election
		want error
	}{
		{"empty name", etcdlock.NewElection(s, ""), etcdlock.ErrInvalidName},
		{"nil session", etcdlock.NewElection(nil, "x"), etcdlock.ErrInvalidArgument},
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
	if err := etcdlock.NewElection(s, "x").Run(ctx, "v", nil); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("Run with nil lead: %v", err)
	}
	name := embedtest.UniqueName(t, "test")
	l := mustLock(t, etcdlock.NewMutex(s, name))
	defer l.Unlock(ctx)
	if _, err := etcdlock.NewElection(s, name).Campaign(ctx, "v"); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("Campaign on a mutex's name: %v", err)
	}
	if _, err := etcdlock.NewElection(s, name).Leader(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("Leader on a mutex's name: %v", err)
	}
}
