package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMutualExclusionWithFence(t *testing.T) {
	const sessions, perSession, rounds = 4, 2, 12
	name := uniqueName(t)
	var (
		fence   Fence
		inside  atomic.Int32
		counter int // guarded by the lock, on purpose not by Go
		grants  atomic.Int64
		wg      sync.WaitGroup
	)
	ctx := testCtx(t, 2*time.Minute)
	for i := 0; i < sessions; i++ {
		s := openSession(t, nil)
		m := NewMutex(s, name)
		for j := 0; j < perSession; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if err := fence.Admit(l.Token()); err != nil {
						t.Errorf("admit on entry: %v", err)
					}
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders inside the critical section", n)
					}
					v := counter
					runtime.Gosched()
					counter = v + 1
					grants.Add(1)
					inside.Add(-1)
					if err := fence.Admit(l.Token()); err != nil {
						t.Errorf("admit before unlock: %v", err)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if int64(counter) != grants.Load() || grants.Load() != sessions*perSession*rounds {
		t.Fatalf("counter %d, grants %d, want %d", counter, grants.Load(), sessions*perSession*rounds)
	}
}

// enqueueWaiters starts n Lock calls on name, one at a time, each one only
// after the previous is in the queue, and returns the channel on which each
// sends its index when granted (it then unlocks at once).
func enqueueWaiters(t *testing.T, cli *clientv3.Client, name string, n int, sessions []*Session) <-chan int {
	t.Helper()
	order := make(chan int, n)
	ctx := testCtx(t, 2*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i := 0; i < n; i++ {
		before := len(keysUnder(t, cli, name))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := NewMutex(sessions[i%len(sessions)], name).Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		}()
		waitFor(t, 10*time.Second, "waiter to enqueue", func() bool { return len(keysUnder(t, cli, name)) > before })
	}
	return order
}

func TestFIFO(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ss := []*Session{openSession(t, cli), openSession(t, nil), openSession(t, nil)}
	holder := mustLock(t, NewMutex(ss[0], name))
	const n = 8
	order := enqueueWaiters(t, cli, name, n, ss)
	if err := holder.Unlock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < n; want++ {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
}

// kvCalls counts the KV and Watch requests all members of the shared cluster served.
func kvCalls() int64 {
	var n int64
	for _, m := range shared.Members() {
		for _, method := range []string{"/etcdserverpb.KV/Range", "/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Put",
			"/etcdserverpb.KV/DeleteRange", "/etcdserverpb.Watch/Watch", "/etcdserverpb.Lease/LeaseTimeToLive"} {
			n += m.Calls(method)
		}
	}
	return n
}

func TestReleaseWakesOneWaiter(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	s := openSession(t, cli)
	holder := mustLock(t, NewMutex(s, name))
	const n = 20
	ctx := testCtx(t, time.Minute)
	granted := make(chan *Lock, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := NewMutex(s, name).Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			granted <- l
		}()
	}
	waitFor(t, 20*time.Second, "20 waiters", func() bool { return len(keysUnder(t, cli, name)) == n+1 })
	// Let every waiter's watches be established before counting.
	settle := func() int64 {
		prev := kvCalls()
		for {
			time.Sleep(300 * time.Millisecond)
			cur := kvCalls()
			if cur == prev {
				return cur
			}
			prev = cur
		}
	}
	before := settle()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-granted
	after := settle()
	if d := after - before; d > 6 {
		t.Fatalf("one release cost %d KV/watch requests with %d waiters; want a constant (<= 6)", d, n)
	} else {
		t.Logf("one release with %d waiters: %d requests", n, d)
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := (<-granted).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestTryLock(t *testing.T) {
	cli := newClient(t, nil)
	s1, s2 := openSession(t, cli), openSession(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	l, err := NewMutex(s1, name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		resp, err := cli.Get(ctx, "etcdlock/")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	r0 := rev()
	if _, err := NewMutex(s2, name).TryLock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock on a held lock: %v, want ErrLocked", err)
	}
	if r1 := rev(); r1 != r0 {
		t.Fatalf("a failed TryLock wrote: revision %d -> %d", r0, r1)
	}
	// Waited on: the holder leaves but a waiter is queued.
	waiting := make(chan *Lock, 1)
	go func() {
		w, err := NewMutex(s2, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		waiting <- w
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	if _, err := NewMutex(s1, name).TryLock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock on a waited-on lock: %v, want ErrLocked", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-waiting
	if w == nil {
		t.FailNow()
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := NewMutex(s2, name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if l2.Token() <= w.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), w.Token())
	}
	_ = l2.Unlock(ctx)
}

func TestUnlock(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)

	t.Run("twice", func(t *testing.T) {
		l := mustLock(t, NewMutex(openSession(t, cli), name))
		for i := 0; i < 2; i++ {
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("unlock %d: %v", i+1, err)
			}
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
			t.Fatalf("cause %v, want ErrReleased", cause)
		}
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left: %v", keys)
		}
	})
	t.Run("after session expired", func(t *testing.T) {
		s := openSession(t, cli)
		l := mustLock(t, NewMutex(s, name))
		if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
			t.Fatal(err)
		}
		err := l.Unlock(ctx)
		if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("unlock after revoke: %v, want ErrNotHeld and ErrSessionExpired", err)
		}
		if err2 := l.Unlock(ctx); err2 == nil || err2.Error() != err.Error() {
			t.Fatalf("second unlock: %v, want %v", err2, err)
		}
	})
	t.Run("canceled ctx still frees", func(t *testing.T) {
		l := mustLock(t, NewMutex(openSession(t, cli), name))
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Unlock(dead); !errors.Is(err, context.Canceled) {
			t.Fatalf("unlock with canceled ctx: %v", err)
		}
		start := time.Now()
		waitFor(t, time.Second, "the key to be reaped", func() bool { return len(keysUnder(t, cli, name)) == 0 })
		t.Logf("freed %v after Unlock", time.Since(start))
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("later unlock: %v", err)
		}
	})
}

