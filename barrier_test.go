package etcdlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestBarrierRefusesLateCreate: an acquisition gives up a key whose write had
// an unknown outcome (applied, its answer lost). The reaper raises the
// session's barrier, then deletes what exists. A copy of the lost write that
// reaches etcd only after that, however late, is refused: it cannot create a
// key nobody holds (a phantom holder for the rest of the session).
func TestBarrierRefusesLateCreate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		acquire func(ctx context.Context, m *Mutex) error
	}{
		{"Lock", func(ctx context.Context, m *Mutex) error { _, err := m.Lock(ctx); return err }},
		{"TryLock", func(ctx context.Context, m *Mutex) error { _, err := m.TryLock(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := newClient(t, nil)
			s := openSession(t, cli)
			name := uniqueName(t)
			dir := namePrefix(name)
			key := waiterKey(dir, tagMutex, s.Lease(), 0)
			lateCopy, _ := s.barrierCmp(dir) // what every write of this call compares
			ctx := testCtx(t, 30*time.Second)
			var losing atomic.Bool
			losing.Store(true)
			reaped := make(chan struct{})
			var once sync.Once
			hook := func(p hookPoint, err error) error {
				switch {
				case p == hookEnqueued && losing.Load():
					return context.DeadlineExceeded // applied, its answer lost
				case p == hookReaped && err == nil:
					once.Do(func() { close(reaped) })
				}
				return err
			}
			setHook(t, hook, s)
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := tc.acquire(short, NewMutex(s, name))
			cancel()
			losing.Store(false)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s with lost answers: %v", tc.name, err)
			}
			select {
			case <-reaped:
			case <-ctx.Done():
				t.Fatal("the reaper never deleted the key")
			}
			if keys := keysUnder(t, cli, name); len(keys) != 0 {
				t.Fatalf("keys left after the reaper: %v", keys)
			}
			// The lost write, delivered now.
			resp, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), lateCopy).
				Then(clientv3.OpPut(key, s.value(""), clientv3.WithLease(s.Lease()))).
				Commit()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded {
				t.Fatalf("a late copy of the given-up write created %s", key)
			}
			// The session goes on: its next Lock is granted.
			l := mustLock(t, NewMutex(s, name))
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBarrierRecreated: a barrier deleted by someone else is re-created by the
// next write that finds it gone, and locks go on working.
func TestBarrierRecreated(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	dir := namePrefix(name)
	ctx := testCtx(t, 30*time.Second)
	if err := s.raiseBarrier(ctx, dir); err != nil {
		t.Fatal(err)
	}
	raised := s.barrierRev(dir)
	if _, err := cli.Delete(ctx, barrierKey(dir, s.Lease())); err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, NewMutex(s, name))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, barrierKey(dir, s.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision <= raised || resp.Kvs[0].Lease != int64(s.Lease()) {
		t.Fatalf("barrier after its deletion and a Lock: %v (raised at %d)", resp.Kvs, raised)
	}
}

// TestKindCheckSeesWholeQueue: a refused joiner's key that is still in the
// queue (its removal failed) sits between a holder and the next joiner; the
// next joiner must see the holder's kind behind it, not only its neighbour.
func TestKindCheckSeesWholeQueue(t *testing.T) {
	for _, tc := range []struct {
		name       string
		holder     func(s *Session, name string) (*Lock, error)
		strayTag   string
		joinerSize int
	}{
		{"mutex holds, semaphore joins", func(s *Session, name string) (*Lock, error) {
			return NewMutex(s, name).Lock(testCtx(t, 10*time.Second))
		}, "s5", 5},
		{"semaphore of 1 holds, semaphore of 5 joins", func(s *Session, name string) (*Lock, error) {
			return NewSemaphore(s, name, 1).Acquire(testCtx(t, 10*time.Second))
		}, "s5", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := newClient(t, nil)
			holderS, strayS, joinerS := openSession(t, cli), openSession(t, cli), openSession(t, cli)
			name := uniqueName(t)
			ctx := testCtx(t, 30*time.Second)
			if _, err := tc.holder(holderS, name); err != nil {
				t.Fatal(err)
			}
			stray := waiterKey(namePrefix(name), tc.strayTag, strayS.Lease(), 7)
			if _, err := cli.Put(ctx, stray, strayS.value(""), clientv3.WithLease(strayS.Lease())); err != nil {
				t.Fatal(err)
			}
			sem := NewSemaphore(joinerS, name, tc.joinerSize)
			if l, err := sem.Acquire(ctx); !errors.Is(err, ErrKindMismatch) {
				t.Fatalf("Acquire behind a stray key: %v, %v; want ErrKindMismatch", l, err)
			}
			if l, err := sem.TryAcquire(ctx); !errors.Is(err, ErrKindMismatch) {
				t.Fatalf("TryAcquire behind a stray key: %v, %v; want ErrKindMismatch", l, err)
			}
		})
	}
}

