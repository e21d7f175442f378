package etcdlock

// This file holds the revision-ordered waiter queue that every recipe is
// built on (DESIGN.md, "The queue"). Each acquisition puts one key under the
// lock's prefix, attached to the session's lease; its name is the session's
// lease and a slot number the session reuses only once the previous key of
// that name is certainly gone (newKey, gone). Its create revision is its place
// in line and its fencing token; events at or below it are ignored, so an old
// event of a reused name changes nothing. A waiter watches only the key(s)
// its policy names, so a release wakes one waiter.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// futureRevPause is the pause before each retry of a read at a revision the
// member that answered has not applied yet: it is a fraction of a millisecond
// behind the member whose watch reported the revision, and a retry goes over
// the client's balanced connection, usually to another member, so the first
// retry is immediate.
var futureRevPause = [...]time.Duration{0, 200 * time.Microsecond, time.Millisecond}

const (
	futureRevRetries = len(futureRevPause)
	lossLookup       = 3 * time.Second
	// attemptTimeout bounds one attempt of a request that the library
	// retries. A request caught in flight by an etcd leader crash otherwise
	// waits out etcd's own request timeout (5s + 2 election timeouts) before
	// failing; every retried request here is idempotent.
	attemptTimeout = 2 * time.Second
)

// waiterMonitorDelay is how long a waiter waits before it starts watching
// its own key (see wait). Tests change it.
var waiterMonitorDelay = 250 * time.Millisecond

// policy decides, from the keys created before mine (nearest first, at most
// lookback of them; 0 means all), whether I hold a grant, and if not what to
// watch until the decision may change.
type policy interface {
	lookback() int64
	decide(ahead []*mvccpb.KeyValue) (granted bool, plan watchPlan)
	// touchOnGrant says whether a waiter that was granted after waiting must
	// rewrite its key (same value) so that the waiter behind it, which watches
	// it, re-reads the queue (Semaphore: the next waiter becomes the front).
	touchOnGrant() bool
}

// watchPlan is what a waiter watches: one key ahead of it, or (set != nil)
// the queue's whole directory, of which only the keys in set matter.
type watchPlan struct {
	key  string
	set  map[string]bool
	puts bool // a PUT on key matters too (the key's grant, see touchOnGrant)
}

func watchKey(key string) watchPlan { return watchPlan{key: key} }

// matters reports whether an event on key of type t can change the decision.
func (p watchPlan) matters(key string, t mvccpb.Event_EventType) bool {
	if p.set != nil {
		return t == mvccpb.DELETE && p.set[key]
	}
	return key == p.key && (t == mvccpb.DELETE || p.puts)
}

func (p watchPlan) equal(o watchPlan) bool {
	if p.key != o.key || p.puts != o.puts || len(p.set) != len(o.set) || (p.set == nil) != (o.set == nil) {
		return false
	}
	for k := range p.set {
		if !o.set[k] {
			return false
		}
	}
	return true
}

// exclusive is the Mutex and Election policy: granted when nobody is ahead,
// else watch the nearest key ahead.
type exclusive struct{}

func (exclusive) lookback() int64    { return 1 }
func (exclusive) touchOnGrant() bool { return false }
func (exclusive) decide(ahead []*mvccpb.KeyValue) (bool, watchPlan) {
	if len(ahead) == 0 {
		return true, watchPlan{}
	}
	return false, watchKey(string(ahead[0].Key))
}

// hookPoint names a point of an acquisition where package-internal tests
// can interfere (cancel a context, fake an error).
type hookPoint int

const (
	hookBeforeEnqueue hookPoint = iota // before the enqueue Txn is sent
	hookEnqueued                       // the enqueue Txn returned; err is its error
	hookWaiting                        // a predecessor watch is open
	hookHandoffRead                    // before a read of the queue at a revision
	hookWatchCreated                   // a predecessor watch's created notification was handled
	hookMonitor                        // the own-key monitor starts
	hookReaped                         // the reaper's delete returned; err is its error
	numHookPoints
)

// testHook, when set, is called at each hookPoint with the error at that
// point and returns the error to go on with. Only tests set it.
var testHook atomic.Pointer[func(p hookPoint, err error) error]