func TestLostGrant(t *testing.T) {
	cli := newClient(t, nil)
	ctx := testCtx(t, 30*time.Second)
	tests := []struct {
		name   string
		break_ func(s *Session, l *Lock) error
		cause  error
	}{
		{"lease revoked", func(s *Session, _ *Lock) error { _, err := cli.Revoke(ctx, s.Lease()); return err }, ErrSessionExpired},
		{"key deleted", func(_ *Session, l *Lock) error { _, err := cli.Delete(ctx, l.Key()); return err }, ErrLockLost},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openSession(t, cli)
			l := mustLock(t, NewMutex(s, uniqueName(t)))
			lctx := l.Context()
			if err := tc.break_(s, l); err != nil {
				t.Fatal(err)
			}
			select {
			case <-lctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Lock.Context not canceled")
			}
			if cause := context.Cause(lctx); !errors.Is(cause, tc.cause) {
				t.Fatalf("cause %v, want %v", cause, tc.cause)
			}
			if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !errors.Is(err, tc.cause) {
				t.Fatalf("unlock: %v, want ErrNotHeld and %v", err, tc.cause)
			}
			if tc.cause == ErrSessionExpired {
				<-s.Done()
				if !errors.Is(s.Err(), ErrSessionExpired) {
					t.Fatalf("session err %v", s.Err())
				}
			}
		})
	}
}

