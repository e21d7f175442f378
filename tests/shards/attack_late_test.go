package shards_test

// Attacks on the seam: every key-creating write of a shard.Session, held on a
// link while its slot moves and delivered late, creates no key on the source.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/testhook"
	"github.com/etcdlock/etcdlock/shard"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lateKind is one key-creating acquisition of a shard.Session: it acquires
// name (and, for LockAll, a second name of the same shard key) and returns
// the token of name's grant and its release.
type lateKind struct {
	name string
	// try: its Txn has no BeforeEnqueue point: the link is held before
	// it starts. readFirst: it reads before it writes, and the read is
	// retried while held: the write is sent only after the link is
	// restored, with the stamp it knew before the move.
	try, readFirst bool
	acquire        func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error)
}

var runID atomic.Int64

func lateKinds() []lateKind {
	lock := func(ctx context.Context) func(l *etcdlock.Lock, err error) (etcdlock.Token, func() error, error) {
		return func(l *etcdlock.Lock, err error) (etcdlock.Token, func() error, error) {
			if err != nil {
				return 0, nil, err
			}
			return l.Token(), func() error { return l.Unlock(ctx) }, nil
		}
	}
	all := func(try bool) func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
		return func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			f := s.LockAll
			if try {
				f = s.TryLockAll
			}
			ls, err := f(ctx, n, shard.KeyOf(n)+"/other")
			if err != nil {
				return 0, nil, err
			}
			return ls.Lock(n).Token(), func() error { return ls.Unlock(ctx) }, nil
		}
	}
	return []lateKind{
		{"Mutex.TryLock", true, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			return lock(ctx)(s.NewMutex(n).TryLock(ctx))
		}},
		{"RWMutex.RLock", false, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			return lock(ctx)(s.NewRWMutex(n).RLock(ctx))
		}},
		{"RWMutex.TryRLock", true, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			return lock(ctx)(s.NewRWMutex(n).TryRLock(ctx))
		}},
		{"RWMutex.TryLock", true, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			return lock(ctx)(s.NewRWMutex(n).TryLock(ctx))
		}},
		{"Semaphore.Acquire", false, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			return lock(ctx)(s.NewSemaphore(n, 2).Acquire(ctx))
		}},
		{"Semaphore.TryAcquire", true, true, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			return lock(ctx)(s.NewSemaphore(n, 2).TryAcquire(ctx))
		}},
		{"Election.Campaign", false, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			l, err := s.NewElection(n).Campaign(ctx, "v")
			if err != nil {
				return 0, nil, err
			}
			return l.Token(), func() error { return l.Resign(ctx) }, nil
		}},
		{"LockAll", false, false, all(false)},
		{"TryLockAll", false, false, all(true)},
		{"Mutex.RunOnce", false, false, func(ctx context.Context, s *shard.Session, n string) (etcdlock.Token, func() error, error) {
			var tok etcdlock.Token
			err := s.NewMutex(n).RunOnce(ctx, fmt.Sprint(runID.Add(1)), func(_ context.Context, l *etcdlock.Lock) error {
				tok = l.Token()
				return nil
			})
			return tok, func() error { return nil }, err
		}},
	}
}

// TestAttackLateWriteEveryKind is TestMoveRefusesLateEnqueue for every
// other key-creating acquisition of a shard.Session: its write to the
// source is held on the link while the slot moves to c1, and delivered
// after the move. No queue key may be created on the source after the
// move, and the acquisition (if it succeeds) is granted on the target with
// a token above the one before the move.
func TestAttackLateWriteEveryKind(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	for _, k := range lateKinds() {
		t.Run(k.name, func(t *testing.T) { checkLateWrite(t, d, k) })
	}
}