func runHook(p hookPoint, err error) error {
	if h := testHook.Load(); h != nil {
		return (*h)(p, err)
	}
	return err
}

// queue is one name's queue for one kind of recipe.
type queue struct {
	s    *Session
	name string
	dir  string // namePrefix(name)
	tag  string
	verb string // for error messages: "lock", "campaign", ...
}

func newQueue(s *Session, name, tag, verb string) (queue, error) {
	if s == nil {
		return queue{}, fmt.Errorf("etcdlock: %s %q: %w: nil session", verb, name, ErrInvalidArgument)
	}
	if err := validateName(name); err != nil {
		return queue{}, fmt.Errorf("etcdlock: %s: %w", verb, err)
	}
	return queue{s: s, name: name, dir: namePrefix(name), tag: tag, verb: verb}, nil
}

func (q queue) errorf(err error) error {
	return fmt.Errorf("etcdlock: %s %q: %w", q.verb, q.name, err)
}

// waiter is one acquisition: its key, its place, and the context that ends
// when the grant is lost or released.
type waiter struct {
	q    queue
	sk   slotKey
	key  string
	rev  int64
	ctx  context.Context // child of the session's context
	lose context.CancelCauseFunc
	// seen is the revision at which the keys ahead were last learned (by
	// the enqueue Txn or a read); only the acquiring goroutine uses it.
	seen int64

	monitorOnce sync.Once
	freeOnce    sync.Once
}

// slotKey is an acquisition's key and the session slot it occupies.
type slotKey struct {
	key   string
	scope string
	slot  int
	// uncertain: a write of this key had an unknown outcome, so it may be
	// applied (again) later; the slot is reused only after a second delete.
	uncertain bool
}

// newKey takes a slot of the session in this queue and returns its key.
func (q queue) newKey() slotKey {
	scope := q.dir + q.tag
	slot := q.s.takeSlot(scope)
	return slotKey{key: waiterKey(q.dir, q.tag, q.s.lease, slot), scope: scope, slot: slot}
}

// gone is called once sk's key is known to be deleted (or never written) and
// the acquisition gives it up. The slot is freed at once if every write of
// the key had a known outcome; else the reaper first makes sure that none of
// them can still be applied (raiseBarrier), and deletes what they created.
func (q queue) gone(sk slotKey) {
	free := func() { q.s.freeSlot(sk.scope, sk.slot) }
	if sk.uncertain {
		q.s.reapUnknown(q.dir, sk.key, free)
		return
	}
	free()
}

// drop gives up a key that may exist, of unknown create revision: the
// reaper deletes it (see gone), then frees the slot.
func (q queue) drop(sk slotKey) {
	sk.uncertain = true
	q.gone(sk)
}

// free releases the waiter's slot once its key is gone.
func (w *waiter) free() { w.freeOnce.Do(func() { w.q.gone(w.sk) }) }

// acquire enqueues and waits until pol grants. On any failure the key is
// deleted at once, or by the session's reaper when the cluster does not answer.
func (q queue) acquire(ctx context.Context, value string, pol policy) (w *waiter, err error) {
	start := time.Now()
	defer func() { q.finishAcquire(start, w, err) }()
	if err := ctx.Err(); err != nil {
		return nil, q.errorf(ctxErr(ctx, err))
	}
	if err := q.s.live(); err != nil {
		return nil, q.errorf(err)
	}
	// Every call of the acquisition also ends when the session does, so a
	// client cut off from the cluster fails with ErrSessionExpired instead of
	// hanging until ctx ends.
	opCtx, done := q.s.bound(ctx)
	defer done()
	w, ahead, known, err := q.enqueue(opCtx, value, pol)
	if err != nil {
		return nil, q.errorf(q.s.cause(ctx, err))
	}
	if err := w.wait(opCtx, pol, ahead, known); err != nil {
		w.abandon(err)
		return nil, q.errorf(q.s.cause(ctx, err))
	}
	return w, nil
}

// asLock wraps the waiter of a successful acquisition in a Lock.
func asLock(w *waiter, err error) (*Lock, error) {
	if err != nil {
		return nil, err
	}
	return &Lock{w: w}, nil
}

func (q queue) newWaiter(sk slotKey, rev int64) *waiter {
	w := &waiter{q: q, sk: sk, key: sk.key, rev: rev}
	w.ctx, w.lose = context.WithCancelCause(q.s.ctx)
	return w
}

