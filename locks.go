package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Locks is the set of grants of one LockAll or TryLockAll. Its methods are
// safe for concurrent use.
type Locks struct {
	// Set by newLocks, then read-only.
	all    []*Lock
	byName map[string]*Lock

	// Made by the first Context call.
	ctxOnce sync.Once
	ctx     context.Context // ends with the first grant that ends
	cancel  context.CancelCauseFunc
	stops   []func() bool // release ctx's watchers of the grants
}

func newLocks(ws []*waiter) *Locks {
	ls := &Locks{all: make([]*Lock, len(ws)), byName: make(map[string]*Lock, len(ws))}
	for i, w := range ws {
		l := &Lock{w: w}
		ls.all[i], ls.byName[w.q.name] = l, l
	}
	return ls
}

// Lock returns the grant of name; nil if name is not one of the set.
func (ls *Locks) Lock(name string) *Lock { return ls.byName[name] }

// All returns the grants in the order LockAll was given the names.
func (ls *Locks) All() []*Lock { return append([]*Lock(nil), ls.all...) }

// Context returns a context that ends when the first of the grants ends
// (lost or released); context.Cause names it and wraps its cause (see
// Lock.Context). It carries every grant of the set (LockFromContext returns
// the last name's), so an acquisition of any of the names on the same
// session made with it fails with ErrWouldDeadlock.
func (ls *Locks) Context() context.Context {
	ls.ctxOnce.Do(func() { ls.makeContext(true) })
	return ls.ctx
}

// makeContext makes ls.ctx; with watch, it ends with the first grant that
// ends (each grant's Context watches its key).
func (ls *Locks) makeContext(watch bool) {
	ctx, cancel := context.WithCancelCause(context.Background())
	for _, l := range ls.all {
		ctx = withGrant(ctx, l)
		if !watch {
			continue
		}
		gctx := l.Context()
		name := l.w.q.name
		ls.stops = append(ls.stops, context.AfterFunc(gctx, func() {
			cancel(fmt.Errorf("%q: %w", name, context.Cause(gctx)))
		}))
	}
	ls.ctx, ls.cancel = ctx, cancel
}

// Unlock releases every grant (see Lock.Unlock), all at once, and returns
// nil if each was current when Unlock was first called, else the errors of
// those that were not (or whose delete ctx cut short), joined.
func (ls *Locks) Unlock(ctx context.Context) error {
	errs := make([]error, len(ls.all))
	parallel(len(ls.all), func(i int) { errs[i] = ls.all[i].Unlock(ctx) })
	ls.ctxOnce.Do(func() { ls.makeContext(false) }) // made now if never, so that it ends
	for _, stop := range ls.stops {
		stop()
	}
	ls.cancel(ErrReleased)
	return errors.Join(errs...)
}
