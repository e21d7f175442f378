package etcdlock

// This file holds the paths a session's requests take: every write of the
// queue goes through commit (one attempt at a time, through the client's
// batcher unless batching is off), every attempt's connection comes from
// attempt, and every watch's from watcher. Both follow the keeper's
// connection while it lends one (internal/wire's leaderconn.go), so a path
// that black-holes is left when the keeper leaves it.

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// commit sends op: on a first attempt through the client's batcher (when
// the session batches), else as a Txn of its own, over the leader's
// connection unless retry (see attempt).
func (b *keyBook) commit(ctx context.Context, retry bool, op wire.Txn) (*clientv3.TxnResponse, error) {
	s := b.s
	if b := s.keeper.Batcher(); b != nil && !retry {
		actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
		defer cancel()
		if resp, err := b.Do(actx, op, s.observer().Batched); !errors.Is(err, wire.ErrBatcherStopped) {
			return resp, err
		}
	}
	actx, kv, done := b.attempt(ctx, retry)
	defer done()
	resp, err := op.Send(actx, kv)
	s.observer().Batched(1)
	return resp, err
}

// attempt prepares one attempt of a request the queue retries: ctx bounded
// by wire.AttemptTimeout, the KV to send it on, and the func to call when
// the attempt is done. The KV is the keeper's connection while it lends one
// (Keeper.Borrow), else the client's balanced one; a retry (an earlier
// attempt failed) always uses the balanced one, since the keeper's
// connection may lead to a dead or unreachable member until the keeper
// notices.
func (b *keyBook) attempt(ctx context.Context, retry bool) (context.Context, clientv3.KV, func()) {
	s := b.s
	actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
	if !retry {
		if lc := s.keeper.Borrow(); lc != nil {
			return actx, lc.KV(), func() { lc.GiveBack(); cancel() }
		}
	}
	return actx, s.cli, cancel
}

// watcher returns the Watcher for the session's watches (a waiter's
// predecessor watch, a grant's monitor, Observe) and a channel that is closed
// when the watch must move: re-open it from the last revision seen + 1. With
// pinning, a watch opens only on the keeper's connection, the path its
// keepalives prove alive every renewal: when that path fails, the keeper
// moves and the watch moves with it (its connection is retired, which also
// ends the watch). While the keeper lends no connection (it is finding the
// next one, or no member answers and its stream runs on the balanced
// connection), watcher waits until it lends one, however long that takes: a
// watch on the client's balanced connection could stay on a path that
// silently drops packets for as long as the client's gRPC keepalive lets it
// (by default, forever), and waiting costs no event. If ctx ends or stop is
// closed first, it returns a Watcher that opens nothing (its watches end at
// once) and a nil channel; the caller sees its context ended. Without
// pinning, on a wrapped client, or once the session has ended (its keeper
// lends nothing more), it returns the client and a nil channel.
func (b *keyBook) watcher(ctx context.Context, stop <-chan struct{}) (clientv3.Watcher, <-chan struct{}) {
	s := b.s
	if !s.opts.pinning || !wire.PlainClient(s.cli) {
		return s.cli, nil
	}
	for s.ctx.Err() == nil {
		lc, moved := s.keeper.Lent()
		if lc != nil {
			return lc.Watcher(), moved
		}
		_ = s.runHook(hookConnWait, nil) // tests: the watch waits for the keeper
		select {
		case <-moved: // lent a connection, or none again: load it
		case <-s.ctx.Done():
		case <-ctx.Done():
			return noWatcher{}, nil
		case <-stop:
			return noWatcher{}, nil
		}
	}
	_ = s.runHook(hookSharedWatch, nil) // tests: on the balanced connection, ended
	return s.cli, nil
}

// noWatcher is the Watcher of a watch that must not open: its watches end
// at once, and nothing goes out on any connection.
type noWatcher struct{}

func (noWatcher) Watch(context.Context, string, ...clientv3.OpOption) clientv3.WatchChan {
	ch := make(chan clientv3.WatchResponse)
	close(ch)
	return ch
}

func (noWatcher) RequestProgress(ctx context.Context) error { return ctx.Err() }
func (noWatcher) Close() error                              { return nil }

// watchCtx returns a child of ctx for one watch opened on the watcher that
// keyBook.watcher returned with moved: it also ends when moved closes, so
// a watch stuck on a connection the keeper has left is cancelled, whether
// or not clientv3's Watch has returned (it blocks until the server
// confirms the watch, which a black-holed path never does), and the caller
// reopens it on the keeper's current connection. stop cancels it and waits
// for its goroutine.
func watchCtx(ctx context.Context, moved <-chan struct{}) (wctx context.Context, stop func()) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	if moved == nil {
		return wctx, cancel
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-moved:
			cancel()
		case <-wctx.Done():
		}
	}()
	return wctx, func() {
		cancel()
		<-done
	}
}
