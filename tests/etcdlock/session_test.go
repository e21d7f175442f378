package etcdlock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

func TestSessionBasics(t *testing.T) {
	cli := shared.TestClient(t)
	before := time.Now()
	s := locktest.OpenSession(t, cli, etcdlock.WithTTL(2500*time.Millisecond))
	if s.TTL() != 3*time.Second {
		t.Fatalf("TTL %v, want 3s (rounded up to whole seconds)", s.TTL())
	}
	if s.Client() != cli || s.Lease() == 0 {
		t.Fatalf("client %p lease %x", s.Client(), s.Lease())
	}
	if id := s.Identity(); !strings.Contains(id, "/") {
		t.Fatalf("default identity %q, want hostname/pid", id)
	}
	v0 := s.ValidUntil()
	if !v0.After(before) || v0.After(before.Add(s.TTL())) {
		t.Fatalf("ValidUntil %v not within (start, start+TTL]", v0)
	}
	waitFor(t, 5*time.Second, "a keepalive to extend ValidUntil", func() bool { return s.ValidUntil().After(v0) })
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if id := locktest.OpenSession(t, cli, etcdlock.WithIdentity("billing-7")).Identity(); id != "billing-7" {
		t.Fatalf("identity %q", id)
	}
}

func TestSessionClose(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	l := mustLock(t, etcdlock.NewMutex(s, name))
	lctx := l.Context()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed")
	}
	if !errors.Is(s.Err(), etcdlock.ErrSessionClosed) {
		t.Fatalf("Err %v", s.Err())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), etcdlock.ErrSessionClosed) {
		t.Fatalf("lock cause %v", context.Cause(lctx))
	}
	// Close revoked the lease: the lock is free at once, not after the TTL.
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys after Close: %v", keys)
	}
}

func TestLeaseGoneEndsSessionOnWrite(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	ctx := embedtest.Context(t, 10*time.Second)
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	// Lock right away: the next keepalive is seconds off, the Put finds the lease gone.
	start := time.Now()
	if _, err := etcdlock.NewMutex(s, embedtest.UniqueName(t, "test")).Lock(ctx); !errors.Is(err, etcdlock.ErrSessionExpired) {
		t.Fatalf("Lock on a revoked lease: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	if !errors.Is(s.Err(), etcdlock.ErrSessionExpired) {
		t.Fatalf("session err %v", s.Err())
	}
}

func TestClosingClientEndsSessions(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli, etcdlock.WithTTL(3*time.Second))
	name := embedtest.UniqueName(t, "test")
	mustLock(t, etcdlock.NewMutex(s, name))
	other := locktest.OpenSession(t, shared.TestClient(t))
	got := make(chan time.Time, 1)
	ctx := embedtest.Context(t, 30*time.Second)
	go func() {
		l, err := etcdlock.NewMutex(other, name).Lock(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Unlock(ctx)
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, other.Client(), name)) == 2 })
	closed := time.Now()
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if !errors.Is(s.Err(), etcdlock.ErrSessionExpired) {
		t.Fatalf("Err after client close: %v", s.Err())
	}
	at := <-got
	if d := at.Sub(closed); at.IsZero() || d > s.TTL()+2*time.Second {
		t.Fatalf("lock freed %v after the client closed; want within TTL + 2s", d)
	}
}

// TestCrashedClientFreesLock SIGKILLs a child process that holds a lock.
func TestCrashedClientFreesLock(t *testing.T) {
	name := embedtest.UniqueName(t, "test")
	const ttl = 3 * time.Second
	cmd, out := startChild(t, "lock", "NAME="+name, "TTL="+ttl.String())
	line, err := out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("child: %q %v", line, err)
	}
	childToken, err := etcdlock.ParseToken(strings.TrimSpace(strings.TrimPrefix(line, "HELD ")))
	if err != nil {
		t.Fatal(err)
	}
	s := locktest.OpenSession(t, shared.TestClient(t))
	ctx := embedtest.Context(t, 30*time.Second)
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(s, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, s.Client(), name)) == 2 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if d := time.Since(killed); d > ttl+2*time.Second {
		t.Fatalf("granted %v after the holder was killed; want within TTL + 2s", d)
	} else {
		t.Logf("granted %v after SIGKILL (TTL %v)", d, ttl)
	}
	if l.Token() <= childToken {
		t.Fatalf("token %d not above the crashed holder's %d", l.Token(), childToken)
	}
}

// TestNoGoroutineOutlivesSessionAndClient exercises every goroutine the
// library starts (keeper, reaper, own-key monitors, waits) and checks that
// none is left once the sessions and the client are closed.
func TestNoGoroutineOutlivesSessionAndClient(t *testing.T) {
	before := ourGoroutines()
	func() {
		cli, err := shared.Client()
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx := embedtest.Context(t, 30*time.Second)
		s1, err := etcdlock.NewSession(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := etcdlock.NewSession(ctx, cli, etcdlock.WithLeaderPinning(false))
		if err != nil {
			t.Fatal(err)
		}
		name := embedtest.UniqueName(t, "test")
		l, err := etcdlock.NewMutex(s1, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Context() // starts the own-key monitor
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := etcdlock.NewMutex(s2, name).Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting Lock: %v", err)
		}
		cancel()
		dead, cancelDead := context.WithCancel(ctx)
		cancelDead()
		_ = l.Unlock(dead) // hands the key to the reaper
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		// s2 is not closed: closing its client must end it and its goroutines.
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for id, stack := range ourGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of etcdlock outlived their session and client:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ourGoroutines returns the stacks, by goroutine header, of the goroutines
// running code of package etcdlock itself (not embedtest, not tests).
func ourGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/etcdlock/etcdlock.") || strings.Contains(g, "testing.tRunner") ||
			strings.Contains(g, "testing.(*M)") {
			continue
		}
		header, _, _ := strings.Cut(g, " [")
		out[header] = g
	}
	return out
}
