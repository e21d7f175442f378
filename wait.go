package etcdlock

// This file holds a waiter's wait: decide, watch what the policy names, read
// the queue again when that changes, until the policy grants.

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// futureRevPause is the pause before each retry of a read at a revision the
// member that answered has not applied yet: it is a fraction of a millisecond
// behind the member whose watch reported the revision, and a retry goes over
// the client's balanced connection, usually to another member, so the first
// retry is immediate.
var futureRevPause = [...]time.Duration{0, 200 * time.Microsecond, time.Millisecond}

const futureRevRetries = len(futureRevPause)

// wait blocks until pol grants, ctx ends, or the key or session is lost.
// known says ahead holds the keys ahead as the enqueue Txn saw them; else
// they are read first, as of the key's creation (w.rev) as that Txn would
// have: a key ahead that went since then is then seen to go by the wait
// (its onCreated check), which weighs its lock-delay, as for any waiter
// behind it; read as of now, it would be missed and its delay skipped.
func (w *waiter) wait(ctx context.Context, pol policy, ahead []*mvccpb.KeyValue, known bool) error {
	if !known {
		var err error
		if ahead, err = w.read(ctx, w.rev, pol); err != nil {
			return err
		}
	}
	// A waiter behind an adopted key (!known) may wait for its grant's touch
	// as for a waiter's: it cannot tell them apart.
	touch := !known
	waited := false
	for {
		if err := w.q.checkKind(ahead); err != nil {
			return err
		}
		granted, plan := pol.decide(ahead)
		if granted {
			w.noteMissed(ahead)
			return w.granted(ctx, pol, touch || waited)
		}
		w.delay = heldOff{} // a key that went without passing a grant delays nothing
		w.watchDelays(plan, ahead)
		if !waited {
			waited = true
			defer w.waiting()()
		}
		var err error
		if ahead, err = w.await(ctx, pol, plan); err != nil {
			return err
		}
	}
}

// granted ends a wait the policy granted: nil, unless ctx or the grant ended
// first (no grant after the caller gave up) or the touch that wakes the
// waiter behind fails. A grant after a wait (waited; or of an adopted key,
// whose wait is unknown) records its moment in the key (see stamp): a
// semaphore's with the touch that wakes the waiter behind, others in the
// background.
func (w *waiter) granted(ctx context.Context, pol policy, waited bool) error {
	switch {
	case ctx.Err() != nil:
		return ctxErr(ctx, ctx.Err())
	case w.ctx.Err() != nil:
		return context.Cause(w.ctx)
	}
	if waited {
		if err := w.holdOff(ctx); err != nil {
			return err
		}
		w.grantedAt = time.Now()
		if !pol.touchOnGrant() {
			w.stamp()
		} else if err := w.touch(ctx); err != nil {
			return err
		}
	}
	return w.q.s.live()
}

// waiting marks the start of a wait that watches (for the Observer), and
// arranges the waiter's monitor. It returns what to run when the wait ends.
func (w *waiter) waiting() (stop func()) {
	kind, _ := kindOfTag(w.q.tag)
	w.q.s.observer().Waiting(kind, w.q.name, 1)
	// A waiter learns that its own key is gone (a break, a revoke) from its
	// monitor, a second watch. Most waits in a busy queue end sooner, and the
	// hand-off read guards every grant, so the monitor starts only for a wait
	// that lasts; it watches from the key's create revision + 1, so starting
	// late misses nothing.
	monitor := time.AfterFunc(time.Duration(w.q.s.tune.monitorDelay.Load()), w.startMonitor)
	return func() {
		monitor.Stop()
		w.q.s.observer().Waiting(kind, w.q.name, -1)
	}
}

// watchResult is how one watch of a waiter ended: the decision changed (then
// ahead holds the keys ahead), or the watch ended and is re-opened from
// revision from (0: afresh, with a created notification).
type watchResult struct {
	changed bool
	ahead   []*mvccpb.KeyValue
	from    int64
}

