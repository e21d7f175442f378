package etcdlock

import (
	"sync/atomic"
	"time"

	"github.com/etcdlock/etcdlock/internal/testhook"
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

// hookPoint names a point of an acquisition where tests can interfere
// (testhook.Point lists them).
type hookPoint = testhook.Point

const (
	hookBeforeEnqueue = testhook.BeforeEnqueue
	hookEnqueued      = testhook.Enqueued
	hookWaiting       = testhook.Waiting
	hookHandoffRead   = testhook.HandoffRead
	hookWatchCreated  = testhook.WatchCreated
	hookMonitor       = testhook.Monitor
	hookReaped        = testhook.Reaped
	hookHoldOff       = testhook.HoldOff
	hookSharedWatch   = testhook.SharedWatch
	hookConnWait      = testhook.ConnWait
)

// runHook calls the session's test hook, if any, at p.
func (s *Session) runHook(p hookPoint, err error) error {
	if h := s.tune.hook.Load(); h != nil {
		return (*h)(p, err)
	}
	return err
}