// TestFailedAcquireLeavesNoKey: a Lock whose ctx ran out while it waited, and
// one refused for another kind, remove their keys before they return.
func TestFailedAcquireLeavesNoKey(t *testing.T) {
	cli := newClient(t, nil)
	holder := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	l := mustLock(t, NewMutex(holder, name))
	want := []string{l.Key()}
	for _, tc := range []struct {
		name    string
		acquire func(s *Session) error
		wantErr error
	}{
		{"ctx ran out while waiting", func(s *Session) error {
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := NewMutex(s, name).Lock(short)
			return err
		}, context.DeadlineExceeded},
		{"kind mismatch", func(s *Session) error {
			_, err := NewSemaphore(s, name, 3).Acquire(ctx)
			return err
		}, ErrKindMismatch},
		{"election behind a mutex", func(s *Session) error {
			_, err := NewElection(s, name).Campaign(ctx, "v")
			return err
		}, ErrKindMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSession(t, cli)
			if err := tc.acquire(s); !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if got := keysUnder(t, cli, name); !slices.Equal(got, want) {
				t.Fatalf("keys right after the failed call: %v, want %v", got, want)
			}
		})
	}
}

// TestAdoptedGrantTouches: a semaphore waiter whose enqueue answer was lost
// adopts its key and may be granted at its first look; it must touch its key
// like any waiter granted after waiting, or the waiter behind it (which
// watches it for that) never learns it became the front.
func TestAdoptedGrantTouches(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 60*time.Second)
	sem := func() *Semaphore { return NewSemaphore(openSession(t, cli), name, 2) }
	sB, sC := openSession(t, cli), openSession(t, cli)
	a1, err := sem().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := sem().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var bFirst atomic.Bool // B's first enqueue is still to come
	bFirst.Store(true)
	var bHeld atomic.Bool            // B's answer is held back
	lost := make(chan struct{})      // B's first enqueue was applied
	retry := make(chan struct{})     // B may go on (and retry)
	cWaits := make(chan struct{}, 1) // a watch opened while B is held back
	hook := func(p hookPoint, err error) error {
		switch {
		case p == hookEnqueued && bFirst.CompareAndSwap(true, false):
			bHeld.Store(true)
			close(lost)
			<-retry
			bHeld.Store(false)
			return context.DeadlineExceeded // applied, its answer lost
		case p == hookWaiting && bHeld.Load():
			select {
			case cWaits <- struct{}{}:
			default:
			}
		}
		return err
	}
	setHook(t, hook, sB, sC)
	bDone := make(chan error, 1)
	var b *Lock
	go func() {
		var err error
		b, err = NewSemaphore(sB, name, 2).Acquire(ctx)
		bDone <- err
	}()
	<-lost
	cDone := make(chan error, 1)
	go func() {
		_, err := NewSemaphore(sC, name, 2).Acquire(ctx) // behind a2, a1 and B's key: watches B
		cDone <- err
	}()
	select {
	case <-cWaits:
	case <-ctx.Done():
		t.Fatal("C never waited")
	}
	if err := a1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(retry)
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
	// Only a2 and B hold: releasing a2 leaves a slot for C while B holds.
	if err := a2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cDone:
		if err != nil {
			t.Fatalf("C: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("C not granted though a slot is free (B never touched its adopted key)")
	}
	_ = b.Unlock(ctx)
}

// TestTryAcquireIgnoresTouches: TryAcquire's write is guarded by "no key
// created since the read"; a waiter's touch (a rewrite of an existing key)
// must not make it report ErrLocked while there is room.
func TestTryAcquireIgnoresTouches(t *testing.T) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 60*time.Second)
	holder, err := NewSemaphore(openSession(t, cli), name, 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	touched := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				touched <- nil
				return
			default:
			}
			if _, err := cli.Txn(ctx).
				If(holder.Guard()).
				Then(clientv3.OpPut(holder.Key(), "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
				Commit(); err != nil {
				touched <- err
				return
			}
		}
	}()
	sem := NewSemaphore(openSession(t, cli), name, 3)
	for i := range 30 {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			close(stop)
			<-touched
			t.Fatalf("TryAcquire %d with 1 of 3 held and touches going on: %v", i, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-touched; err != nil {
		t.Fatal(err)
	}
}

// TestResumeFrom: a watch resumes after the last event it delivered, not
// after a catch-up batch's header revision (the store's current revision).
func TestResumeFrom(t *testing.T) {
	t.Parallel()
	ev := func(rev int64) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{ModRevision: rev}}
	}
	for _, tc := range []struct {
		name   string
		next   int64
		header int64
		events []*clientv3.Event
		want   int64
	}{
		{"catch-up batch", 10, 5000, []*clientv3.Event{ev(11), ev(1010)}, 1011},
		{"progress", 10, 50, nil, 51},
		{"old header", 100, 50, nil, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: tc.header}, Events: tc.events}
			if got := resumeFrom(tc.next, resp); got != tc.want {
				t.Fatalf("resumeFrom(%d, header %d) = %d, want %d", tc.next, tc.header, got, tc.want)
			}
		})
	}
}

