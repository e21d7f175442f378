package etcdlock

import (
	"sync/atomic"
	"time"
)

// tuning holds a session's internal knobs. Each Session has its own copy of
// defaultTuning, so tests change one session's knobs (and may run in
// parallel) instead of package globals.
type tuning struct {
	// monitorDelay is how long a waiter waits before it starts watching its
	// own key (see waiter.waiting), in nanoseconds.
	monitorDelay atomic.Int64
	// hook, when set, is called at each hookPoint with the error at that
	// point and returns the error to go on with. Only tests set it, at any
	// time.
	hook atomic.Pointer[func(p hookPoint, err error) error]
}

func defaultTuning() *tuning {
	t := &tuning{}
	t.monitorDelay.Store(int64(250 * time.Millisecond))
	return t
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

// runHook calls the session's test hook, if any, at p.
func (s *Session) runHook(p hookPoint, err error) error {
	if h := s.tune.hook.Load(); h != nil {
		return (*h)(p, err)
	}
	return err
}
