package etcdlock

// This file holds Election.Run, the run loop (run.go) with a campaign as
// its acquisition and lead as its function.

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// Run keeps this process in the election until ctx ends, the way most
// services want a leader: it campaigns with value; once leading it calls lead
// with a context that ends when leadership is lost or ctx ends; it waits for
// lead to return; then it resigns if it still leads (so a deploy hands
// leadership over at once, not after a TTL), and campaigns again if
// leadership had been lost. One Run never has two lead calls running at once.
//
// Run returns nil when ctx ends or lead returns nil, and lead's error
// otherwise (lead returning while it still leads), always after resigning.
// It returns at once an error wrapping ErrInvalidArgument (nil lead, nil
// session), ErrInvalidName, ErrKindMismatch or ErrWouldDeadlock (ctx
// carries this session's grant of the name), and ErrSessionClosed if the
// caller closes the Session (or the Shards a sharded session routes
// through). When the Session is lost, Run opens replacement
// sessions on the same client with the same options; it owns and closes them
// and never closes the caller's Session; it returns ErrSessionExpired only
// when the client itself is closed. Other failures are logged and retried
// with jittered backoff.
func (e *Election) Run(ctx context.Context, value string, lead func(ctx context.Context) error) error {
	q, err := e.queue("run")
	if err != nil {
		return err
	}
	if lead == nil {
		return q.errorf(fmt.Errorf("%w: nil lead function", ErrInvalidArgument))
	}
	r := &runner{caller: e.s, q: q, what: "election", log: e.s.log.With(zap.String("election", e.name)),
		take: func(ctx context.Context, s *Session) (term, error) {
			l, err := NewElection(s, e.name).Campaign(ctx, value)
			if err != nil {
				return term{}, err
			}
			return term{l: &l.g, serve: func(ctx context.Context) error { return e.lead(ctx, l, lead) }}, nil
		}}
	return r.run(ctx)
}

// lead calls lead for the term l with ctx (which ends with the term and
// carries its grant, see serveUnder) carrying l too
// (LeadershipFromContext), reporting l to the election's LeaderHealth
// meanwhile if it has one.
func (e *Election) lead(ctx context.Context, l *Leadership, lead func(context.Context) error) error {
	if h := e.health.Load(); h != nil {
		h.Set(l)
		defer h.Set(nil)
	}
	return lead(context.WithValue(ctx, leadershipKey{}, l))
}

type leadershipKey struct{}

// LeadershipFromContext returns the Leadership of the term that Run's lead
// function was called for, from the context Run passed to it, so that lead
// can fence its writes with Token or change its value with Proclaim. ok is
// false for any other context.
func LeadershipFromContext(ctx context.Context) (l *Leadership, ok bool) {
	l, ok = ctx.Value(leadershipKey{}).(*Leadership)
	return l, ok
}