// await watches what plan names until the policy's decision changes, and
// returns the keys ahead at that point. A watch that fails, or must move to
// the keeper's next connection (see keyBook.watcher), is re-opened from the
// last revision seen + 1, so no failure costs the waiter its place.
func (w *waiter) await(ctx context.Context, pol policy, plan watchPlan) ([]*mvccpb.KeyValue, error) {
	var from int64 // 0: a fresh, synced watch with a created notification
	b := wire.NewBackoff(watchFloor, watchCeil)
	for {
		wt, moved := w.q.s.book.watcher(ctx, w.ctx.Done())
		wctx, stop := watchCtx(ctx, moved)
		key, opts := plan.watchOpts(w.q.dir, from)
		r, err := w.consume(ctx, wt.Watch(wctx, key, opts...), moved, pol, plan, from)
		stop()
		if err != nil || r.changed {
			return r.ahead, err
		}
		if r.from > from {
			b.Reset()
		}
		from = r.from
		if !b.WaitOr(ctx, w.ctx.Done(), nil) {
			return nil, w.ended(ctx)
		}
	}
}

// watchOpts returns the key and options of a watch of plan in queue dir,
// from revision from (0: a fresh watch with a created notification).
func (p watchPlan) watchOpts(dir string, from int64) (string, []clientv3.OpOption) {
	key := p.key
	var opts []clientv3.OpOption
	if p.set != nil {
		key = dir
		opts = append(opts, clientv3.WithPrefix())
	}
	if !p.puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	// A deleted key's value tells its lock-delay (lockdelay.go).
	opts = append(opts, clientv3.WithPrevKV())
	if from == 0 {
		return key, append(opts, clientv3.WithCreatedNotify())
	}
	return key, append(opts, clientv3.WithRev(from))
}

// consume reads one watch until the decision changes, the wait must end
// (error), or the watch ends or must move (moved is closed).
func (w *waiter) consume(ctx context.Context, wch clientv3.WatchChan, moved <-chan struct{}, pol policy, plan watchPlan, from int64) (watchResult, error) {
	next := from
	_ = w.q.s.runHook(hookWaiting, nil)
	for {
		var resp clientv3.WatchResponse
		ok := false
		select {
		case <-ctx.Done():
			return watchResult{}, ctxErr(ctx, ctx.Err())
		case <-w.ctx.Done():
			return watchResult{}, context.Cause(w.ctx)
		case <-moved:
			return watchResult{from: next}, nil
		case resp, ok = <-wch:
		}
		switch {
		case !ok:
			return watchResult{from: next}, nil
		case resp.CompactRevision != 0:
			// Events we needed may be gone: re-read, then watch afresh.
			return w.check(ctx, 0, pol, plan)
		case resp.Canceled || resp.Err() != nil:
			w.q.s.log.Debug("watch ended", zap.String("key", plan.key), zap.Error(resp.Err()))
			return watchResult{from: next}, nil
		case resp.Created:
			if r, err := w.onCreated(ctx, resp.Header.Revision, pol, plan); err != nil || r.changed {
				return r, err
			}
			next = resp.Header.Revision + 1
			continue
		}
		if r, err := w.onEvents(ctx, resp.Events, pol, plan); err != nil || r.changed {
			return r, err
		}
		next = resumeFrom(next, resp)
	}
}

// onCreated handles a watch's created notification at revision c: what we
// watch may have changed before the watch began, so check the queue at c. A
// start below my revision means the watch's member is behind my write; it
// will deliver every later event, so there is nothing to check yet. A start
// at the revision the plan was made at has nothing to check either (no write
// came between).
func (w *waiter) onCreated(ctx context.Context, c int64, pol policy, plan watchPlan) (watchResult, error) {
	if c >= w.rev && c != w.seen {
		if r, err := w.check(ctx, c, pol, plan); err != nil || r.changed {
			return r, err
		}
	}
	_ = w.q.s.runHook(hookWatchCreated, nil)
	return watchResult{}, nil
}

// onEvents checks the queue after each event that can change the decision.
func (w *waiter) onEvents(ctx context.Context, evs []*clientv3.Event, pol policy, plan watchPlan) (watchResult, error) {
	for _, ev := range evs {
		// Events up to my own key's creation were settled by my enqueue;
		// they may concern an earlier key of the same name.
		if ev.Kv.ModRevision <= w.rev || !plan.matters(string(ev.Kv.Key), ev.Type) {
			continue
		}
		w.noteDelete(ev)
		if r, err := w.check(ctx, ev.Kv.ModRevision, pol, plan); err != nil || r.changed {
			return r, err
		}
		w.delay = heldOff{} // it passed no grant
	}
	return watchResult{}, nil
}

