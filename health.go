package etcdlock

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// SessionHealth is a health check of a session, an http.Handler: 200 while
// the session is live and its ValidUntil is more than a headroom ahead, 503
// (with the reason in the body) otherwise. Make it with NewSessionHealth.
type SessionHealth struct {
	s        *Session
	headroom time.Duration
}

// NewSessionHealth returns the health check of s with headroom. A headroom
// of TTL/3 flags a session that missed two keepalives in a row.
func NewSessionHealth(s *Session, headroom time.Duration) *SessionHealth {
	return &SessionHealth{s: s, headroom: headroom}
}

// ServeHTTP answers 200 while the session is live and valid for more than
// the headroom, 503 otherwise.
func (h *SessionHealth) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s := h.s
	if err := s.Err(); err != nil {
		http.Error(w, fmt.Sprintf("session %x: %v", int64(s.Lease()), err), http.StatusServiceUnavailable)
		return
	}
	left := time.Until(s.ValidUntil())
	if left <= h.headroom {
		http.Error(w, fmt.Sprintf("session %x: valid for only %v (want more than %v)", int64(s.Lease()), left.Round(time.Millisecond), h.headroom), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ok: session %x valid for %v\n", int64(s.Lease()), left.Round(time.Millisecond))
}

// LeaderHealth is a health check for a leader, like client-go's
// HealthzAdaptor: it is unhealthy when this process believes it leads (its
// lead function is still running) although its term ended more than a
// tolerance ago: the leadership was lost (its Context ended: a break, a
// deleted leader key, a lost session) or its validity clock ran out. That is
// a lead function that ignores its context, the one way a process keeps
// acting as leader after it lost. Election.Run reports to it when it is
// made for that Election; around your own Campaign, call Set yourself (and
// Set(nil) before Resign). The zero value is not ready; use NewLeaderHealth.
// A LeaderHealth is safe for concurrent use.
type LeaderHealth struct {
	tolerance time.Duration
	mu        sync.Mutex
	l         *Leadership
	ended     time.Time   // when l's Context ended, zero while it has not
	stop      func() bool // stops the AfterFunc that records ended
}

// NewLeaderHealth returns the health check of e's leader in this process:
// e's Run records in it when it acts as leader (while its lead function
// runs), in place of any LeaderHealth made for e before. It allows lead to
// run for tolerance past the end of the leadership's term (its loss, or the
// end of its validity, whichever comes first: its time to notice the
// canceled context and stop). A negative tolerance counts as zero. With a
// nil e, only Set records.
func NewLeaderHealth(e *Election, tolerance time.Duration) *LeaderHealth {
	h := &LeaderHealth{tolerance: max(tolerance, 0)}
	if e != nil {
		e.health.Store(h)
	}
	return h
}

// Set records that this process acts as leader under l; Set(nil) records
// that it stopped.
func (h *LeaderHealth) Set(l *Leadership) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	h.l, h.ended = l, time.Time{}
	if l != nil {
		h.stop = context.AfterFunc(l.Context(), func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.l == l && h.ended.IsZero() {
				h.ended = time.Now()
			}
		})
	}
}

// ServeHTTP answers 200 while this process does not act as leader or its
// term has not ended (or ended less than the tolerance ago), 503 otherwise.
func (h *LeaderHealth) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	l, ended := h.l, h.ended
	h.mu.Unlock()
	if l == nil {
		fmt.Fprintln(w, "ok: not leading")
		return
	}
	if lctx := l.Context(); lctx.Err() != nil {
		if ended.IsZero() {
			ended = time.Now() // the AfterFunc has not run yet
		}
		if over := time.Since(ended); over >= h.tolerance {
			http.Error(w, fmt.Sprintf("leading %q with token %d, but its leadership ended %v ago: %v", l.g.w.q.name, l.Token(), over.Round(time.Millisecond), context.Cause(lctx)), http.StatusServiceUnavailable)
			return
		}
	}
	valid := l.g.w.q.s.ValidUntil()
	if over := time.Since(valid); over > h.tolerance {
		http.Error(w, fmt.Sprintf("leading %q with token %d, but its validity ran out %v ago", l.g.w.q.name, l.Token(), over.Round(time.Millisecond)), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ok: leading %q with token %d\n", l.g.w.q.name, l.Token())
}
