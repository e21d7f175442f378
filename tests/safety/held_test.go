package safety

import (
	"strings"
	"testing"
)

// TestCheckHeld: a late delete removes a live holder's key (its session
// goes on and enqueues again) before the holder releases it; the next
// waiter is granted while the holder still acts. Fencing keeps the counter
// right, so only Held can tell.
func TestCheckHeld(t *testing.T) {
	lost := func(released, arrivedAfter bool, livesOn bool) *History {
		s := newScript()
		s.create(10, 1)
		s.grant(0, 10, 10)
		s.create(11, 2) // waits behind 10
		s.incr(0, 10, 0, Acked)
		arrived := s.tick()
		s.h.Queue = append(s.h.Queue, QueueEvent{Revision: 12, Delete: true, Key: key(10), Arrived: arrived})
		s.grant(1, 11, 12)
		s.incr(1, 11, 1, Acked)
		rel := s.tick()
		if arrivedAfter {
			s.h.Queue[len(s.h.Queue)-1].Arrived = rel + 1
		}
		if released {
			s.h.Grants[0].Released = rel
		}
		s.del(13, 11)
		if livesOn {
			s.create(14, 1)
			s.grant(0, 14, 14)
			s.incr(0, 14, 2, Acked)
			s.del(15, 14)
			return s.finish(3)
		}
		return s.finish(2)
	}
	r := mustFail(t, lost(true, false, true), Held)
	if !strings.Contains(r.String(), "lost while held") {
		t.Errorf("report: %s", r)
	}
	// The lease's expiry (no later key of it), a deletion seen only after
	// the holder began to release, or a holder that never released it
	// (killed): no finding.
	mustPass(t, lost(true, false, false))
	mustPass(t, lost(true, true, true))
	mustPass(t, lost(false, false, true))
}

// TestCheckHeldLostWait: a waiter's Lock failed with ErrLockLost, and its
// session was granted later: its key was deleted under it.
func TestCheckHeldLostWait(t *testing.T) {
	h := good().finish(4)
	// Lease 1's Lock failed before its grant of token 14 was reported.
	h.LostWaits = []LostWait{{Client: 0, Lease: 1, At: h.Grants[2].At - 1}}
	r := mustFail(t, h, Held)
	if !strings.Contains(r.String(), "ErrLockLost") {
		t.Errorf("report: %s", r)
	}
	// After its last grant (the session may have ended): no finding.
	h.LostWaits[0].At = h.Grants[2].At + 1
	mustPass(t, h)
	// ... unless its client found the lease alive after the failure.
	// (The worker stamps its TimeToLive with the failure's time.)
	h.LeaseAlives = []LeaseAlive{{Lease: 1, At: h.LostWaits[0].At}}
	r = mustFail(t, h, Held)
	if !strings.Contains(r.String(), "lease was alive after it failed") {
		t.Errorf("report: %s", r)
	}
}
