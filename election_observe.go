package etcdlock

// This file holds Election.Observe: one read, then one watch of the
// election's queue, re-opened after every failure.

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/wire"
)

// Observe returns a channel that receives the current leader at once and
// then every change: a new leader, a proclaimed value, and the zero
// LeaderInfo when nobody leads. The channel holds only the newest value (a
// slow reader skips intermediate states but always gets the latest) and never
// delivers the same value twice in a row. Observe's goroutine re-reads and
// re-watches across compactions, etcd elections and reconnects, logging the
// errors; it closes the channel when ctx ends (at once for an invalid name or
// a nil session) or when the session's client is closed.
//
// For an election of a shard.Session it follows the cluster the map gives the name's
// slot, and moves with the slot:
//
//   - while the slot is settled there (active, no move recorded), as above;
//   - while a move of it is recorded, or its stamp there is not active, it
//     still sends the source's leaders and values, but not the zero
//     LeaderInfo: nobody leading there may only mean the leader is
//     elsewhere or about to be, so it sends nothing then;
//   - when the map or the moves change (the move ends, say), it reads
//     the leader where the map then says, and goes on there.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	ch := make(chan LeaderInfo, 1)
	q, err := e.queue("observe")
	if err != nil {
		close(ch)
		return ch
	}
	go q.observe(ctx, ch)
	return ch
}

// latest is a one-slot channel writer that keeps only the newest value and
// never delivers the same value twice in a row.
type latest struct {
	ch          chan LeaderInfo
	sent, taken LeaderInfo
	started     bool
}

func (l *latest) publish(v LeaderInfo) {
	select {
	case <-l.ch: // l.sent was not taken: replace it
	default:
		l.taken = l.sent // the reader has it (or nothing was sent yet)
	}
	if l.started && v == l.taken {
		return
	}
	l.started = true
	l.ch <- v
	l.sent = v
}

// observe publishes the leader of q on ch until ctx ends or the client is
// closed; then it closes ch.
func (q queue) observe(ctx context.Context, ch chan LeaderInfo) {
	defer close(ch)
	out := latest{ch: ch}
	log := q.s.log.With(zap.String("election", q.name))
	b := wire.NewBackoff(watchFloor, watchCeil)
	caller := q.s
	for ctx.Err() == nil && caller.cli.Ctx().Err() == nil {
		err := q.observeOnce(ctx, caller, &out, b)
		if ctx.Err() != nil {
			return
		}
		log.Debug("observe: retrying", zap.Error(err))
		if !b.Wait(ctx) {
			return
		}
	}
}

// observeOnce reads and follows the leader on the session that holds q's
// name (caller's, or its cluster's on a routed session) until the follow
// fails, or the slot map changes (then the name may live elsewhere).
func (q queue) observeOnce(ctx context.Context, caller *Session, out *latest, b *wire.Backoff) error {
	s, changed, err := caller.routeRead(ctx, q.name)
	if err != nil {
		return err
	}
	q.s = s
	if changed != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() {
			cancel()
			<-done
		}()
		go func() {
			defer close(done)
			select {
			case <-changed:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	lr, err := q.observedLeader(ctx, 0)
	if err != nil {
		return err
	}
	q.report(out, lr)
	return q.follow(ctx, lr.info, lr.rev, out, b)
}

// report publishes the leader read, unless nobody leads and the slot is
// not settled on this cluster: nobody leading may then only mean that the
// leader is elsewhere, or about to be, so nothing is sent until it settles
// (observeOnce runs again when the map or the moves change).
func (q queue) report(out *latest, lr leaderRead) {
	if lr.info == (LeaderInfo{}) && !lr.settled {
		q.s.log.Debug("observe: nobody leads here but the slot is moving; waiting for it to settle",
			zap.String("election", q.name), zap.Int("slot", layout.SlotOf(q.name)), zap.Int64("revision", lr.rev))
		return
	}
	out.publish(lr.info)
}

// follow watches q from rev + 1 and publishes every change of the leader,
// which was cur at rev, until the watch fails or must move (see
// keyBook.watcher); it returns why.
func (q queue) follow(ctx context.Context, cur LeaderInfo, rev int64, out *latest, b *wire.Backoff) error {
	wt, moved := q.s.book.watcher(ctx, nil)
	wctx, stop := watchCtx(ctx, moved)
	defer stop()
	wch := wt.Watch(wctx, q.dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var resp clientv3.WatchResponse
		select {
		case <-moved:
			return errWatchMoved
		case r, ok := <-wch:
			if !ok {
				return errors.New("watch ended")
			}
			resp = r
		}
		if resp.Canceled || resp.Err() != nil || resp.CompactRevision != 0 {
			return errors.Join(errors.New("watch ended"), resp.Err()) // re-read and re-watch
		}
		b.Reset()
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			switch {
			case cur.Key == "" && ev.Type == mvccpb.PUT,
				key == cur.Key && ev.Type == mvccpb.DELETE:
				// A first candidate, or the leader left: read who leads now.
				lr, err := q.observedLeader(wctx, ev.Kv.ModRevision)
				if err != nil {
					return err
				}
				cur = lr.info
				q.report(out, lr)
			case key == cur.Key && ev.Type == mvccpb.PUT:
				cur = leaderInfo(ev.Kv) // proclaimed
				out.publish(cur)
			}
		}
	}
}

// observedLeader is leader for Observe: one attempt over the keeper's
// connection (keyBook.attempt), bounded by wire.AttemptTimeout; Observe retries.
// On the balanced connection a read may be sent down a path that
// black-holed (its connection stays READY), where it waits, unanswered, for
// as long as the path lasts; the keeper leaves such a path within seconds.
func (q queue) observedLeader(ctx context.Context, rev int64) (leaderRead, error) {
	actx, kv, done := q.s.book.attempt(ctx, false)
	defer done()
	return q.leader(actx, kv, rev)
}

// errWatchMoved ends a watch that must move to the keeper's next connection.
var errWatchMoved = sentinel("etcdlock: the watch moves to the keeper's next connection")