// enqueue puts a new key at the end of the queue in one Txn that also returns
// the keys ahead of it (the Get runs before the Put). The Txn writes only if
// the key is new and the session's barrier of this queue is where the session
// last saw it (barrier.go), so a late copy of it can never create a key the
// library gave up on. known is false when a retry found the key already
// written (unknown outcome of the first try): the keys ahead must then be read.
func (q queue) enqueue(ctx context.Context, value string, pol policy) (w *waiter, ahead []*mvccpb.KeyValue, known bool, err error) {
	sk := q.newKey()
	getOpts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
	if n := pol.lookback(); n > 0 {
		getOpts = append(getOpts, clientv3.WithLimit(n))
	}
	// explain: the Txn also reports, when its compare fails, the key and the
	// barrier. Only after an unknown outcome or a failed compare: every
	// member decodes and applies each byte of the Txn.
	explain := false
	txn := func(bcmp clientv3.Cmp) (*clientv3.TxnResponse, error) {
		actx, kv, done := q.s.attempt(ctx, sk.uncertain)
		defer done()
		t := kv.Txn(actx).
			If(clientv3.Compare(clientv3.CreateRevision(sk.key), "=", 0), bcmp).
			Then(clientv3.OpGet(q.dir, getOpts...),
				clientv3.OpPut(sk.key, q.s.value(value), clientv3.WithLease(q.s.lease)))
		if explain || sk.uncertain {
			t = t.Else(clientv3.OpGet(sk.key), clientv3.OpGet(barrierKey(q.dir, q.s.lease), clientv3.WithKeysOnly()))
		}
		return t.Commit()
	}
	backoff := 20 * time.Millisecond
	for {
		if err := runHook(hookBeforeEnqueue, nil); err != nil {
			q.gone(sk)
			return nil, nil, false, err
		}
		bcmp, sent := q.s.barrierCmp(q.dir)
		resp, err := txn(bcmp)
		err = runHook(hookEnqueued, err)
		if err == nil {
			if resp.Succeeded {
				w = q.newWaiter(sk, resp.Header.Revision)
				w.seen = w.rev
				return w, resp.Responses[0].GetResponseRange().Kvs, true, nil
			}
			if len(resp.Responses) == 0 {
				explain = true // sent without Else: ask again, with it
				continue
			}
			if mine := resp.Responses[0].GetResponseRange().Kvs; len(mine) > 0 {
				if sk.uncertain {
					// An earlier attempt of this acquisition was applied (the
					// slot's name is nobody else's).
					return q.newWaiter(sk, mine[0].CreateRevision), nil, false, nil
				}
				// Never expected: a key of this name that outlived its
				// acquisition. Leave it to the reaper and use another name.
				q.drop(sk)
				sk = q.newKey()
				continue
			}
			// The barrier moved (the reaper retired writes of the session):
			// this attempt wrote nothing; send it again with the new value.
			_, err = q.s.barrierMoved(ctx, q.dir, sent, resp.Responses[1].GetResponseRange().Kvs)
			if err == nil {
				continue
			}
		}
		if q.s.failed(err) != nil {
			q.gone(sk) // the lease is gone, and with it any key of it
			return nil, nil, false, ErrSessionExpired
		}
		if permanent(err) {
			q.gone(sk) // refused: this attempt wrote nothing
			return nil, nil, false, err
		}
		// The Txn may have been applied, now or later.
		sk.uncertain = true
		if ctx.Err() != nil {
			q.gone(sk)
			return nil, nil, false, ctxErr(ctx, err)
		}
		if serr := q.s.live(); serr != nil {
			q.gone(sk)
			return nil, nil, false, serr
		}
		q.s.log.Debug("enqueue failed, retrying", zap.String("key", sk.key), zap.Error(err))
		if !sleepCtx(ctx, jitter(backoff)) {
			q.gone(sk)
			return nil, nil, false, ctxErr(ctx, ctx.Err())
		}
		backoff = min(2*backoff, time.Second)
	}
}

