package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// reapItem is a key the library can no longer account for: an acquisition
// gave it up, or a release's outcome was unknown.
type reapItem struct {
	key  string
	dir  string // the key's queue dir (namePrefix), for its barrier
	rev  int64  // create revision when known; 0: a write of unknown outcome may create it
	done func() // called once the key is gone for good (or the session is over); may be nil
	// raised: the barrier of dir was raised after the key was given up, so
	// no write of it can be applied any more, and what exists is all there is.
	raised bool
	// pass, when set, is the key's value with a lock-delay passed on
	// (lockdelay.go): written, guarded by rev, before the delete, while
	// passUntil is ahead.
	pass      string
	passUntil time.Time
}

// reaper retires the keys of a session that the library can no longer
// account for, one at a time, in a goroutine it starts when there is work and
// that ends when there is none; the session owns that goroutine (Close waits
// for it). It is safe for concurrent use. Lock order: Session.mu may be
// taken while mu is held, never the reverse.
type reaper struct {
	s *Session

	mu      sync.Mutex
	queue   []reapItem // to reap, oldest first
	parked  []reapItem // keys it may not delete: done when the session ends
	running bool       // a loop goroutine runs (or is being started)
}

func (it reapItem) finish() {
	if it.done != nil {
		it.done()
	}
}

func finishAll(items []reapItem) {
	for _, it := range items {
		it.finish()
	}
}

// add queues it, and starts the loop if none runs. Once the session is over
// (the lease is gone or being revoked, and its keys with it), it calls done
// at once.
func (r *reaper) add(it reapItem) {
	r.mu.Lock()
	r.queue = append(r.queue, it)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start && !r.s.goRun(r.loop) {
		r.mu.Lock()
		rest := r.queue
		r.queue, r.running = nil, false
		r.mu.Unlock()
		finishAll(rest)
	}
}

// next returns the item to reap next; false, after finishing what is left,
// when there is none or the session is over.
func (r *reaper) next() (reapItem, bool) {
	r.mu.Lock()
	over := r.s.ctx.Err() != nil
	if len(r.queue) > 0 && !over {
		it := r.queue[0]
		r.queue = r.queue[1:]
		r.mu.Unlock()
		return it, true
	}
	rest := r.queue
	if over {
		rest = append(rest, r.parked...)
		r.parked = nil
	}
	r.queue, r.running = nil, false
	r.mu.Unlock()
	finishAll(rest)
	return reapItem{}, false
}

// park keeps an item the reaper may not delete until the session ends (its
// key goes with the lease; its name must not be reused meanwhile).
func (r *reaper) park(it reapItem) {
	r.mu.Lock()
	if r.s.Err() == nil {
		r.parked = append(r.parked, it)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	it.finish()
}

// finishParked finishes the parked items; the session calls it once it is
// over.
func (r *reaper) finishParked() {
	r.mu.Lock()
	parked := r.parked
	r.parked = nil
	r.mu.Unlock()
	finishAll(parked)
}

// idle reports whether no loop runs (tests wait for it).
func (r *reaper) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.running
}

// loop settles the queued keys in turn until none is left or the session is
// over (then the lease takes the rest with it).
func (r *reaper) loop() {
	s := r.s
	b := wire.NewBackoff(watchFloor, watchCeil)
	for {
		it, ok := r.next()
		if !ok {
			return
		}
		finished, err := s.book.reapStep(s.ctx, &it)
		if finished {
			s.log.Debug("reaped key", zap.String("key", it.key))
			it.finish()
			b.Reset()
			continue
		}
		switch wire.Classify(err) {
		case wire.LeaseGone:
			_ = s.leaseLost() // the next turn ends the loop
			continue
		case wire.Refused:
			// Never succeeds: the key goes with the lease (Close revokes it).
			s.log.Error("cannot delete key; it stays until the session ends", zap.String("key", it.key), zap.Error(err))
			r.park(it)
			continue
		}
		s.log.Debug("reap failed, retrying", zap.String("key", it.key), zap.Error(err))
		r.mu.Lock()
		r.queue = append(r.queue, it)
		r.mu.Unlock()
		b.Wait(s.ctx)
	}
}

// reap hands a key of known create revision to the session's reaper, which
// deletes it guarded by that revision with backoff until it succeeds, the
// lease is gone, or the session is over; then it calls done. It never blocks.
func (b *keyBook) reap(key string, rev int64, done func()) {
	b.reaper.add(reapItem{key: key, rev: rev, done: done})
}

// reapUnknown is reap for a key in dir that a write of unknown outcome may
// have created, or may still create at any later time. The reaper raises the
// session's barrier of dir first, so that no such write can be applied any
// more, then deletes what exists, guarded by its create revision.
func (b *keyBook) reapUnknown(dir, key string, done func()) {
	b.reaper.add(reapItem{key: key, dir: dir, done: done})
}

// removeNow tries once, bounded by wire.AttemptTimeout, to remove it as the reaper
// would, and hands it to the reaper if that does not finish: a failed
// acquisition leaves no key behind when the cluster answers.
func (b *keyBook) removeNow(it reapItem) {
	s := b.s
	ctx, cancel := context.WithTimeout(s.ctx, wire.AttemptTimeout)
	finished, err := b.reapStep(ctx, &it)
	cancel()
	if !finished && wire.Classify(err) == wire.LeaseGone {
		finished = true
		_ = s.leaseLost() // its keys are gone with it
	}
	if finished {
		it.finish()
		return
	}
	b.reaper.add(it)
}

// reapStep takes it one step further: for a key of unknown outcome, it raises
// the barrier and reads what exists (nothing: finished); then it deletes the
// key guarded by its create revision. finished reports that the key is gone
// for good; err is the failed request's error otherwise.
func (b *keyBook) reapStep(ctx context.Context, it *reapItem) (finished bool, err error) {
	s := b.s
	if it.rev == 0 {
		if !it.raised {
			if err := b.raiseBarrier(ctx, it.dir); err != nil {
				return false, err
			}
			it.raised = true
		}
		actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
		resp, err := s.cli.Get(actx, it.key, clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) == 0 {
			return true, nil
		}
		it.rev = resp.Kvs[0].CreateRevision
	}
	if it.pass != "" && time.Now().Before(it.passUntil) {
		if _, err := b.passOn(ctx, it); err != nil {
			return false, err
		}
	}
	it.pass = ""
	actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
	err = b.deleteKey(actx, it.key, it.rev)
	cancel()
	err = s.runHook(hookReaped, err)
	return err == nil, err
}

// deleteKey deletes the generation of key created at rev (rev > 0): a Txn
// guarded by the create revision, so that it can never delete a later key of
// the same name, whenever it is applied. A key already gone counts as deleted.
func (b *keyBook) deleteKey(ctx context.Context, key string, rev int64) error {
	s := b.s
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}
