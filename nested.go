package etcdlock

// This file holds what a grant's context carries (the grant itself), and the
// check that turns a nested acquisition, which could only wait behind the
// caller's own grant, into ErrWouldDeadlock.

import (
	"context"
	"fmt"
)

// grantsKey is the context key of the grants a context carries.
type grantsKey struct{}

// grantLink is one grant a context carries, and the grants of its parent.
type grantLink struct {
	l    *Lock
	next *grantLink
}

// withGrant returns a child of ctx that carries l besides what ctx carries.
func withGrant(ctx context.Context, l *Lock) context.Context {
	parent, _ := ctx.Value(grantsKey{}).(*grantLink)
	return context.WithValue(ctx, grantsKey{}, &grantLink{l: l, next: parent})
}

// LockFromContext returns the innermost grant ctx carries: the grant of
// Lock.Context, of Locks.Context, or of the context Mutex.Run and RunOnce
// hand to fn, or of a context derived from one of them (a Leadership's
// Context carries its leader key's grant, whose Unlock resigns). ok is
// false for a context that carries none.
func LockFromContext(ctx context.Context) (l *Lock, ok bool) {
	if g, _ := ctx.Value(grantsKey{}).(*grantLink); g != nil {
		return g.l, true
	}
	return nil, false
}

// wouldDeadlock returns an error wrapping ErrWouldDeadlock when ctx carries
// a current grant of q's name from q's session (or from a replacement session
// Run opened for it) that a new acquisition of q's kind would have to wait
// behind: every kind except a semaphore of more than one, where a second
// grant of one holder can be granted beside the first.
func (q queue) wouldDeadlock(ctx context.Context) error {
	g, _ := ctx.Value(grantsKey{}).(*grantLink)
	for ; g != nil; g = g.next {
		hq := g.l.w.q
		if hq.name != q.name || hq.s.origin() != q.s.origin() || g.l.w.ctx.Err() != nil {
			continue
		}
		if kind, _ := kindOfTag(q.tag); kind == kindSemaphore && !exclusiveTag(q.tag) {
			continue
		}
		return fmt.Errorf("%w: the context carries this session's grant of the name (token %d)", ErrWouldDeadlock, g.l.Token())
	}
	return nil
}

// origin returns the session s stands for: the caller's session of a Run
// that opened s to replace it, else s.
func (s *Session) origin() *Session {
	if s.root != nil {
		return s.root
	}
	return s
}
