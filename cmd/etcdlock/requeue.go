package main

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// requeueEvery is the pause between attempts to open a new session while
// etcd does not answer; probeEvery between the questions whether it does.
const (
	requeueEvery = time.Second
	probeEvery   = 250 * time.Millisecond
)

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
	back, err := a.awaitEtcd(ctx, h.cli)
	if err != nil {
		return err
	}
	for {
		s, err := a.openSession(ctx, h.cli, h.r, o)
		if err == nil {
			h.s = s
			if out := back.Sub(lastHeard); h.r == nil && out > 0 {
				a.logf("etcd was unreachable for about %v while waiting, longer than the session's TTL (%v), so its lease expired: waiting again, with a new session, at the end of the queue",
					out.Round(100*time.Millisecond), o.ttl)
			} else {
				// A sharded session's own clock says nothing of the
				// cluster whose session was lost.
				a.logf("the session's lease on the name's cluster expired while waiting (etcd was unreachable longer than the session's TTL, %v): waiting again, with a new session, at the end of the queue", o.ttl)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(requeueEvery):
		}
	}
}

// awaitEtcd asks etcd every probeEvery whether it answers with a leader
// and returns when it first does (the end of the outage, to within a
// probe), or ctx's cause when ctx ends first.
func (a *app) awaitEtcd(ctx context.Context, cli *clientv3.Client) (time.Time, error) {
	for {
		if probe(ctx, cli, cli.Endpoints(), time.Second) == nil {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, context.Cause(ctx)
		case <-time.After(probeEvery):
		}
	}
}