func checkLateWrite(t *testing.T, d *deployment, k lateKind) {
	ctx := embedtest.Context(t, 2*time.Minute)
	r, link := d.flakyShards(t)
	s := session(t, r, etcdlock.WithTTL(15*time.Second))
	name := d.nameOn(t, "c0")
	// Once, to know the cluster session, the stamp and the barriers.
	tok0, release, err := k.acquire(ctx, s, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	member := d.clusters[0].Members()[0]
	held, before := holdWrite(s, link, member, k)
	res := make(chan lateResult, 1)
	go func() {
		tok, rel, err := k.acquire(ctx, s, name)
		res <- lateResult{tok, rel, err}
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the held write never timed out")
	}
	d.move(t, name, "c1", shard.MoveOptions{}, r)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := d.clients["c0"].Watch(wctx, layout.KeyRoot, clientv3.WithPrefix(), clientv3.WithRev(currentRev(t, d.clients["c0"])+1))
	link.Restore()
	waitFor(t, 10*time.Second, "the held Txn to reach the source", func() bool {
		return member.Calls("/etcdserverpb.KV/Txn") > *before
	})
	waitAnswered(t, member, "/etcdserverpb.KV/Txn")
	var g lateResult
	select {
	case g = <-res:
	case <-time.After(60 * time.Second):
		t.Fatal("the acquisition never returned")
	}
	if g.err != nil {
		t.Logf("%s after the late write: %v", k.name, g.err)
	} else {
		if g.tok <= tok0 || g.tok.Generation() != d.stamp(t, "c1", name).Gen {
			t.Errorf("granted token %v (gen %d) after %v; target generation %d", g.tok, g.tok.Generation(), tok0, d.stamp(t, "c1", name).Gen)
		}
		if keys := d.keysOf(t, "c1", name); len(keys) == 0 && k.name != "Mutex.RunOnce" { // RunOnce released already
			t.Errorf("granted, but no key on the target")
		}
	}
	checkNoSourceKey(t, d, wch, name)
	if g.err == nil {
		if err := g.release(); err != nil {
			t.Fatal(err)
		}
	}
}

// lateResult is a late acquisition's outcome.
type lateResult struct {
	tok     etcdlock.Token
	release func() error
	err     error
}

// holdWrite arranges for k's next key-creating write on s to be held on
// link: held closes once the held write timed out for the session, and
// *before is the member's Txn count when the hold began.
func holdWrite(s *shard.Session, link *embedtest.Link, member *embedtest.Member, k lateKind) (held chan struct{}, before *int64) {
	held, before = make(chan struct{}), new(int64)
	var once, holdOnce sync.Once
	hold := func() {
		holdOnce.Do(func() {
			*before = member.Calls("/etcdserverpb.KV/Txn")
			link.Hold()
		})
	}
	testhook.SetHook(s, func(p testhook.Point, err error) error {
		switch {
		case p == testhook.BeforeEnqueue: // hold the write itself, not the reads before it
			hold()
		case p == testhook.Enqueued && err != nil:
			once.Do(func() { close(held) })
		}
		return err
	})
	if k.try {
		hold()
	}
	if k.readFirst {
		once.Do(func() { time.AfterFunc(3*time.Second, func() { close(held) }) })
	}
	return held, before
}

// checkNoSourceKey fails t if a queue key of name was created on the
// source (c0) after the move, as wch saw it, or is there now. The caller
// waited until the source answered the held write (waitAnswered): a marker
// written now is applied after it, so once wch shows the marker it has
// shown whatever the held write created.
func checkNoSourceKey(t *testing.T, d *deployment, wch clientv3.WatchChan, name string) {
	t.Helper()
	ctx := embedtest.Context(t, 30*time.Second)
	// Beside the name's queue range, like its break marker: no queue key.
	marker := strings.TrimSuffix(layout.NamePrefix(name), layout.NameEnd) + "%!test-caught-up"
	if _, err := d.clients["c0"].Put(ctx, marker, ""); err != nil {
		t.Fatal(err)
	}
	for caught := false; !caught; {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("the source's watch ended: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				caught = caught || string(ev.Kv.Key) == marker
				if ev.Type == mvccpb.PUT && ev.IsCreate() && isQueueKey(string(ev.Kv.Key)) {
					t.Errorf("a queue key was created on the source after the move: %s at revision %d", ev.Kv.Key, ev.Kv.CreateRevision)
				}
			}
		case <-ctx.Done():
			t.Fatal("the source's watch never showed the marker")
		}
	}
	if _, err := d.clients["c0"].Delete(ctx, marker); err != nil {
		t.Fatal(err)
	}
	for _, key := range d.keysOf(t, "c0", name) {
		if isQueueKey(key) {
			t.Errorf("phantom key on the source: %v", key)
		}
	}
}

// waitAnswered waits until member has answered every request of method
// that has reached it by now (embedtest.Member.Answered).
func waitAnswered(t *testing.T, member *embedtest.Member, method string) {
	t.Helper()
	arrived := member.Calls(method)
	waitFor(t, 30*time.Second, "the source to answer "+method, func() bool { return member.Answered(method) >= arrived })
}

// isQueueKey reports whether key is a queue key (a waiter's or holder's).
func isQueueKey(key string) bool {
	_, ok := layout.ParseKey(key)
	return ok
}
