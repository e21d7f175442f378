package etcdlock

// This file holds Mutex.Run, the run loop (run.go) with Lock as its
// acquisition.

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// Run keeps one fn running under the lock until ctx ends, the way a
// singleton worker wants it: it waits its turn (as Lock); once granted it
// calls fn with a context that ends when the grant is lost or ctx ends and
// that carries the grant (LockFromContext); it waits for fn to return; then
// it releases if it still holds; and if the grant had been lost, it waits
// its turn again and calls fn again. One Run never has two fn calls running
// at once.
//
// Run returns nil when ctx ends or fn returns nil, and fn's error when fn
// fails while still holding, always after releasing. It returns at once an
// error wrapping ErrInvalidArgument (nil fn, nil session), ErrInvalidName,
// ErrKindMismatch or ErrWouldDeadlock (ctx carries this session's grant of
// the name), and ErrSessionClosed if the caller closes the Session (or
// the Shards a sharded session routes through). When the Session is
// lost, Run opens replacement sessions on the same client with the same
// options; it owns and closes them and never closes the
// caller's Session; it returns ErrSessionExpired only when the client
// itself is closed. Other failures are logged and retried with jittered
// backoff. It is safe for concurrent use: two Runs are two holders in line.
func (m *Mutex) Run(ctx context.Context, fn func(ctx context.Context, l *Lock) error) error {
	q, err := newQueue(m.s, m.name, tagMutex, "run")
	if err != nil {
		return err
	}
	if fn == nil {
		return q.errorf(fmt.Errorf("%w: nil function", ErrInvalidArgument))
	}
	r := &runner{caller: m.s, q: q, what: "lock", log: m.s.log.With(zap.String("lock", m.name)),
		take: func(ctx context.Context, s *Session) (term, error) {
			l, err := NewMutex(s, m.name).Lock(ctx)
			if err != nil {
				return term{}, err
			}
			return term{l: l, serve: func(ctx context.Context) error { return fn(ctx, l) }}, nil
		}}
	return r.run(ctx)
}