// checkKind fails with ErrKindMismatch when a key ahead belongs to another
// kind of recipe (or a semaphore of another size). It checks every key the
// policy read, not only the nearest: a refused joiner's key may sit between
// a holder and me until it is removed. A policy grants only when its read
// saw the whole queue ahead of me, so no grant passes an incompatible key.
func (q queue) checkKind(ahead []*mvccpb.KeyValue) error {
	for _, kv := range ahead {
		if tag := tagOf(q.dir, string(kv.Key)); !tagsCompatible(tag, q.tag) {
			return kindMismatch(tag)
		}
	}
	return nil
}

func kindMismatch(tag string) error {
	kind, _ := kindOfTag(tag)
	if kind == kindSemaphore {
		return fmt.Errorf("%w: name is used by a semaphore of %s", ErrKindMismatch, tag[1:])
	}
	return fmt.Errorf("%w: name is used by a %s", ErrKindMismatch, kind)
}

// abandon gives up the acquisition: it ends the waiter's context and deletes
// its key (guarded by its create revision) before it returns, or through the
// session's reaper when the cluster does not answer in time.
func (w *waiter) abandon(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	w.lose(cause)
	w.q.s.removeNow(reapItem{key: w.key, rev: w.rev, done: w.free})
}

// wait blocks until pol grants, ctx ends, or the key or session is lost.
func (w *waiter) wait(ctx context.Context, pol policy, ahead []*mvccpb.KeyValue, known bool) error {
	if !known {
		var err error
		if ahead, err = w.read(ctx, 0, pol); err != nil {
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
			switch {
			case ctx.Err() != nil: // ended first: no grant after the caller gave up
				return ctxErr(ctx, ctx.Err())
			case w.ctx.Err() != nil:
				return context.Cause(w.ctx)
			}
			if (touch || waited) && pol.touchOnGrant() {
				if err := w.touch(ctx); err != nil {
					return err
				}
			}
			return w.q.s.live()
		}
		if !waited {
			waited = true
			kind, _ := kindOfTag(w.q.tag)
			w.q.s.observer().Waiting(kind, w.q.name, 1)
			defer w.q.s.observer().Waiting(kind, w.q.name, -1)
			// A waiter learns that its own key is gone (a break, a revoke)
			// from its monitor, a second watch. Most waits in a busy queue
			// end sooner, and the hand-off read guards every grant, so the
			// monitor starts only for a wait that lasts; it watches from the
			// key's create revision + 1, so starting late misses nothing.
			monitor := time.AfterFunc(waiterMonitorDelay, w.startMonitor)
			defer monitor.Stop()
		}
		var err error
		if ahead, err = w.await(ctx, pol, plan); err != nil {
			return err
		}
	}
}

// touch rewrites the waiter's key with its value (guarded by its create
// revision), retrying until ctx ends, so that a waiter watching it re-reads.
func (w *waiter) touch(ctx context.Context) error {
	backoff := 20 * time.Millisecond
	for retry := false; ; retry = true {
		actx, kv, done := w.q.s.attempt(ctx, retry)
		resp, err := kv.Txn(actx).
			If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev)).
			Then(clientv3.OpPut(w.key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
			Commit()
		done()
		switch {
		case err == nil && resp.Succeeded:
			return nil
		case err == nil:
			return w.lost()
		case w.q.s.failed(err) != nil:
			return ErrSessionExpired
		case permanent(err):
			return err
		}
		if !sleepCtx(ctx, jitter(backoff)) {
			return ctxErr(ctx, ctx.Err())
		}
		backoff = min(2*backoff, time.Second)
	}
}