func TestLostWhileWaiting(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	holder := mustLock(t, NewMutex(openSession(t, cli), name))
	defer holder.Unlock(ctx)
	s := openSession(t, cli)
	errc := make(chan error, 1)
	go func() {
		_, err := NewMutex(s, name).Lock(ctx)
		errc <- err
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	keys := keysUnder(t, cli, name)
	for _, k := range keys {
		if k != holder.Key() {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("waiting Lock after its key was deleted: %v, want ErrLockLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting Lock did not notice its key was deleted")
	}
}

func TestBadInput(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	ctx := testCtx(t, 30*time.Second)
	long := strings.Repeat("x", 1025)
	for _, tc := range []struct {
		name string
		m    *Mutex
		want error
	}{
		{"empty name", NewMutex(s, ""), ErrInvalidName},
		{"long name", NewMutex(s, long), ErrInvalidName},
		{"invalid utf-8", NewMutex(s, "a\xffb"), ErrInvalidName},
		{"nil session", NewMutex(nil, "x"), ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.m.Lock(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Lock: %v, want %v", err, tc.want)
			}
			if _, err := tc.m.TryLock(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("TryLock: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := NewMutex(s, strings.Repeat("é", 512)).TryLock(ctx); err != nil {
		t.Fatalf("a 1024-byte name: %v", err)
	}
	for _, tc := range []struct {
		name string
		cli  *clientv3.Client
		opts []SessionOption
	}{
		{"nil client", nil, nil},
		{"zero TTL", cli, []SessionOption{WithTTL(0)}},
		{"negative TTL", cli, []SessionOption{WithTTL(-time.Second)}},
		{"TTL over 24h", cli, []SessionOption{WithTTL(25 * time.Hour)}},
		{"empty identity", cli, []SessionOption{WithIdentity("")}},
		{"nil logger", cli, []SessionOption{WithLogger(nil)}},
		{"nil option", cli, []SessionOption{nil}},
		{"nil observer", cli, []SessionOption{WithObserver(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := NewSession(ctx, tc.cli, tc.opts...); !errors.Is(err, ErrInvalidArgument) || s != nil {
				t.Fatalf("NewSession: %v, %v; want ErrInvalidArgument", s, err)
			}
		})
	}
	t.Run("closed session", func(t *testing.T) {
		s := openSession(t, cli)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		name := uniqueName(t)
		if _, err := NewMutex(s, name).Lock(ctx); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("Lock on a closed session: %v", err)
		}
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left: %v", keys)
		}
	})
	t.Run("canceled context", func(t *testing.T) {
		dead, cancel := context.WithCancelCause(context.Background())
		cause := errors.New("caller gave up")
		cancel(cause)
		name := uniqueName(t)
		_, err := NewMutex(s, name).Lock(dead)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Fatalf("Lock with canceled ctx: %v, want context.Canceled and its cause", err)
		}
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left: %v", keys)
		}
	})
}

// TestCancelAtEveryPoint cancels Lock's ctx at each point of an acquisition
// (test hooks make the timing certain) and checks that Lock fails with the
// ctx's error and leaves no key behind, and that the queue still works.
func TestCancelAtEveryPoint(t *testing.T) {
	cli := newClient(t, nil)
	holderSession := openSession(t, cli)
	for _, tc := range []struct {
		name  string
		point hookPoint
		fake  bool // the Txn applied, but the client saw the ctx end (unknown outcome)
	}{
		{"before enqueue", hookBeforeEnqueue, false},
		{"during enqueue (applied, answer lost)", hookEnqueued, true},
		{"right after enqueue", hookEnqueued, false},
		{"during the wait", hookWaiting, false},
		{"during the hand-off read", hookHandoffRead, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueName(t)
			ctx := testCtx(t, 30*time.Second)
			holder := mustLock(t, NewMutex(holderSession, name))
			s := openSession(t, cli)
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var fired atomic.Bool
			hook := func(p hookPoint, err error) error {
				if p != tc.point || fired.Load() {
					return err
				}
				if p == hookHandoffRead && !fired.Load() {
					// Only the waiter's reads, after the holder's release.
					if holder.Context().Err() == nil {
						return err
					}
				}
				fired.Store(true)
				cancel()
				if tc.fake {
					return lctx.Err()
				}
				return err
			}
			setHook(t, hook, s)
			errc := make(chan error, 1)
			go func() {
				_, err := NewMutex(s, name).Lock(lctx)
				errc <- err
			}()
			if tc.point == hookHandoffRead {
				waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			err := <-errc
			clearHook(s)
			if !fired.Load() {
				t.Fatalf("hook point never reached (Lock: %v)", err)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock: %v, want context.Canceled", err)
			}
			_ = holder.Unlock(ctx)
			waitFor(t, 2*time.Second, "no key left", func() bool { return len(keysUnder(t, cli, name)) == 0 })
			l, err := NewMutex(s, name).TryLock(ctx)
			if err != nil {
				t.Fatalf("the lock is not free afterwards: %v", err)
			}
			_ = l.Unlock(ctx)
		})
	}
}

func TestPrefixNamesDoNotInterfere(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	base := uniqueName(t)
	names := []string{base + "/jobs/a", base + "/jobs/a/b", base + "/jobs/a%/m", base + "/jobs/a\x00"}
	var locks []*Lock
	for _, n := range names {
		l, err := NewMutex(openSession(t, nil), n).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock %q while the others are held: %v", n, err)
		}
		locks = append(locks, l)
	}
	for _, l := range locks {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKindMismatch(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	// Another recipe's key (as an election would write it) on the same name.
	key, err := newWaiterKey(namePrefix(name), tagElection, s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, encodeValue("other", "v"), clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMutex(s, name).TryLock(ctx); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("TryLock: %v, want ErrKindMismatch", err)
	}
	if _, err := NewMutex(s, name).Lock(ctx); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("Lock: %v, want ErrKindMismatch", err)
	}
	waitFor(t, 2*time.Second, "only the other key left", func() bool { return len(keysUnder(t, cli, name)) == 1 })
}

func TestCompactionDuringWait(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	holder := mustLock(t, NewMutex(openSession(t, cli), name))
	got := make(chan *Lock, 1)
	go func() {
		l, err := NewMutex(openSession(t, cli), name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	for i := 0; i < 20; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s-filler", name), fmt.Sprint(i)); err != nil {
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
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= holder.Token() {
		t.Fatalf("token %d not above %d", l.Token(), holder.Token())
	}
	// The grant's own-key watch starts at its create revision + 1, which is
	// now compacted: deleting the key must still be noticed.
	lctx := l.Context()
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(lctx))
	}
}

func TestGuard(t *testing.T) {
	cli := newClient(t, nil)
	ctx := testCtx(t, 30*time.Second)
	name := uniqueName(t)
	l := mustLock(t, NewMutex(openSession(t, cli), name))
	data := name + "-data"
	resp, err := cli.Txn(ctx).If(l.Guard()).Then(clientv3.OpPut(data, "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("guarded write while held: %v %v", resp, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err = cli.Txn(ctx).If(l.Guard()).Then(clientv3.OpPut(data, "2")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("guarded write after unlock succeeded: %v %v", resp, err)
	}
}

// TestSessionReusesKeyNames: a session's acquisitions of a name reuse key
// names once the previous key is certainly gone (etcd keeps every deleted
// key in its index until compaction, and reads of the queue walk them), never
// while it is held, and never after a write of unknown outcome until the
// reaper has raised the session's barrier and deleted what the write made.
func TestSessionReusesKeyNames(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	m := NewMutex(s, name)
	l1 := mustLock(t, m)
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustLock(t, m)
	if l2.Key() != l1.Key() || l2.Token() <= l1.Token() {
		t.Fatalf("second acquisition: key %s token %d; want key %s reused with a larger token than %d", l2.Key(), l2.Token(), l1.Key(), l1.Token())
	}
	// While l2 holds its key, another acquisition of the session gets another.
	got := make(chan *Lock, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the second acquisition to queue", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := <-got
	if l3 == nil || l3.Key() == l2.Key() {
		t.Fatalf("concurrent acquisitions shared a key: %v", l3)
	}
	_ = l3.Unlock(ctx)

	// A write of unknown outcome keeps its key name out of use.
	hook := func(p hookPoint, err error) error {
		if p == hookEnqueued {
			return context.DeadlineExceeded // as if the answer was lost
		}
		return err
	}
	setHook(t, hook, s)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := m.Lock(short)
	cancel()
	clearHook(s)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with lost answers: %v", err)
	}
	l4 := mustLock(t, m)
	if l4.Key() == l1.Key() {
		t.Fatalf("key %s reused although a write of it had an unknown outcome", l4.Key())
	}
	_ = l4.Unlock(ctx)
}

// TestWaiterReadsOnlyWhatChanged: a waiter whose predecessor watch starts at
// the revision of its own enqueue (no write came between) knows the queue at
// that revision already and reads nothing before the hand-off; the hand-off
// itself costs one read. A cluster of its own keeps other tests' writes out.
func TestWaiterReadsOnlyWhatChanged(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1))
	cli := newClient(t, c)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	holder := mustLock(t, NewMutex(openSession(t, cli), name))
	ws := openSession(t, cli)
	hooks := countHooks(t, ws)
	granted := lockAndUnlock(ctx, NewMutex(ws, name))
	hooks.awaitWatchCreated(t, ctx)
	reads := &hooks.n[hookHandoffRead]
	if n := reads.Load(); n != 0 {
		t.Fatalf("the waiter read the queue %d times before the hand-off; want 0 (nothing changed since its enqueue)", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("the hand-off cost %d reads; want 1", n)
	}
}

// TestShortWaitOpensOneWatch: a waiter granted before waiterMonitorDelay
// never opens the watch on its own key (only its predecessor watch); a
// waiter that waits longer does (TestLostWhileWaiting).
func TestShortWaitOpensOneWatch(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	holder := mustLock(t, NewMutex(openSession(t, cli), name))
	ws := openSession(t, cli)
	setMonitorDelay(t, time.Minute, ws)
	hooks := countHooks(t, ws)
	waiter := NewMutex(ws, name)
	granted := make(chan *Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	hooks.awaitWatchCreated(t, ctx)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-granted
	if l == nil {
		return
	}
	if n := hooks.n[hookMonitor].Load(); n != 0 {
		t.Fatalf("a short wait started %d own-key monitors; want 0", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// hookCounter counts the acquisition hook points passed (see countHooks).
type hookCounter struct {
	n       [numHookPoints]atomic.Int64
	created chan struct{}
}

// countHooks installs a test hook, removed at cleanup, that counts every
// hook point passed and signals predecessor watches being created.
func countHooks(t testing.TB, ss ...*Session) *hookCounter {
	t.Helper()
	h := &hookCounter{created: make(chan struct{}, 1)}
	hook := func(p hookPoint, err error) error {
		h.n[p].Add(1)
		if p == hookWatchCreated {
			select {
			case h.created <- struct{}{}:
			default:
			}
		}
		return err
	}
	setHook(t, hook, ss...)
	return h
}

// awaitWatchCreated waits until a waiter's predecessor watch is created.
func (h *hookCounter) awaitWatchCreated(t testing.TB, ctx context.Context) {
	t.Helper()
	select {
	case <-h.created:
	case <-ctx.Done():
		t.Fatal("the waiter's watch was never created")
	}
}

// setMonitorDelay sets the waiter monitor delay of each session.
func setMonitorDelay(t testing.TB, d time.Duration, ss ...*Session) {
	t.Helper()
	for _, s := range ss {
		s.tune.monitorDelay.Store(int64(d))
	}
}

// setHook installs hook as the test hook of each session until the test
// ends (or clearHook).
func setHook(t testing.TB, hook func(hookPoint, error) error, ss ...*Session) {
	t.Helper()
	for _, s := range ss {
		s.tune.hook.Store(&hook)
	}
	t.Cleanup(func() { clearHook(ss...) })
}

// clearHook removes the sessions' test hooks.
func clearHook(ss ...*Session) {
	for _, s := range ss {
		s.tune.hook.Store(nil)
	}
}

// lockAndUnlock locks m in a goroutine, unlocks at once, and sends the first
// error (nil when both succeed) on the returned channel.
func lockAndUnlock(ctx context.Context, m *Mutex) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	return done
}

// TestNoGrantAfterValidityRanOut: a grant decided after the session's
// validity clock ran out (an answer that came late, a process paused between
// the answer and the decision) is refused with ErrSessionExpired, and its key
// goes with the lease the session then revokes: the holder could not have
// known the lease still lived.
func TestNoGrantAfterValidityRanOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		point hookPoint // where the clock runs out
		acq   func(m *Mutex, ctx context.Context) (*Lock, error)
		queue bool // wait behind a holder of another session
	}{
		{"Lock of a free lock", hookEnqueued, (*Mutex).Lock, false},
		{"TryLock", hookEnqueued, (*Mutex).TryLock, false},
		{"Lock after a hand-off", hookHandoffRead, (*Mutex).Lock, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := newClient(t, nil)
			// A long TTL: no keepalive acknowledgement moves the clock
			// forward again between the hook and the decision.
			s := openSession(t, cli, WithTTL(time.Minute))
			name := uniqueName(t)
			ctx := testCtx(t, 30*time.Second)
			var holder *Lock
			released := context.Background() // never done: no hand-off to wait for
			if tc.queue {
				holder = mustLock(t, NewMutex(openSession(t, cli), name))
				released = holder.Context()
			}
			var ran atomic.Bool
			hook := func(p hookPoint, err error) error {
				// A hand-off read comes after the holder's release (a read
				// when the predecessor watch starts does not count).
				if p == tc.point && (!tc.queue || released.Err() != nil) && !ran.Swap(true) {
					s.mu.Lock()
					past := time.Now().Add(-time.Millisecond)
					s.validMono, s.validWall = past, past.Round(0)
					s.mu.Unlock()
				}
				return err
			}
			setHook(t, hook, s)
			res := make(chan error, 1)
			go func() {
				l, err := tc.acq(NewMutex(s, name), ctx)
				if err == nil {
					err = fmt.Errorf("granted %s after the validity clock ran out", l.Key())
				}
				res <- err
			}()
			if holder != nil {
				waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(keysUnder(t, cli, name)) == 2 })
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-res; !errors.Is(err, ErrSessionExpired) {
				t.Fatalf("got %v; want ErrSessionExpired", err)
			}
			if !ran.Load() {
				t.Fatal("the clock was never run out")
			}
			// The session revokes its lease at once, best effort (a second
			// at most); at worst the key goes when the lease's TTL runs out.
			waitFor(t, 75*time.Second, "the refused grant's key to go with the lease", func() bool { return len(keysUnder(t, cli, name)) == 0 })
		})
	}
}
