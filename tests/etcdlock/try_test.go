package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAdoptedGrantTouches: a semaphore waiter whose enqueue answer was lost
// adopts its key and may be granted at its first look; it must touch its key
// like any waiter granted after waiting, or the waiter behind it (which
// watches it for that) never learns it became the front.
func TestAdoptedGrantTouches(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 60*time.Second)
	sem := func() *etcdlock.Semaphore { return etcdlock.NewSemaphore(locktest.OpenSession(t, cli), name, 2) }
	sB, sC := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	a1, err := sem().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := sem().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := newLostEnqueue()
	lost, retry, cWaits := h.lost, h.retry, h.cWaits
	setHook(t, h.hook, sB, sC)
	bDone := make(chan error, 1)
	var b *etcdlock.Lock
	go func() {
		var err error
		b, err = etcdlock.NewSemaphore(sB, name, 2).Acquire(ctx)
		bDone <- err
	}()
	<-lost
	cDone := make(chan error, 1)
	go func() {
		_, err := etcdlock.NewSemaphore(sC, name, 2).Acquire(ctx) // behind a2, a1 and B's key: watches B
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

// lostEnqueue is TestAdoptedGrantTouches's test hook: B's first enqueue is
// applied, then held back until retry is closed, and its answer lost.
type lostEnqueue struct {
	bFirst atomic.Bool   // B's first enqueue is still to come
	bHeld  atomic.Bool   // B's answer is held back
	lost   chan struct{} // B's first enqueue was applied
	retry  chan struct{} // B may go on (and retry)
	cWaits chan struct{} // a watch opened while B is held back
}

func newLostEnqueue() *lostEnqueue {
	h := &lostEnqueue{lost: make(chan struct{}), retry: make(chan struct{}), cWaits: make(chan struct{}, 1)}
	h.bFirst.Store(true)
	return h
}

func (h *lostEnqueue) hook(p testhook.Point, err error) error {
	switch {
	case p == testhook.Enqueued && h.bFirst.CompareAndSwap(true, false):
		h.bHeld.Store(true)
		close(h.lost)
		<-h.retry
		h.bHeld.Store(false)
		return context.DeadlineExceeded // applied, its answer lost
	case p == testhook.Waiting && h.bHeld.Load():
		select {
		case h.cWaits <- struct{}{}:
		default:
		}
	}
	return err
}

// TestTryAcquireIgnoresTouches: TryAcquire's write is guarded by "no key
// created since the read"; a waiter's touch (a rewrite of an existing key)
// must not make it report ErrLocked while there is room.
func TestTryAcquireIgnoresTouches(t *testing.T) {
	cli := shared.TestClient(t)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 60*time.Second)
	holder, err := etcdlock.NewSemaphore(locktest.OpenSession(t, cli), name, 3).Acquire(ctx)
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
	sem := etcdlock.NewSemaphore(locktest.OpenSession(t, cli), name, 3)
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

// TestTryRLockAdoptsItsKey: a TryRLock whose answer was lost (applied) is
// sent again; the retry must not write over its own key (a reader's compares
// hold with its own key there), or the grant's token, Guard and Unlock would
// name a create revision the key does not have.
func TestTryRLockAdoptsItsKey(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	var n atomic.Int32
	hook := func(p testhook.Point, err error) error {
		if p == testhook.Enqueued && err == nil && n.Add(1) == 1 {
			return context.DeadlineExceeded // applied, its answer lost
		}
		return err
	}
	setHook(t, hook, s)
	l, err := etcdlock.NewRWMutex(s, name).TryRLock(ctx)
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