// await watches what plan names until the policy's decision changes, and
// returns the keys ahead at that point. A watch that fails is re-opened from
// the last revision seen + 1, so no failure costs the waiter its place.
func (w *waiter) await(ctx context.Context, pol policy, plan watchPlan) ([]*mvccpb.KeyValue, error) {
	var from int64 // 0: a fresh, synced watch with a created notification
	backoff := 50 * time.Millisecond
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		key := plan.key
		var opts []clientv3.OpOption
		if plan.set != nil {
			key = w.q.dir
			opts = append(opts, clientv3.WithPrefix())
		}
		if !plan.puts {
			opts = append(opts, clientv3.WithFilterPut())
		}
		if from == 0 {
			opts = append(opts, clientv3.WithCreatedNotify())
		} else {
			opts = append(opts, clientv3.WithRev(from))
		}
		ahead, next, err := w.consume(ctx, w.q.s.watcher().Watch(wctx, key, opts...), pol, plan, from)
		cancel()
		if ahead != nil || err != nil {
			return ahead, err
		}
		if next > from {
			backoff = 50 * time.Millisecond
		}
		from = next
		select {
		case <-time.After(jitter(backoff)):
		case <-ctx.Done():
			return nil, ctxErr(ctx, ctx.Err())
		case <-w.ctx.Done():
			return nil, context.Cause(w.ctx)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// consume reads one watch. It returns the new keys ahead when the decision
// changed, an error when the wait must end, or neither with the revision to
// resume from (0: start fresh) when the watch ended.
func (w *waiter) consume(ctx context.Context, wch clientv3.WatchChan, pol policy, plan watchPlan, from int64) ([]*mvccpb.KeyValue, int64, error) {
	next := from
	_ = runHook(hookWaiting, nil)
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctxErr(ctx, ctx.Err())
		case <-w.ctx.Done():
			return nil, 0, context.Cause(w.ctx)
		case resp, ok := <-wch:
			if !ok {
				return nil, next, nil
			}
			if resp.CompactRevision != 0 {
				// Events we needed may be gone: re-read, then watch afresh.
				ahead, changed, err := w.check(ctx, 0, pol, plan)
				if err != nil || changed {
					return ahead, 0, err
				}
				return nil, 0, nil
			}
			if resp.Canceled || resp.Err() != nil {
				w.q.s.log.Debug("watch ended", zap.String("key", plan.key), zap.Error(resp.Err()))
				return nil, next, nil
			}
			if resp.Created {
				// What we watch may have changed before the watch began:
				// check the queue at the watch's start revision. A start below
				// my revision means the watch's member is behind my write; it
				// will deliver every later event, so there is nothing to check
				// yet. A start at the revision the plan was made at has
				// nothing to check either (no write came between).
				c := resp.Header.Revision
				next = c + 1
				if c >= w.rev && c != w.seen {
					ahead, changed, err := w.check(ctx, c, pol, plan)
					if err != nil || changed {
						return ahead, 0, err
					}
				}
				_ = runHook(hookWatchCreated, nil)
				continue
			}
			for _, ev := range resp.Events {
				// Events up to my own key's creation were settled by my
				// enqueue; they may concern an earlier key of the same name.
				if ev.Kv.ModRevision <= w.rev || !plan.matters(string(ev.Kv.Key), ev.Type) {
					continue
				}
				ahead, changed, err := w.check(ctx, ev.Kv.ModRevision, pol, plan)
				if err != nil || changed {
					return ahead, 0, err
				}
			}
			next = resumeFrom(next, resp)
		}
	}
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
// differs from plan.
func (w *waiter) check(ctx context.Context, rev int64, pol policy, plan watchPlan) ([]*mvccpb.KeyValue, bool, error) {
	ahead, err := w.read(ctx, rev, pol)
	if err != nil {
		return nil, false, err
	}
	granted, next := pol.decide(ahead)
	return ahead, granted || !next.equal(plan), nil
}

// read returns the keys ahead of mine at rev (a serializable read, no
// consensus round trip) or, for rev 0, now (linearizable). "Future revision"
// is retried a few times, then the read falls back to linearizable, as does a
// compacted revision. When my key is not there the grant is lost; the error
// then says why (ErrSessionExpired or ErrLockLost).
func (w *waiter) read(ctx context.Context, rev int64, pol policy) ([]*mvccpb.KeyValue, error) {
	limit := pol.lookback()
	if limit > 0 {
		limit++ // my own key comes first
	}
	backoff := 10 * time.Millisecond
	failed := false // an attempt failed: the next goes over the balanced connection
	for try := 0; ; try++ {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithMaxCreateRev(w.rev),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(limit)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev), clientv3.WithSerializable())
		}
		var resp *clientv3.GetResponse
		err := runHook(hookHandoffRead, nil)
		if err == nil {
			actx, kv, done := w.q.s.attempt(ctx, failed)
			resp, err = kv.Get(actx, w.q.dir, opts...)
			done()
		}
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
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, ctx.Err())
		}
		if w.ctx.Err() != nil {
			return nil, context.Cause(w.ctx)
		}
		failed = true
		switch {
		case permanent(err):
			return nil, err
		case rev > 0 && errors.Is(err, rpctypes.ErrFutureRev) && try < futureRevRetries:
			// The member that answered is a moment behind the one whose
			// watch reported rev: it catches up within a millisecond or so.
			if !sleepCtx(ctx, futureRevPause[try]) {
				return nil, ctxErr(ctx, ctx.Err())
			}
			continue
		case rev > 0 && (errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrCompacted)):
			rev = 0
			continue
		default:
			w.q.s.log.Debug("queue read failed, retrying", zap.String("key", w.key), zap.Error(err))
		}
		if !sleepCtx(ctx, jitter(backoff)) {
			return nil, ctxErr(ctx, ctx.Err())
		}
		backoff = min(2*backoff, time.Second)
	}
}

