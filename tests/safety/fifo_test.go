package safety

import (
	"strings"
	"testing"
)

func TestCheckGrantBeforeFront(t *testing.T) {
	// Token 11 is reported granted while 10 still lives (probe at 11).
	s := newScript()
	s.create(10, 1)
	s.create(11, 2)
	s.grant(0, 10, 11)
	s.grant(1, 11, 11)
	s.del(12, 10)
	s.del(13, 11)
	r := mustFail(t, s.finish(0), Grants)
	if !strings.Contains(r.String(), "only from revision 12") {
		t.Fatalf("report: %s", r)
	}
	// Reported after 10 was gone: fine.
	s = newScript()
	s.create(10, 1)
	s.create(11, 2)
	s.grant(0, 10, 11)
	s.del(12, 10)
	s.grant(1, 11, 12)
	s.del(13, 11)
	mustPass(t, s.finish(0))
}

func TestCheckGrantOfDeadKey(t *testing.T) {
	s := newScript()
	s.create(10, 1)
	s.create(11, 2)
	s.del(12, 11) // 11 is gone before 10
	s.grant(1, 11, 14)
	s.del(13, 10)
	mustFail(t, s.finish(0), Grants)
}

func TestCheckFIFOSkippedWaiter(t *testing.T) {
	// Key 11 reaches the front at 12 and is deleted at 13 without a grant,
	// yet its lease enqueues again at 14: it was passed over.
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.create(11, 2)
	s.del(12, 10)
	s.del(13, 11)
	s.create(14, 2)
	s.grant(1, 14, 14)
	s.del(15, 14)
	mustFail(t, s.finish(0), FIFO)
	// The same, but lease 2 never comes back (its session died): fine.
	s = newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.create(11, 2)
	s.del(12, 10)
	s.del(13, 11)
	s.create(14, 3)
	s.grant(1, 14, 14)
	s.del(15, 14)
	mustPass(t, s.finish(0))
}

// canceledWaiter: key 11 of lease 2 reaches the front at 12 and is deleted
// at 13 without a grant, and lease 2 enqueues again at 14; it belongs to a
// Lock that its client canceled. With reuse, the name of 11 had another key
// after the cancel began: 11 is not the canceled Lock's key but a late
// re-creation.
func canceledWaiter(reuse bool) *History {
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.cancel(1, 2, 0)
	if reuse {
		keyNames[9] = key(11)
		s.create(9, 2)
		s.del(9, 9)
	}
	s.create(11, 2)
	s.del(12, 10)
	s.del(13, 11)
	s.create(14, 2)
	s.grant(1, 14, 14)
	s.del(15, 14)
	return s.finish(0)
}

// createdBeforeCancel: the skipped key was created before the cancel began.
func createdBeforeCancel() *History {
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.create(11, 2)
	s.cancel(1, 2, 0)
	s.del(12, 10)
	s.del(13, 11)
	s.create(14, 2)
	s.grant(1, 14, 14)
	s.del(15, 14)
	return s.finish(0)
}

// outlived: a canceled Lock's key is deleted after its session's last
// enqueue, and another key of the lease outlives the deletion, or (together)
// goes at the same revision.
func outlived(together bool) *History {
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.cancel(1, 2, 0)
	s.create(11, 2)
	s.create(12, 2)
	s.del(13, 10)
	s.del(14, 11)
	if together {
		s.del(14, 12)
	} else {
		s.grant(1, 12, 14)
		s.del(15, 12)
	}
	return s.finish(0)
}

// alone: the canceled Lock's key goes alone; its client found the lease
// alive after the test received the deletion (aliveAfter) or before.
func alone(aliveAfter bool) *History {
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.cancel(1, 2, 0)
	s.create(11, 2)
	s.create(12, 2) // enqueued again, and given up at once
	s.del(13, 12)
	s.del(14, 10)
	before := s.tick()
	s.del(15, 11)
	s.h.Queue[len(s.h.Queue)-1].Arrived = s.tick()
	at := before
	if aliveAfter {
		at = s.tick()
	}
	s.h.LeaseAlives = []LeaseAlive{{Lease: 2, At: at}}
	return s.finish(0)
}

// phantom: a canceled Lock's key that lives on with its lease (never deleted
// while the session lived).
func phantom() *History {
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.cancel(1, 2, 0)
	s.create(11, 2)
	s.create(12, 2)
	s.del(13, 10)
	return s.finish(0)
}

// TestCheckFIFOCanceledWaiter: the FIFO checker excuses a skipped key of a
// canceled Lock only with evidence that it was that Lock's and that its
// session lived.
func TestCheckFIFOCanceledWaiter(t *testing.T) {
	t.Cleanup(func() { delete(keyNames, 9) })
	for _, tc := range []struct {
		name string
		h    func() *History
		pass bool
	}{
		{"canceled", func() *History { return canceledWaiter(false) }, true},
		{"late re-creation", func() *History { return canceledWaiter(true) }, false},
		{"created before the cancel", createdBeforeCancel, false},
		{"another key outlived it", func() *History { return outlived(false) }, true},
		{"the lease ended with it", func() *History { return outlived(true) }, false},
		{"alone, lease alive after", func() *History { return alone(true) }, true},
		{"alone, evidence from before", func() *History { return alone(false) }, false},
		{"phantom", phantom, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pass {
				mustPass(t, tc.h())
			} else {
				mustFail(t, tc.h(), FIFO)
			}
		})
	}
}