// TestCheckKind: every key read ahead counts, whatever its place.
func TestCheckKind(t *testing.T) {
	t.Parallel()
	dir := namePrefix("x")
	kv := func(tag string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(dir + tag + "/1-0")} }
	for _, tc := range []struct {
		name  string
		tag   string
		ahead []*mvccpb.KeyValue
		ok    bool
	}{
		{"empty", "s5", nil, true},
		{"same size", "s5", []*mvccpb.KeyValue{kv("s5"), kv("s5")}, true},
		{"mutex behind a stray", "s5", []*mvccpb.KeyValue{kv("s5"), kv("m")}, false},
		{"other size far back", "s5", []*mvccpb.KeyValue{kv("s5"), kv("s5"), kv("s1")}, false},
		{"readers and writers", "r", []*mvccpb.KeyValue{kv("w"), kv("r")}, true},
		{"election behind a mutex", "e", []*mvccpb.KeyValue{kv("m")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := queue{dir: dir, tag: tc.tag}.checkKind(tc.ahead)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrKindMismatch)) {
				t.Fatalf("checkKind = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestProclaimRefusesLateCopy: Proclaim is guarded by the leader key's last
// write of this process, so a late copy of an earlier Proclaim (of unknown
// outcome) can never overwrite a later value; after such an outcome the next
// Proclaim still succeeds.
func TestProclaimRefusesLateCopy(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	e := NewElection(s, name)
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Proclaim(canceled, "lost"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Proclaim on a canceled ctx: %v", err)
	}
	if err := l.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	// A copy of the first Proclaim (sent when the key was as Campaign left
	// it), delivered now.
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", int64(l.Token())),
			clientv3.Compare(clientv3.ModRevision(l.Key()), "=", int64(l.Token()))).
		Then(clientv3.OpPut(l.Key(), s.value("stale"), clientv3.WithLease(s.Lease()))).
		Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatal("a late copy of an earlier Proclaim overwrote the leader's value")
	}
	info, err := e.Leader(ctx)
	if err != nil || info.Value != "v2" {
		t.Fatalf("Leader = %+v, %v; want v2", info, err)
	}
	if err := l.Proclaim(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
}

// TestBarrierKeyLayout: a barrier lives outside every queue (no queue read,
// List or Describe sees it) and inside the name's namespace prefix.
func TestBarrierKeyLayout(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "jobs/a", "100%/x", "x%!"} {
		key := barrierKey(namePrefix(name), 0x2b38)
		bp, err := BarrierPrefix(name)
		if err != nil {
			t.Fatal(err)
		}
		if key != bp+"2b38" {
			t.Errorf("barrierKey(%q) = %q, not under BarrierPrefix %q", name, key, bp)
		}
		if _, ok := parseKey(key); ok {
			t.Errorf("barrier %q parses as a queue key", key)
		}
		if !strings.HasPrefix(key, NamespacePrefix(name)) {
			t.Errorf("barrier %q outside NamespacePrefix(%q)", key, name)
		}
		for _, other := range []string{name, name + "%", name + "!", "a", "jobs"} {
			if strings.HasPrefix(key, namePrefix(other)) {
				t.Errorf("barrier %q is inside the queue of %q", key, other)
			}
		}
	}
	if _, err := BarrierPrefix(""); !errors.Is(err, ErrInvalidName) {
		t.Errorf("BarrierPrefix(\"\") = %v", err)
	}
}

// TestTryRLockAdoptsItsKey: a TryRLock whose answer was lost (applied) is
// sent again; the retry must not write over its own key (a reader's compares
// hold with its own key there), or the grant's token, Guard and Unlock would
// name a create revision the key does not have.
func TestTryRLockAdoptsItsKey(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	var n atomic.Int32
	hook := func(p hookPoint, err error) error {
		if p == hookEnqueued && err == nil && n.Add(1) == 1 {
			return context.DeadlineExceeded // applied, its answer lost
		}
		return err
	}
	setHook(t, hook, s)
	l, err := NewRWMutex(s, name).TryRLock(ctx)
	clearHook(s)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, l.Key())
	if err != nil {
		t.Fatal(err)
	}
	g, err := cli.Txn(ctx).If(l.Guard()).Commit()
	if err != nil {
		t.Fatal(err)
	}
	uerr := l.Unlock(ctx)
	if len(resp.Kvs) != 1 || int64(l.Token()) != resp.Kvs[0].CreateRevision || !g.Succeeded || uerr != nil {
		t.Fatalf("token %d, key %v; Guard holds: %v; Unlock: %v", l.Token(), resp.Kvs, g.Succeeded, uerr)
	}
}
