package etcdlock_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackMonitorBlackHoled: a grant's monitor (started by
// Lock.Context) whose path to the leader black-holes as it opens, or once
// it runs, still reports a Break of the lock within blackHoleBound.
func TestAttackMonitorBlackHoled(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	cc := newCutClient(t, c)
	direct := c.TestClient(t)
	// Cut as the monitor opens and once it runs; more moments with
	// ETCDLOCK_BLACKHOLE_ROUNDS > 1 (CI's time is short).
	afters := []time.Duration{0, 300 * time.Millisecond}
	if blackHoleRounds(t) > 1 {
		afters = []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	}
	for _, after := range afters {
		name := embedtest.UniqueName(t, "test")
		ctx := embedtest.Context(t, 2*setupBound)
		link := cc.pinnedLink(t)
		l, err := etcdlock.NewMutex(cc.s, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lctx := l.Context() // starts the monitor
		time.Sleep(after)
		link.Cut()
		if err := etcdlock.Break(ctx, direct, name, l.Token()); err != nil {
			t.Fatal(err)
		}
		broken := time.Now()
		select {
		case <-lctx.Done():
			t.Logf("cut %v after the monitor's start: loss heard after %v (%v)", after, time.Since(broken).Round(time.Millisecond), context.Cause(lctx))
		case <-time.After(blackHoleBound):
			t.Errorf("cut %v after the monitor's start: the Break not reported within %v", after, blackHoleBound)
		}
		link.Restore()
		_ = l.Unlock(ctx)
	}
}

// attackGrantsOtherClient returns a client to a member other than m.
func attackGrantsOtherClient(t *testing.T, c *embedtest.Cluster, m *embedtest.Member) *clientv3.Client {
	t.Helper()
	for _, o := range c.Members() {
		if o != m {
			cli, err := o.Client()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			return cli
		}
	}
	t.Fatal("no other member")
	return nil
}

// TestAttackIsolatedLeader: the keeper (and so the watches) of the
// session run on the leader's connection; the leader is cut from its
// peers (its client path stays up). A grant's monitor must still report a
// Break made on the majority, and a waiter first in line must still be
// granted when the holder (on the majority) unlocks, both within
// blackHoleBound.
func TestAttackIsolatedLeader(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	for _, what := range []string{"monitor", "waiter"} {
		t.Run(what, func(t *testing.T) {
			c := embedtest.Start(t)
			cc := newCutClient(t, c)
			cc.pinnedLink(t)
			leader := waitLeader(t, c)
			other := attackGrantsOtherClient(t, c, leader)
			name := embedtest.UniqueName(t, "test")
			ctx := embedtest.Context(t, 2*setupBound)
			var heard <-chan struct{}
			var act func()
			switch what {
			case "monitor":
				l, err := etcdlock.NewMutex(cc.s, name).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				heard = l.Context().Done()
				time.Sleep(300 * time.Millisecond)
				act = func() {
					if err := etcdlock.Break(ctx, other, name, l.Token()); err != nil {
						t.Fatal(err)
					}
				}
			case "waiter":
				hl := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, other), name))
				granted := make(chan struct{})
				go func() {
					if _, err := etcdlock.NewMutex(cc.s, name).Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					close(granted)
				}()
				waitFor(t, 10*time.Second, "the waiter", func() bool { return len(keysUnder(t, other, name)) == 2 })
				time.Sleep(300 * time.Millisecond)
				heard = granted
				act = func() {
					if err := hl.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := leader.Isolate(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = leader.Heal() })
			waitFor(t, setupBound, "a new leader", func() bool {
				m := c.Leader()
				return m != nil && m != leader
			})
			act()
			awaitHeard(t, what, heard, time.Now())
		})
	}
}

// TestAttackBlackHoledWithLockDelay: a waiter first in line whose path
// to the leader black-holes as it enqueues, behind a holder (lock-delay
// 2 s) whose lease is then revoked: it is granted no sooner than the delay
// and within delay + blackHoleBound (its hold-off's lease read may fail on
// the cut path: it then waits the delay, no more).
func TestAttackBlackHoledWithLockDelay(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	const delay = 2 * time.Second
	c := embedtest.Start(t)
	cc := newCutClient(t, c)
	direct := c.TestClient(t)
	for round := range blackHoleRounds(t) {
		name := embedtest.UniqueName(t, "test")
		ctx := embedtest.Context(t, 2*setupBound)
		hs := locktest.OpenSession(t, direct, etcdlock.WithLockDelay(delay))
		holder, err := etcdlock.NewMutex(hs, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		link := cc.pinnedLink(t)
		granted := make(chan time.Time, 1)
		go func() {
			l, err := etcdlock.NewMutex(cc.s, name).Lock(ctx)
			if err != nil {
				t.Error(err)
				granted <- time.Time{}
				return
			}
			granted <- time.Now()
			_ = l.Unlock(ctx)
		}()
		cutSoon(link)
		awaitSecondKey(t, ctx, direct, name, holder.Key(), holder.Token().Revision())
		start := time.Now()
		if _, err := direct.Revoke(ctx, hs.Lease()); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-granted:
			d := at.Sub(start)
			t.Logf("round %d: granted %v after the revoke", round, d.Round(time.Millisecond))
			if !at.IsZero() && d < delay-250*time.Millisecond {
				t.Errorf("round %d: granted %v after the revoke, before the lock-delay %v", round, d, delay)
			}
		case <-time.After(delay + blackHoleBound):
			t.Errorf("round %d: not granted within %v of the revoke", round, delay+blackHoleBound)
			<-granted
		}
		link.Restore()
	}
}

// awaitHeard waits for heard, closed when what (a loss or a grant that
// happened at acted) is heard, within blackHoleBound.
func awaitHeard(t *testing.T, what string, heard <-chan struct{}, acted time.Time) {
	t.Helper()
	select {
	case <-heard:
		t.Logf("%s heard %v after it happened", what, time.Since(acted).Round(time.Millisecond))
	case <-time.After(blackHoleBound):
		t.Errorf("%s not heard within %v with the session's leader isolated", what, blackHoleBound)
	}
}

// pinnedLink waits until cc's keeper lends its connection to the leader,
// and returns the leader's link.
func (cc *cutClient) pinnedLink(t *testing.T) *embedtest.Link {
	t.Helper()
	waitFor(t, setupBound, "the keeper pinned to the leader", func() bool {
		lent, leader := testhook.LentConn(cc.s)
		return lent && leader
	})
	leader := waitLeader(t, cc.c)
	for i, m := range cc.c.Members() {
		if m == leader {
			return cc.links[i]
		}
	}
	t.Fatal("the leader is not a member")
	return nil
}

// cutSoon cuts l 0-3 ms after it is called: at the moment of an enqueue.
// The pause places the fault; it stands in for no event.
func cutSoon(l *embedtest.Link) {
	time.Sleep(rand.N(3*time.Millisecond + 1))
	l.Cut()
}
