package etcdlock

// This file holds a session's book of keys: the write machinery that the
// queue and its waiters reach as Session.book. Its methods live with their
// ideas: how requests reach etcd (commit, attempt, watcher: paths.go), the
// slots that name the session's keys (slots.go), its barriers (barrier.go),
// the reaper (reaper.go), and here the waiters whose keys exist. The
// session owns the book and ends it with itself; the session keeps its
// lifecycle (lease, validity clock, expiry, Close) and its accessors.

import (
	"context"
	"sync"

	"go.uber.org/zap"
)

// keyBook is a session's book of keys (see the file's header). It is safe
// for concurrent use.
type keyBook struct {
	// Set by newKeyBook, then read-only.
	s      *Session
	reaper *reaper // has its own lock

	mu       sync.Mutex        // guards the maps below
	slots    map[string][]bool // slots.go
	barriers map[string]int64  // queue dir -> the barrier's mod revision (barrier.go)
	waiters  map[*waiter]bool  // every key of known create revision not yet gone (releaseAll)
}

func newKeyBook(s *Session) *keyBook {
	return &keyBook{s: s, reaper: &reaper{s: s}}
}

// end is called once the session is over: the keys the reaper parked go
// with the lease.
func (b *keyBook) end() { b.reaper.finishParked() }

// track notes w's key until free untracks it.
func (b *keyBook) track(w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiters == nil {
		b.waiters = map[*waiter]bool{}
	}
	b.waiters[w] = true
}

func (b *keyBook) untrack(w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.waiters, w)
}

// releaseAll sends one guarded delete of every key
// the session still has (closeReleases at a time; the batcher groups them)
// and waits for the answers or ctx. A key it does not delete goes with the
// lease.
func (b *keyBook) releaseAll(ctx context.Context) {
	s := b.s
	b.mu.Lock()
	ws := make([]*waiter, 0, len(b.waiters))
	for w := range b.waiters {
		ws = append(ws, w)
	}
	b.mu.Unlock()
	slots := make(chan struct{}, closeReleases)
	var wg sync.WaitGroup
	for _, w := range ws {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if _, err := w.deleteKey(ctx, false); err != nil {
				s.log.Debug("close: delete failed; the key goes with the lease", zap.String("key", w.key), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}