// resumeFrom returns the revision a watch that delivered resp resumes from
// (see clientv3's watcher): after the last event it carried. A response's
// header revision is the store's, not the watch's: a catch-up batch (at most
// 1000 revisions of an unsynced watch) carries the current revision, so
// resuming past it would skip the events of the next batches. Only a response
// without events (a progress notification, sent when the watch is synced)
// vouches for its header revision.
func resumeFrom(next int64, resp clientv3.WatchResponse) int64 {
	rev := resp.Header.Revision
	if n := len(resp.Events); n > 0 {
		rev = resp.Events[n-1].Kv.ModRevision
	}
	return max(next, rev+1)
}

// check reads the queue at rev (0: now) and reports whether the decision
// differs from plan; unchanged, the watch goes on (or, after a compaction,
// is re-opened afresh).
func (w *waiter) check(ctx context.Context, rev int64, pol policy, plan watchPlan) (watchResult, error) {
	ahead, err := w.read(ctx, rev, pol)
	if err != nil {
		return watchResult{}, err
	}
	granted, next := pol.decide(ahead)
	if granted || !next.equal(plan) {
		return watchResult{changed: true, ahead: ahead}, nil
	}
	return watchResult{}, nil
}

// read returns the keys ahead of mine at rev (a serializable read, no
// consensus round trip) or, for rev 0, now (linearizable). "Future revision"
// is retried a few times, then the read falls back to linearizable, as does a
// compacted revision. When my key is not there the grant is lost; the error
// then says why (ErrSessionExpired or ErrLockLost).
func (w *waiter) read(ctx context.Context, rev int64, pol policy) ([]*mvccpb.KeyValue, error) {
	b := wire.NewBackoff(requestFloor, requestCeil)
	failed := false // an attempt failed: the next goes over the balanced connection
	for try := 0; ; try++ {
		resp, err := w.readAt(ctx, rev, pol, failed)
		if err == nil {
			if len(resp.Kvs) == 0 || string(resp.Kvs[0].Key) != w.key {
				return nil, w.lost()
			}
			w.seen = rev
			if rev == 0 {
				w.seen = resp.Header.Revision
			}
			return resp.Kvs[1:], nil
		}
		if err := w.ended(ctx); err != nil {
			return nil, err
		}
		failed = true
		if wire.Classify(err) == wire.Refused {
			return nil, err
		}
		if rev > 0 && (errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrCompacted)) {
			if errors.Is(err, rpctypes.ErrFutureRev) && try < futureRevRetries {
				// The member that answered is a moment behind the one whose
				// watch reported rev: it catches up within a millisecond or so.
				if !sleepCtx(ctx, futureRevPause[try]) {
					return nil, ctxErr(ctx, ctx.Err())
				}
				continue
			}
			rev = 0 // read now instead
			continue
		}
		w.q.s.log.Debug("queue read failed, retrying", zap.String("key", w.key), zap.Error(err))
		if !b.Wait(ctx) {
			return nil, ctxErr(ctx, ctx.Err())
		}
	}
}

// ended returns ctx's error once ctx ended, else the grant's cause once the
// waiter's context ended; nil while both go on.
func (w *waiter) ended(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctxErr(ctx, ctx.Err())
	}
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	return nil
}

// readAt sends one attempt of read: my key and the keys ahead of it, at rev.
func (w *waiter) readAt(ctx context.Context, rev int64, pol policy, retry bool) (*clientv3.GetResponse, error) {
	limit := pol.lookback()
	if limit > 0 {
		limit++ // my own key comes first
	}
	// With values: a key's lock-delay (watchDelays).
	opts := []clientv3.OpOption{clientv3.WithPrefix(),
		clientv3.WithMaxCreateRev(w.rev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(limit)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev), clientv3.WithSerializable())
	}
	if err := w.q.s.runHook(hookHandoffRead, nil); err != nil {
		return nil, err
	}
	actx, kv, done := w.q.s.book.attempt(ctx, retry)
	defer done()
	if len(w.watched) == 0 {
		return kv.Get(actx, w.q.dir, opts...)
	}
	// A wait that watched keys reads their pass records at the same
	// revision, in case one went unseen (noteMissed).
	recOpts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		recOpts = append(recOpts, clientv3.WithRev(rev), clientv3.WithSerializable())
	}
	resp, err := kv.Txn(actx).Then(clientv3.OpGet(w.q.dir, opts...), clientv3.OpGet(passPrefix(w.q.dir), recOpts...)).Commit()
	if err != nil {
		return nil, err
	}
	w.records = resp.Responses[1].GetResponseRange().Kvs
	got := (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
	got.Header = resp.Header // the Txn's: the revision a read of now was at
	return got, nil
}
