package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// delayAcq takes name on s in one recipe's way.
type delayAcq func(ctx context.Context, s *etcdlock.Session, name string) error

var (
	delayWriter delayAcq = func(ctx context.Context, s *etcdlock.Session, name string) error {
		_, err := etcdlock.NewRWMutex(s, name).Lock(ctx)
		return err
	}
	delayReader delayAcq = func(ctx context.Context, s *etcdlock.Session, name string) error {
		_, err := etcdlock.NewRWMutex(s, name).RLock(ctx)
		return err
	}
	delaySem delayAcq = func(ctx context.Context, s *etcdlock.Session, name string) error {
		_, err := etcdlock.NewSemaphore(s, name, 2).Acquire(ctx)
		return err
	}
	delayCampaign delayAcq = func(ctx context.Context, s *etcdlock.Session, name string) error {
		_, err := etcdlock.NewElection(s, name).Campaign(ctx, "v")
		return err
	}
)

// delayKind is a case of TestAttackLockDelayKinds.
type delayKind struct {
	what    string
	holders []delayAcq // the first is revoked (it has the delay)
	leavers []delayAcq
	last    delayAcq
}

// TestAttackLockDelayKinds: the passed-on delay for the other recipes.
// The holder (lock-delay 3 s) has its lease revoked; every leaver leaves as
// it starts to hold the delay off; the last waiter must wait the delay out.
func TestAttackLockDelayKinds(t *testing.T) {
	t.Parallel() // its own names, sessions and links; mostly waits out delays
	for _, tc := range []delayKind{
		{"rw readers leave", []delayAcq{delayWriter}, []delayAcq{delayReader, delayReader}, delayWriter},
		{"rw writer leaves", []delayAcq{delayWriter}, []delayAcq{delayWriter}, delayReader},
		{"rw reader then writer leave", []delayAcq{delayWriter}, []delayAcq{delayReader, delayWriter}, delayReader},
		{"semaphore", []delayAcq{delaySem, delaySem}, []delayAcq{delaySem}, delaySem},
		{"semaphore two leave", []delayAcq{delaySem, delaySem}, []delayAcq{delaySem, delaySem}, delaySem},
		{"election", []delayAcq{delayCampaign}, []delayAcq{delayCampaign}, delayCampaign},
		{"election two leave", []delayAcq{delayCampaign}, []delayAcq{delayCampaign, delayCampaign}, delayCampaign},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel() // its own name and sessions
			tc.run(t)
		})
	}
}

func (tc delayKind) run(t *testing.T) {
	const delay = 3 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 40*time.Second)
	var revokee *etcdlock.Session
	for i, h := range tc.holders {
		var s *etcdlock.Session
		if i == 0 {
			s = locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
			revokee = s
		} else {
			s = locktest.OpenSession(t, cli)
		}
		if err := h(ctx, s, name); err != nil {
			t.Fatal(err)
		}
	}
	n := len(tc.holders)
	left := make(chan error, len(tc.leavers))
	for _, l := range tc.leavers {
		n++
		tc.leaver(t, ctx, name, n, l, left)
	}
	got := make(chan time.Time, 1)
	last := locktest.OpenSession(t, cli)
	go func() {
		if err := tc.last(ctx, last, name); err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
	}()
	n++
	waitFor(t, 10*time.Second, "the last", func() bool { return len(keysUnder(t, cli, name)) == n })
	start := time.Now()
	if _, err := cli.Revoke(ctx, revokee.Lease()); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	for range tc.leavers {
		select {
		case err := <-left:
			t.Logf("a leaver: %v", err)
		case <-time.After(5 * time.Second):
			t.Log("a leaver did not return")
		}
	}
	if d := at.Sub(start); d < delay-250*time.Millisecond {
		t.Fatalf("granted %v after the revoke; want no sooner than %v", d, delay)
	} else {
		t.Logf("last granted %v after the revoke", d.Round(time.Millisecond))
	}
}

// leaver queues l on a session of its own, which leaves (its context
// ends) as it starts to hold a delay off; its result goes to left. n is
// the count of keys once it is queued.
func (tc delayKind) leaver(t *testing.T, ctx context.Context, name string, n int, l delayAcq, left chan<- error) {
	t.Helper()
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	lctx, leave := context.WithCancel(ctx)
	t.Cleanup(leave)
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			time.Sleep(100 * time.Millisecond)
			leave()
		}
		return err
	}, s)
	go func() { left <- l(lctx, s, name) }()
	waitFor(t, 10*time.Second, "a leaver", func() bool { return len(keysUnder(t, cli, name)) == n })
}
