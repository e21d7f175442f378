package etcdlock

import (
	"context"
	"time"

	"github.com/etcdlock/etcdlock/internal/testhook"
	"github.com/etcdlock/etcdlock/internal/wire"
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

func (k *sessionKnobs) LentConn() (lent, leader bool) { return k.keeper.LentConn() }

func (k *sessionKnobs) Lend(cli *clientv3.Client, conn *grpc.ClientConn, addr string) func() {
	return k.keeper.LendConn(cli, conn, addr)
}

func (k *sessionKnobs) BeforeSend(f func(dirs []string)) { k.keeper.Batcher().SetBeforeSend(f) }
func (k *sessionKnobs) Pending() int                     { return k.keeper.Batcher().Pending() }
func (k *sessionKnobs) BatchLimits() (int, int)          { return k.keeper.Batcher().Limits() }

// HoldKeeper holds the keeper before it next connects (wire.Keeper.Hold).
func (k *sessionKnobs) HoldKeeper() func() { return k.keeper.Hold() }

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
	testhook.AttemptTimeout, testhook.RevokeAttempt, testhook.ErrUnanswered = wire.AttemptTimeout, revokeAttempt, wire.ErrUnanswered
	testhook.StreamConn = wire.TestConn
	testhook.GrantLease = func(ctx context.Context, cli *clientv3.Client, secs int64) (clientv3.LeaseID, time.Duration, error) {
		g, err := grantLease(ctx, cli, secs)
		return g.id, g.ttl, err
	}
	testhook.BatchBytes = wire.BatchBytes
}
