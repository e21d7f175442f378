package etcdlock

import (
	"context"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// session returns the *Session a test passed as s: s itself, or the routed
// session inside a *shard.Session (testhook.ShardSession, set by package
// shard).
func session(s any) *Session {
	if ss, ok := s.(*Session); ok {
		return ss
	}
	if testhook.ShardSession != nil {
		if r, ok := testhook.ShardSession(s); ok {
			return r.(*Session)
		}
	}
	panic("testhook: not a session")
}

// init hands the internals that the tests in the tests module check to
// package testhook (see its doc). Nothing here runs unless a test calls it.
func init() {
	testhook.SetHook = func(s any, h testhook.Hook) {
		if h == nil {
			session(s).tune.hook.Store(nil)
			return
		}
		f := (func(hookPoint, error) error)(h)
		session(s).tune.hook.Store(&f)
	}
	testhook.SetMonitorDelay = func(s any, d time.Duration) { session(s).tune.monitorDelay.Store(int64(d)) }
	testhook.Expire = func(s any, cause error, reason string) { session(s).expire(cause, reason) }
	testhook.RunOutClock = func(s any) {
		ss := session(s)
		ss.mu.Lock()
		past := time.Now().Add(-time.Millisecond)
		ss.validMono, ss.validWall = past, past.Round(0)
		ss.mu.Unlock()
	}
	testhook.ReaperIdle = func(s any) bool { return session(s).book.reaper.idle() }
	testhook.SessionOf = func(g any) any {
		switch g := g.(type) {
		case *Lock:
			return g.w.q.s
		case *Leadership:
			return g.g.w.q.s
		}
		panic("testhook.SessionOf: not a grant")
	}
	initKeyHooks()
	initPathHooks()
	initKeeperHooks()
}

func initKeyHooks() {
	testhook.KeyRoot, testhook.ListPage = keyRoot, listPage
	testhook.TagMutex, testhook.TagElection = tagMutex, tagElection
	testhook.NamePrefix, testhook.EscapeName, testhook.ListPrefix = namePrefix, layout.EscapeName, listPrefix
	testhook.WaiterKey, testhook.BarrierKey, testhook.OnceKey = waiterKey, barrierKey, completionKey
	testhook.IsQueueKey = func(key string) bool { _, ok := layout.ParseKey(key); return ok }
	testhook.EncodeValue = func(identity, value string, at, granted time.Time) string {
		return encodeValue(identity, value, at, granted, 0, 0)
	}
	testhook.DecodeValue = func(b []byte) string { return decodeValue(b).Value }
	testhook.BarrierGuard = func(s any, dir string) clientv3.Cmp {
		cmp, _, _ := session(s).book.barrierGuard(dir)
		return cmp
	}
	testhook.RaiseBarrier = func(ctx context.Context, s any, dir string) error { return session(s).book.raiseBarrier(ctx, dir) }
	testhook.BarrierRev = func(s any, dir string) int64 { return session(s).book.barrierRev(dir) }
}

func initPathHooks() {
	testhook.AttemptTimeout, testhook.RevokeAttempt, testhook.ErrUnanswered = attemptTimeout, revokeAttempt, errUnanswered
	testhook.LentConn = func(s any) (lent, leader bool) {
		c := session(s).keeper.lent.Load().conn
		return c != nil, c != nil && c.at.leader
	}
	testhook.Lend = func(s any, cli *clientv3.Client, conn *grpc.ClientConn, addr string) func() {
		sc := &streamConn{conn: conn, at: endpoint{addr: addr}}
		sc.open(cli)
		session(s).keeper.lend(sc)
		return sc.retire
	}
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
	testhook.BeforeSend = func(s any, f func(dirs []string)) {
		b := session(s).keeper.batch
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
	testhook.Pending = func(s any) int {
		b := session(s).keeper.batch
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pending)
	}
	testhook.BatchLimits = func(s any) (int, int) {
		b := session(s).keeper.batch
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.maxOps, b.maxBytes
	}
}

// initKeeperHooks sets testhook.HoldKeeper.
func initKeeperHooks() {
	testhook.HoldKeeper = func(s any) func() {
		k := session(s).keeper
		h := make(chan struct{})
		k.held.Store(&h)
		var once sync.Once
		return func() {
			once.Do(func() {
				k.held.CompareAndSwap(&h, nil)
				close(h)
			})
		}
	}
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
