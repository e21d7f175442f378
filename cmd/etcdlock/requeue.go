package main

import (
	"context"
	"time"
)

// requeueEvery is the pause between attempts to open a new session while
// etcd does not answer.
const requeueEvery = time.Second

// requeue replaces h's expired session (etcd, or the path to it, was
// unreachable for longer than the TTL while the caller waited) with a new
// one once etcd answers again, retrying until ctx ends, and says on stderr
// for how long etcd was unreachable. The new session's wait starts at the
// end of the queue: the old place went with the old lease. It returns ctx's
// error if no session could be opened in time.
func (a *app) requeue(ctx context.Context, h *held, o *holdOpts) error {
	lastHeard := h.s.ValidUntil().Add(-h.s.TTL()) // about the last renewal etcd acknowledged
	a.closeSession(h.s)
	h.s = nil
	for {
		s, err := a.openSession(ctx, h.cli, o)
		if err == nil {
			h.s = s
			a.logf("etcd was unreachable for about %v while waiting, longer than the session's TTL (%v), so its lease expired: waiting again, with a new session, at the end of the queue",
				time.Since(lastHeard).Round(100*time.Millisecond), o.ttl)
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(requeueEvery):
		}
	}
}
