package safety

import (
	"context"
	"math/rand/v2"

	"github.com/etcdlock/etcdlock"
)

// runRW locks an RWMutex, as a writer (an increment, like runMutex) two
// times in three, else as a reader: a shared read of the register, then
// the harness's GO (so that a reader can be held while it holds), then
// RUnlock. A reader reports its read as an increment it did not send.
func (w *worker) runRW() {
	for w.ctx.Err() == nil {
		s := w.session()
		if s == nil {
			continue
		}
		reader := rand.IntN(3) == 0
		m := etcdlock.NewRWMutex(s, w.name)
		lock := m.Lock
		if reader {
			lock = m.RLock
		}
		w.say("ENQ %d", monoNow())
		l, err := lock(w.ctx)
		if err != nil {
			if w.ctx.Err() == nil {
				w.lockErr(s, err)
			}
			continue
		}
		w.say("GRANT %d %s %d", l.Token(), l.Key(), monoNow())
		if reader {
			w.sharedRead(l)
		} else {
			w.incr(l)
		}
		w.say("UNLOCK %d %d", l.Token(), monoNow())
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err = l.Unlock(ctx)
		cancel()
		status := "ok"
		if err != nil {
			status = oneLine(err)
		}
		w.say("UNLOCKED %d %s", l.Token(), status)
	}
}

// sharedRead is incr for a reader: the read is shared and nothing is
// written.
func (w *worker) sharedRead(l guarded) {
	tok := l.Token()
	reg := w.res.(*httpRegister)
	rc := monoNow()
	v, st := reg.readShared(w.ctx, l)
	rr := monoNow()
	w.say("READ %d %d %d %s %d", tok, rc, rr, st, v)
	if st != "ok" {
		return
	}
	w.say("ABOUT_TO_WRITE %d %d", tok, v)
	select {
	case <-w.goCh:
	case <-w.ctx.Done():
	}
	w.say("WROTE %d 0 0 skipped", tok)
}
