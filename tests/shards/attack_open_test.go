package shards_test

// The opening of a shard.Session's cluster session: again after a grant
// slower than the TTL; ended by Close.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackSlowGrantOpensAgain: the first acquisition of a name on c1 is
// made while c1's one member is down, so the lease grant of the cluster
// session it opens comes back later than the TTL (the session would be
// born expired). Once the member is back, the acquisition opens the
// cluster session again and is granted: it does not fail with the slow
// opening's ErrSessionExpired while its ctx has time left.
func TestAttackSlowGrantOpensAgain(t *testing.T) {
	t.Parallel() // its own deployment
	d, s, m, ctx := outageSession(t)
	n1 := d.nameOn(t, "c1")
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	res := lockAndUnlock(ctx, s, n1)
	// The fault itself: the member stays down for longer than the TTL.
	time.Sleep(openTTL + time.Second)
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("Lock on c1 across its member's restart: %v, want granted", err)
	}
}

// TestAttackCloseDuringSlowOpening: Close of a shard.Session returns at
// once while one of its acquisitions opens a cluster session whose member
// is down, and that acquisition ends with ErrSessionClosed; Close does not
// wait for the opening to give up at the acquisition's ctx.
func TestAttackCloseDuringSlowOpening(t *testing.T) {
	t.Parallel() // its own deployment
	d, s, m, ctx := outageSession(t)
	n1 := d.nameOn(t, "c1")
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := s.NewMutex(n1).Lock(ctx)
		res <- err
	}()
	// The fault's placement: Close comes while the grant is retried (with
	// the fix, an earlier Close passes too).
	time.Sleep(500 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for the opening after 10 s")
	}
	if err := <-res; !errors.Is(err, etcdlock.ErrSessionClosed) {
		t.Fatalf("Lock during Close: %v, want ErrSessionClosed", err)
	}
}

// openTTL is the TTL of the sessions of the tests of openings: short, so
// that an outage outlasts it.
const openTTL = 2 * time.Second

// outageSession starts a deployment of two one-member clusters and a
// shard.Session on it with a TTL of openTTL, closed at cleanup, and
// returns them with c1's member, which the caller kills, and the test's
// context.
func outageSession(t *testing.T) (*deployment, *shard.Session, *embedtest.Member, context.Context) {
	t.Helper()
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	s, err := shard.NewSession(ctx, d.newShards(t), etcdlock.WithTTL(openTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return d, s, d.clusters[1].Members()[0], ctx
}

// lockAndUnlock locks name on s, then unlocks it, and sends the first
// error (nil when both succeeded).
func lockAndUnlock(ctx context.Context, s *shard.Session, name string) <-chan error {
	res := make(chan error, 1)
	go func() {
		l, err := s.NewMutex(name).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		res <- err
	}()
	return res
}

// TestAttackRunEndsWhenShardsClose: Mutex.Run and Election.Run of a
// shard.Session hold a name on c1 when the Shards the session routes
// through is closed (its member clients with it): the grant is lost, and
// each Run returns an error wrapping ErrSessionClosed instead of trying
// again until its ctx ends; a Lock after it fails the same way.
func TestAttackRunEndsWhenShardsClose(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	for _, kind := range []string{"Mutex.Run", "Election.Run"} {
		t.Run(kind, func(t *testing.T) {
			r := d.newShards(t)
			s := session(t, r, etcdlock.WithTTL(5*time.Second))
			name := d.nameOn(t, "c1")
			held := make(chan struct{}, 10)
			done := make(chan error, 1)
			go func() {
				serve := func(ctx context.Context) error {
					held <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				}
				if kind == "Mutex.Run" {
					done <- s.NewMutex(name).Run(ctx, func(ctx context.Context, _ *etcdlock.Lock) error { return serve(ctx) })
					return
				}
				done <- s.NewElection(name).Run(ctx, "v", serve)
			}()
			<-held
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, etcdlock.ErrSessionClosed) {
					t.Fatalf("Run after Shards.Close: %v, want ErrSessionClosed", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Run still runs 20 s after its Shards was closed")
			}
			if _, err := s.NewMutex(name).Lock(ctx); !errors.Is(err, etcdlock.ErrSessionClosed) {
				t.Fatalf("Lock after Shards.Close: %v, want ErrSessionClosed", err)
			}
			if _, err := shard.NewSession(ctx, r); !errors.Is(err, etcdlock.ErrSessionClosed) {
				t.Fatalf("NewSession after Shards.Close: %v, want ErrSessionClosed", err)
			}
		})
	}
}
