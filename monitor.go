package etcdlock

// This file holds a grant's monitor: a watch of its own key that ends the
// grant's context when the key is deleted.

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// startMonitor starts, once, the goroutine that watches the waiter's own key
// from its create revision + 1 (no gap) and ends the waiter's context when the
// key is deleted. It is owned by the session, which waits for it on Close.
func (w *waiter) startMonitor() {
	w.monitorOnce.Do(func() {
		_ = w.q.s.runHook(hookMonitor, nil)
		w.q.s.goRun(w.monitor)
	})
}

func (w *waiter) monitor() {
	next := w.rev + 1
	b := wire.NewBackoff(watchFloor, watchCeil)
	for w.ctx.Err() == nil {
		gone, progress := w.watchOwn(&next)
		if gone {
			_ = w.lost()
			return
		}
		if progress {
			b.Reset()
		}
		if !b.Wait(w.ctx) {
			return
		}
	}
}

// watchOwn watches the waiter's key from *next until the watch ends or must
// move (see keyBook.watcher), or the key is gone, advancing *next past what
// it saw; progress reports that it saw a later revision.
func (w *waiter) watchOwn(next *int64) (gone, progress bool) {
	wt, moved := w.q.s.book.watcher(w.ctx, nil)
	wctx, stop := watchCtx(w.ctx, moved)
	defer stop()
	wch := wt.Watch(wctx, w.key, clientv3.WithRev(*next), clientv3.WithFilterPut())
	for {
		var resp clientv3.WatchResponse
		select {
		case <-moved:
			return false, progress
		case r, ok := <-wch:
			if !ok {
				return false, progress
			}
			resp = r
		}
		if resp.CompactRevision != 0 {
			// Compacted past next: look at the key itself.
			gresp, err := w.q.s.cli.Get(wctx, w.key)
			if err != nil {
				return false, progress
			}
			if len(gresp.Kvs) == 0 || gresp.Kvs[0].CreateRevision != w.rev {
				return true, progress
			}
			*next = gresp.Header.Revision + 1
			return false, progress
		}
		if resp.Canceled || resp.Err() != nil {
			return false, progress
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				return true, progress
			}
		}
		if resp.Header.Revision >= *next {
			*next = resp.Header.Revision + 1
			progress = true
		}
	}
}
