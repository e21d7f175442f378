package etcdlock

import (
	"context"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// testHandle gives the tests in the tests module a session's knobs
// (package testhook): Session embeds it under this unexported name, so it
// adds nothing to the public API.
type testHandle = testhook.Handle

// sessionKnobs is a Session as the tests' hooks see it: its methods
// implement testhook.Knobs. Nothing here runs unless a test calls it.
type sessionKnobs Session

// newTestHandle returns s's handle.
func newTestHandle(s *Session) testHandle { return testhook.NewHandle((*sessionKnobs)(s)) }

func (k *sessionKnobs) s() *Session { return (*Session)(k) }

func (k *sessionKnobs) SetHook(h testhook.Hook) {
	if h == nil {
		k.tune.hook.Store(nil)
		return
	}
	f := (func(hookPoint, error) error)(h)
	k.tune.hook.Store(&f)
}

func (k *sessionKnobs) SetMonitorDelay(d time.Duration)   { k.tune.monitorDelay.Store(int64(d)) }
func (k *sessionKnobs) Expire(cause error, reason string) { k.s().expire(cause, reason) }

func (k *sessionKnobs) RunOutClock() {
	k.mu.Lock()
	past := time.Now().Add(-time.Millisecond)
	k.validMono, k.validWall = past, past.Round(0)
	k.mu.Unlock()
}

func (k *sessionKnobs) ReaperIdle() bool { return k.book.reaper.idle() }

func (k *sessionKnobs) BarrierGuard(dir string) clientv3.Cmp {
	cmp, _, _ := k.book.barrierGuard(dir)
	return cmp
}

func (k *sessionKnobs) RaiseBarrier(ctx context.Context, dir string) error {
	return k.book.raiseBarrier(ctx, dir)
}

func (k *sessionKnobs) BarrierRev(dir string) int64 { return k.book.barrierRev(dir) }

func (k *sessionKnobs) LentConn() (lent, leader bool) {
	c := k.keeper.lent.Load().conn
	return c != nil, c != nil && c.at.leader
}

func (k *sessionKnobs) Lend(cli *clientv3.Client, conn *grpc.ClientConn, addr string) func() {
	sc := &streamConn{conn: conn, at: endpoint{addr: addr}}
	sc.open(cli)
	k.keeper.lend(sc)
	return sc.retire
}

func (k *sessionKnobs) BeforeSend(f func(dirs []string)) {
	b := k.keeper.batch
	if f == nil {
		b.beforeSend.Store(nil)
		return
	}
	hook := func(batch []*batchCall) {
		dirs := make([]string, len(batch))
		for i, c := range batch {
			dirs[i] = c.op.dir
		}
		f(dirs)
	}
	b.beforeSend.Store(&hook)
}

func (k *sessionKnobs) Pending() int {
	b := k.keeper.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

func (k *sessionKnobs) BatchLimits() (int, int) {
	b := k.keeper.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxOps, b.maxBytes
}

// HoldKeeper holds the keeper (see waitHeld).
func (k *sessionKnobs) HoldKeeper() func() {
	kp := k.keeper
	h := make(chan struct{})
	kp.held.Store(&h)
	var once sync.Once
	return func() {
		once.Do(func() {
			kp.held.CompareAndSwap(&h, nil)
			close(h)
		})
	}
}

// init hands the internals that the tests in the tests module check, other
// than a session's knobs, to package testhook (see its doc).
func init() {
	testhook.SessionOf = func(ctx context.Context) (testhook.Session, bool) {
		if l, ok := LockFromContext(ctx); ok {
			return l.w.q.s, true
		}
		if l, ok := LeadershipFromContext(ctx); ok {
			return l.g.w.q.s, true
		}
		return nil, false
	}
	testhook.ListPage = listPage
	testhook.TagMutex, testhook.TagElection = tagMutex, tagElection
	testhook.WaiterKey, testhook.BarrierKey = waiterKey, barrierKey
	testhook.EncodeValue = func(identity, value string, at, granted time.Time) string {
		return encodeValue(identity, value, at, granted, 0, 0)
	}
	testhook.DecodeValue = func(b []byte) string { return decodeValue(b).Value }
	testhook.AttemptTimeout, testhook.RevokeAttempt, testhook.ErrUnanswered = attemptTimeout, revokeAttempt, errUnanswered
	testhook.StreamConn = func(cli *clientv3.Client, conn *grpc.ClientConn) (func() bool, func(), func(), clientv3.KV) {
		sc := &streamConn{conn: conn}
		sc.open(cli)
		return sc.borrow, sc.retire, sc.giveBack, sc.kv
	}
	testhook.GrantLease = func(ctx context.Context, cli *clientv3.Client, secs int64) (clientv3.LeaseID, time.Duration, error) {
		g, err := grantLease(ctx, cli, secs)
		return g.id, g.ttl, err
	}
	testhook.BatchBytes = batchBytes
}

// waitHeld waits, before the keeper connects, until a test's hold (set by
// testhook.HoldKeeper; never otherwise) is released; false if the keeper
// ended first.
func (k *keeper) waitHeld() bool {
	h := k.held.Load()
	if h == nil {
		return true
	}
	select {
	case <-*h:
		return true
	case <-k.ctx.Done():
		return false
	}
}
