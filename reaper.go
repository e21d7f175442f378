package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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
}

// reap hands a key of known create revision to the session's reaper, which
// deletes it guarded by that revision with backoff until it succeeds, the
// lease is gone, or the session is over; then it calls done. It never blocks.
func (s *Session) reap(key string, rev int64, done func()) {
	s.queueReap(reapItem{key: key, rev: rev, done: done})
}

// reapUnknown is reap for a key in dir that a write of unknown outcome may
// have created, or may still create at any later time. The reaper raises the
// session's barrier of dir first, so that no such write can be applied any
// more, then deletes what exists, guarded by its create revision.
func (s *Session) reapUnknown(dir, key string, done func()) {
	s.queueReap(reapItem{key: key, dir: dir, done: done})
}

// removeNow tries once, bounded by attemptTimeout, to remove it as the reaper
// would, and hands it to the reaper if that does not finish: a failed
// acquisition leaves no key behind when the cluster answers.
func (s *Session) removeNow(it reapItem) {
	ctx, cancel := context.WithTimeout(s.ctx, attemptTimeout)
	finished, err := s.settle(ctx, &it)
	cancel()
	if finished || s.failed(err) != nil {
		if it.done != nil {
			it.done()
		}
		return
	}
	s.queueReap(it)
}

func (s *Session) queueReap(it reapItem) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		// The lease is gone or being revoked: so are its keys.
		if it.done != nil {
			it.done()
		}
		return
	}
	s.reapQ = append(s.reapQ, it)
	if !s.reaping {
		s.reaping = true
		s.wg.Add(1)
		go s.reapLoop()
	}
	s.mu.Unlock()
}

// reapLoop settles the queued keys in turn until none is left or the session
// is over (then the lease takes the rest with it).
func (s *Session) reapLoop() {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		s.mu.Lock()
		if len(s.reapQ) == 0 || s.ctx.Err() != nil {
			rest := s.reapQ
			if s.ctx.Err() != nil {
				rest = append(rest, s.reapParked...)
				s.reapParked = nil
			}
			s.reapQ, s.reaping = nil, false
			s.mu.Unlock()
			for _, it := range rest {
				if it.done != nil {
					it.done()
				}
			}
			return
		}
		it := s.reapQ[0]
		s.reapQ = s.reapQ[1:]
		s.mu.Unlock()

		finished, err := s.settle(s.ctx, &it)
		switch {
		case finished:
			s.log.Debug("reaped key", zap.String("key", it.key))
			if it.done != nil {
				it.done()
			}
			backoff = 50 * time.Millisecond
			continue
		case s.failed(err) != nil:
			continue // the session is over: the next turn ends the loop
		case permanent(err):
			// Never succeeds: the key goes with the lease (Close revokes it).
			// done waits for the session's end: the name must not be reused
			// meanwhile.
			s.log.Error("cannot delete key; it stays until the session ends", zap.String("key", it.key), zap.Error(err))
			s.mu.Lock()
			s.reapParked = append(s.reapParked, it)
			s.mu.Unlock()
			continue
		}
		s.log.Debug("reap failed, retrying", zap.String("key", it.key), zap.Error(err))
		s.mu.Lock()
		s.reapQ = append(s.reapQ, it)
		s.mu.Unlock()
		if !sleepCtx(s.ctx, jitter(backoff)) {
			continue
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// settle takes it one step further: for a key of unknown outcome, it raises
// the barrier and reads what exists (nothing: finished); then it deletes the
// key guarded by its create revision. finished reports that the key is gone
// for good; err is the failed request's error otherwise.
func (s *Session) settle(ctx context.Context, it *reapItem) (finished bool, err error) {
	if it.rev == 0 {
		if !it.raised {
			if err := s.raiseBarrier(ctx, it.dir); err != nil {
				return false, err
			}
			it.raised = true
		}
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
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
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	err = deleteKey(actx, s.cli, it.key, it.rev)
	cancel()
	err = runHook(hookReaped, err)
	return err == nil, err
}

// deleteKey deletes the generation of key created at rev (rev > 0): a Txn
// guarded by the create revision, so that it can never delete a later key of
// the same name, whenever it is applied. A key already gone counts as deleted.
func deleteKey(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	_, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}
