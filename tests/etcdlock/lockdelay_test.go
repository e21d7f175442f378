package etcdlock_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startHolder starts a child process that locks name on a session of ttl
// with lock-delay delay; it returns the process once it holds.
func startHolder(t *testing.T, name string, ttl, delay time.Duration) *exec.Cmd {
	t.Helper()
	cmd, out := startChild(t, "lock", "NAME="+name, "TTL="+ttl.String(), "DELAY="+delay.String())
	if line, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("child: %q %v", line, err)
	}
	return cmd
}

// lockInBackground starts a Lock of name on s and returns the channel of
// its grant's moment, once the waiter is in line behind the holder.
func lockInBackground(t *testing.T, ctx context.Context, s *etcdlock.Session, name string) <-chan time.Time {
	t.Helper()
	return lockBehind(t, ctx, s, name, 1)
}

// lockBehind is lockInBackground behind ahead keys.
func lockBehind(t *testing.T, ctx context.Context, s *etcdlock.Session, name string, ahead int) <-chan time.Time {
	t.Helper()
	got := make(chan time.Time, 1)
	go func() {
		l, err := etcdlock.NewMutex(s, name).Lock(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Unlock(ctx)
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, s.Client(), name)) == ahead+1 })
	return got
}

// awaitDelete returns when the first key of name is deleted (watched from
// now), with the moment this process saw it.
func awaitDelete(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) func() time.Time {
	t.Helper()
	keys := keysUnder(t, cli, name)
	wch := cli.Watch(ctx, keys[0], clientv3.WithFilterPut())
	return func() time.Time {
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return time.Now()
				}
			}
		}
		t.Fatal("watch ended")
		return time.Time{}
	}
}

// TestLockDelayAfterCrash: a holder process with a 3 s lock-delay is
// SIGKILLed; its lease runs out and its key goes, and the waiter is granted
// no sooner than 3 s after that. Describe shows the holder's delay.
func TestLockDelayAfterCrash(t *testing.T) {
	t.Parallel() // its own names and sessions; mostly waits out delays
	const ttl, delay = 2 * time.Second, 3 * time.Second
	name := embedtest.UniqueName(t, "test")
	cmd := startHolder(t, name, ttl, delay)
	s := locktest.OpenSession(t, shared.TestClient(t))
	ctx := embedtest.Context(t, 30*time.Second)
	st, err := etcdlock.Describe(ctx, s.Client(), name)
	if err != nil || st.Holder == nil || st.Holder.LockDelay != delay {
		t.Fatalf("Describe: %+v %v; want the holder's lock-delay %v", st, err, delay)
	}
	deleted := awaitDelete(t, ctx, s.Client(), name)
	got := lockInBackground(t, ctx, s, name)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gone := deleted()
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	// The waiter saw the deletion no later than this process did; allow
	// for this process seeing it a moment later.
	if d := at.Sub(gone); d < delay-250*time.Millisecond {
		t.Fatalf("granted %v after the lease ran out; want no sooner than the lock-delay %v", d, delay)
	} else {
		t.Logf("granted %v after the lease ran out (lock-delay %v)", d, delay)
	}
}

// TestLockDelayNotOnRelease: with a lock-delay set, an Unlock, a
// Session.Close and a Break pass the lock at once; a revoke of the lease
// by someone else waits it out.
func TestLockDelayNotOnRelease(t *testing.T) {
	t.Parallel() // its own names and sessions; mostly waits out delays
	const delay = 4 * time.Second
	cli := shared.TestClient(t)
	waiter := locktest.OpenSession(t, shared.TestClient(t))
	ctx := embedtest.Context(t, time.Minute)
	for _, tc := range []struct {
		what    string
		end     func(s *etcdlock.Session, l *etcdlock.Lock, name string) error
		delayed bool
	}{
		{"unlock", func(_ *etcdlock.Session, l *etcdlock.Lock, _ string) error { return l.Unlock(ctx) }, false},
		{"close", func(s *etcdlock.Session, _ *etcdlock.Lock, _ string) error { return s.Close() }, false},
		{"break", func(_ *etcdlock.Session, l *etcdlock.Lock, name string) error {
			return etcdlock.Break(ctx, cli, name, l.Token())
		}, false},
		{"revoke", func(s *etcdlock.Session, _ *etcdlock.Lock, _ string) error {
			_, err := cli.Revoke(ctx, s.Lease())
			return err
		}, true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
			l := mustLock(t, etcdlock.NewMutex(holder, name))
			got := lockInBackground(t, ctx, waiter, name)
			start := time.Now()
			if err := tc.end(holder, l, name); err != nil {
				t.Fatal(err)
			}
			at := <-got
			if at.IsZero() {
				t.FailNow()
			}
			d := at.Sub(start)
			if tc.delayed != (d >= delay/2) {
				t.Fatalf("granted %v after the %s; lock-delay %v, want it waited out: %v", d, tc.what, delay, tc.delayed)
			}
			t.Logf("granted %v after the %s", d.Round(time.Millisecond), tc.what)
		})
	}
}