// lost finds out why the waiter's key is gone, ends its context with that
// cause and returns it: ErrSessionExpired when the lease is gone, else
// ErrLockLost. The key's name is free for reuse then.
func (w *waiter) lost() error {
	defer w.free()
	if w.ctx.Err() == nil {
		cause := ErrLockLost
		ctx, cancel := context.WithTimeout(w.q.s.ctx, lossLookup)
		gone, err := w.q.s.leaseGone(ctx)
		cancel()
		switch {
		case gone:
			cause = ErrSessionExpired
		case err != nil:
			w.q.s.log.Warn("cannot tell why a key is gone; reporting it as lost", zap.String("key", w.key), zap.Error(err))
		}
		w.lose(cause)
	}
	return context.Cause(w.ctx)
}

// startMonitor starts, once, the goroutine that watches the waiter's own key
// from its create revision + 1 (no gap) and ends the waiter's context when the
// key is deleted. It is owned by the session, which waits for it on Close.
func (w *waiter) startMonitor() {
	w.monitorOnce.Do(func() {
		_ = runHook(hookMonitor, nil)
		w.q.s.goRun(w.monitor)
	})
}

func (w *waiter) monitor() {
	next := w.rev + 1
	backoff := 50 * time.Millisecond
	for w.ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
		wch := w.q.s.cli.Watch(wctx, w.key, clientv3.WithRev(next), clientv3.WithFilterPut())
		gone := false
		for resp := range wch {
			if resp.CompactRevision != 0 {
				// Compacted past next: look at the key itself.
				gresp, err := w.q.s.cli.Get(wctx, w.key)
				if err != nil {
					break
				}
				if len(gresp.Kvs) == 0 || gresp.Kvs[0].CreateRevision != w.rev {
					gone = true
				} else {
					next = gresp.Header.Revision + 1
				}
				break
			}
			if resp.Canceled || resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					gone = true
				}
			}
			if gone {
				break
			}
			if resp.Header.Revision >= next {
				next = resp.Header.Revision + 1
				backoff = 50 * time.Millisecond
			}
		}
		cancel()
		if gone {
			_ = w.lost()
			return
		}
		if !sleepCtx(w.ctx, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// tryEnqueue writes a key only if the name has no key at all (one Txn; an
// empty range compares as a zero key). It returns ErrLocked, wrapped with the
// holder's key, when the name is taken, and writes nothing then.
func (q queue) tryEnqueue(ctx context.Context, value string) (*waiter, error) {
	return q.tryEnqueueIf(ctx, value, clientv3.Compare(clientv3.CreateRevision(q.dir), "=", 0).WithPrefix())
}

// tryEnqueueIf writes a key only if every cmp holds, in one Txn, and
// otherwise fails with ErrLocked (or ErrKindMismatch), writing nothing.
func (q queue) tryEnqueueIf(ctx context.Context, value string, cmps ...clientv3.Cmp) (w *waiter, err error) {
	start := time.Now()
	defer func() { q.finishAcquire(start, w, err) }()
	if err := ctx.Err(); err != nil {
		return nil, q.errorf(ctxErr(ctx, err))
	}
	if err := q.s.live(); err != nil {
		return nil, q.errorf(err)
	}
	opCtx, done := q.s.bound(ctx)
	defer done()
	w, first, err := q.tryPut(opCtx, value, cmps)
	switch {
	case err != nil:
		return nil, q.errorf(q.s.cause(ctx, err))
	case w == nil:
		return nil, q.errorf(refusal(q.dir, q.tag, first))
	}
	return q.grant(ctx, w)
}

// refusal is the error of a Try refused with first the queue's first key
// (nil: the queue was empty, or the compare that refused it says no more).
func refusal(dir, tag string, first *mvccpb.KeyValue) error {
	if first == nil {
		return ErrLocked
	}
	if ft := tagOf(dir, string(first.Key)); !tagsCompatible(ft, tag) {
		return kindMismatch(ft)
	}
	holder := decodeValue(first.Value)
	return fmt.Errorf("%w: held by %s (token %d)", ErrLocked, holderName(holder.Identity), first.CreateRevision)
}

// grant returns w unless ctx or the session ended first: no grant after the
// caller gave up. The key is removed then.
func (q queue) grant(ctx context.Context, w *waiter) (*waiter, error) {
	if err := ctx.Err(); err != nil {
		w.abandon(err)
		return nil, q.errorf(ctxErr(ctx, err))
	}
	if err := q.s.live(); err != nil {
		w.abandon(err)
		return nil, q.errorf(err)
	}
	return w, nil
}

// tryPut writes a new key of the session only if every cmp holds and the
// session's barrier is where it last saw it, in one Txn, retried while its
// outcome is unknown. It returns the new waiter; or, when a cmp failed and
// nothing of this call exists, no waiter and the queue's first key (nil when
// the queue is empty); or the error that ended it. Without a waiter, the
// slot is given up (gone: the reaper retires an uncertain earlier attempt).
func (q queue) tryPut(ctx context.Context, value string, cmps []clientv3.Cmp) (*waiter, *mvccpb.KeyValue, error) {
	sk := q.newKey()
	backoff := 20 * time.Millisecond
	for retry := false; ; retry = true {
		bcmp, sent := q.s.barrierCmp(q.dir)
		actx, kv, attemptDone := q.s.attempt(ctx, retry)
		resp, err := kv.Txn(actx).
			If(append(slices.Clip(cmps), clientv3.Compare(clientv3.CreateRevision(sk.key), "=", 0), bcmp)...).
			Then(clientv3.OpPut(sk.key, q.s.value(value), clientv3.WithLease(q.s.lease))).
			Else(clientv3.OpGet(q.dir, clientv3.WithFirstCreate()...), clientv3.OpGet(sk.key),
				clientv3.OpGet(barrierKey(q.dir, q.s.lease), clientv3.WithKeysOnly())).
			Commit()
		attemptDone()
		err = runHook(hookEnqueued, err)
		if err == nil {
			if resp.Succeeded {
				return q.newWaiter(sk, resp.Header.Revision), nil, nil
			}
			if mine := resp.Responses[1].GetResponseRange().Kvs; len(mine) > 0 {
				if sk.uncertain {
					// An earlier attempt of this call was applied.
					return q.newWaiter(sk, mine[0].CreateRevision), nil, nil
				}
				// Never expected: a key of this name that outlived its
				// acquisition. Leave it to the reaper and use another name.
				q.drop(sk)
				sk = q.newKey()
				continue
			}
			var moved bool
			moved, err = q.s.barrierMoved(ctx, q.dir, sent, resp.Responses[2].GetResponseRange().Kvs)
			if err == nil && !moved {
				q.gone(sk)
				var first *mvccpb.KeyValue
				if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					first = kvs[0]
				}
				return nil, first, nil
			}
			if err == nil {
				continue // the barrier moved: this attempt wrote nothing
			}
		}
		if q.s.failed(err) != nil {
			q.gone(sk)
			return nil, nil, ErrSessionExpired
		}
		if permanent(err) {
			q.gone(sk) // refused: this attempt wrote nothing
			return nil, nil, err
		}
		// The Put may have been applied, now or later: retry (the Else
		// branch reports our own key), or retire it if we give up.
		sk.uncertain = true
		if ctx.Err() != nil || !sleepCtx(ctx, jitter(backoff)) {
			q.gone(sk)
			return nil, nil, ctxErr(ctx, err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

func holderName(identity string) string {
	if strings.TrimSpace(identity) == "" {
		return "an unknown holder"
	}
	return identity
}
