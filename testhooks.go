package etcdlock

import (
	"context"
	"time"

	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/wire"
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
	testhook.WaiterKey, testhook.BarrierKey, testhook.OnceKey = waiterKey, barrierKey, onceKey
	testhook.IsQueueKey = func(key string) bool { _, ok := parseKey(key); return ok }
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
	testhook.AttemptTimeout, testhook.RevokeAttempt, testhook.ErrUnanswered = wire.AttemptTimeout, revokeAttempt, wire.ErrUnanswered
	testhook.LentConn = func(s any) (lent, leader bool) { return session(s).keeper.LentConn() }
	testhook.Lend = func(s any, cli *clientv3.Client, conn *grpc.ClientConn, addr string) func() {
		return session(s).keeper.LendConn(cli, conn, addr)
	}
	testhook.StreamConn = wire.TestConn
	testhook.GrantLease = func(ctx context.Context, cli *clientv3.Client, secs int64) (clientv3.LeaseID, time.Duration, error) {
		g, err := grantLease(ctx, cli, secs)
		return g.id, g.ttl, err
	}
	testhook.BatchBytes = wire.BatchBytes
	testhook.BeforeSend = func(s any, f func(dirs []string)) { session(s).keeper.Batcher().SetBeforeSend(f) }
	testhook.Pending = func(s any) int { return session(s).keeper.Batcher().Pending() }
	testhook.BatchLimits = func(s any) (int, int) { return session(s).keeper.Batcher().Limits() }
}

// initKeeperHooks sets testhook.HoldKeeper.
func initKeeperHooks() {
	testhook.HoldKeeper = func(s any) func() { return session(s).keeper.Hold() }
}