// TestLockDelayIsChecked: a lock-delay below 0 or above a minute is
// ErrInvalidArgument.
func TestLockDelayIsChecked(t *testing.T) {
	cli := shared.TestClient(t)
	for _, d := range []time.Duration{-time.Second, time.Minute + time.Millisecond} {
		if _, err := etcdlock.NewSession(embedtest.Context(t, 10*time.Second), cli, etcdlock.WithLockDelay(d)); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Fatalf("WithLockDelay(%v): %v", d, err)
		}
	}
}

// TestLockDelayPassedOn: the holder's session has a 4 s lock-delay and its
// lease is revoked; the first waiter leaves as it starts to wait the delay
// out. The second waiter is granted no sooner than the delay's end: the
// first passes it on in its key's last value, not only in its memory.
func TestLockDelayPassedOn(t *testing.T) {
	t.Parallel() // its own names and sessions; mostly waits out delays
	const delay = 4 * time.Second
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
	mustLock(t, etcdlock.NewMutex(holder, name))
	ctx := embedtest.Context(t, 30*time.Second)
	first := locktest.OpenSession(t, cli)
	firstCtx, leave := context.WithCancel(ctx)
	defer leave()
	setHook(t, func(p testhook.Point, err error) error {
		if p == testhook.HoldOff {
			leave() // it leaves during the delay
		}
		return err
	}, first)
	left := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewMutex(first, name).Lock(firstCtx)
		left <- err
	}()
	waitFor(t, 10*time.Second, "the first waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	got := lockBehind(t, ctx, locktest.OpenSession(t, cli), name, 2)
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first waiter: %v, want it to leave (context.Canceled)", err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(start); d < delay {
		t.Fatalf("second waiter granted %v after the revoke; want no sooner than the lock-delay %v", d, delay)
	} else {
		t.Logf("second waiter granted %v after the revoke (lock-delay %v)", d.Round(time.Millisecond), delay)
	}
}

// TestLockDelayAcrossCompaction: the waiter's watch runs on a path that is
// cut; meanwhile the holder's lease (lock-delay 4 s) is revoked and the
// history compacted past the deletion, so the watch, moved to another path,
// reports a compaction and the waiter learns of the deletion from a re-read
// without the deleted value. It still waits the delay out, from then.
func TestLockDelayAcrossCompaction(t *testing.T) {
	t.Parallel() // its own names and sessions; mostly waits out delays
	const delay = 4 * time.Second
	c := embedtest.Start(t)
	cfg := c.ClientConfig()
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0 // a cut path stays open
	wcli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wcli.Close() })
	s, _ := keptSession(t, c, wcli)
	setMonitorDelay(t, time.Hour, s)
	link, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	t.Cleanup(link.Restore)
	lendTo := func(ep string) {
		conn, err := wcli.Dial(ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(testhook.Lend(s, wcli, conn, ep))
	}
	cli := c.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	holder := locktest.OpenSession(t, cli, etcdlock.WithLockDelay(delay))
	mustLock(t, etcdlock.NewMutex(holder, name))
	ctx := embedtest.Context(t, 30*time.Second)
	lendTo(link.Endpoints()[0])
	hooks := countHooks(t, s)
	got := lockInBackground(t, ctx, s, name)
	hooks.awaitWatchCreated(t, ctx)
	link.Cut()
	start := time.Now()
	if _, err := cli.Revoke(ctx, holder.Lease()); err != nil {
		t.Fatal(err)
	}
	compactAfterFillers(t, ctx, cli, name)
	lendTo(c.Members()[1].Endpoint())
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(start); d < delay {
		t.Fatalf("granted %v after the revoke; want no sooner than the lock-delay %v", d, delay)
	} else {
		t.Logf("granted %v after the revoke (lock-delay %v)", d.Round(time.Millisecond), delay)
	}
}
