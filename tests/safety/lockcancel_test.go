//go:build linux

package safety

import (
	"context"
	"sync"
	"time"
)

// lockCanceler carries out the harness's "CANCEL D" lines (see lateHold): it
// cancels the worker's Lock in progress D from now or, between Locks, the
// next Lock D after it starts. A cancel is reported as CANCELING with the
// Lock's lease and the time the Lock began, and the Lock's end as CANCELED
// (see runMutex). Canceling the Lock in progress matters: a Lock that the
// held paths stall would otherwise keep its worker until the hold ends.
// A lockCanceler is safe for concurrent use.
type lockCanceler struct {
	w *worker

	mu      sync.Mutex
	pending time.Duration // a bound asked for between Locks, for the next one
	cur     *canceledLock // the Lock in progress; nil between Locks
}

// canceledLock is one Lock that the harness may cancel.
type canceledLock struct {
	lease  int64
	start  int64 // monoNow when the Lock began
	cancel context.CancelFunc
	timer  *time.Timer // set once a cancel is scheduled (CANCELING was said)
}

// begin returns the context of a Lock on lease that is about to start and
// end, which the worker calls when the Lock has returned: end reports
// whether the harness bounded the Lock (its CANCELING was said).
func (lc *lockCanceler) begin(lease int64) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(lc.w.ctx)
	cl := &canceledLock{lease: lease, start: monoNow(), cancel: cancel}
	lc.mu.Lock()
	lc.cur = cl
	if d := lc.pending; d > 0 {
		lc.pending = 0
		lc.schedule(cl, d)
	}
	lc.mu.Unlock()
	return ctx, func() bool {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		lc.cur = nil
		cancel()
		if cl.timer == nil {
			return false
		}
		cl.timer.Stop()
		return true
	}
}

// request bounds the Lock in progress to d from now, or the next Lock to d.
func (lc *lockCanceler) request(d time.Duration) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if cl := lc.cur; cl != nil && cl.timer == nil {
		lc.schedule(cl, d)
		return
	}
	lc.pending = d
}

// schedule says CANCELING for cl and cancels it after d. lc.mu is held.
func (lc *lockCanceler) schedule(cl *canceledLock, d time.Duration) {
	lc.w.say("CANCELING %x %d", cl.lease, cl.start)
	cl.timer = time.AfterFunc(d, cl.cancel)
}
