package etcdlock

// This file holds the seam between the core and package shard: router, the
// one thing a routed session (newRoutedSession) holds that a plain one does
// not, and the routing of a routed session's acquisitions and reads to its
// session on each cluster. A session made by NewSession has no router, and
// its acquisitions never come here: the check is the nil router at the top
// of each acquisition (acquisition, lock.go).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/seam"
	"github.com/etcdlock/etcdlock/internal/wire"
)

// Router is the seam for package shard (internal/seam.Router): a slot map
// a routed session follows to put each name on the cluster that owns its
// slot. Package shard implements it over its map (shard.Shards) and hands
// it to the core through seam.NewRoutedSession. The core reads nothing else
// of sharding: the stamp guard of each cluster session (inside its enqueue
// Txn) is the core's own. Neither is part of the public API: a routed
// *Session (Lease 0, never lost as a whole) must not reach users.
type router = seam.Router

func init() {
	seam.NewRoutedSession = func(ctx context.Context, root *clientv3.Client, r seam.Router, opts ...any) (any, error) {
		so := make([]SessionOption, len(opts))
		for i, o := range opts {
			so[i], _ = o.(SessionOption) // anything else is a nil option: refused
		}
		s, err := newRoutedSession(ctx, root, r, so...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// routing is a routed session's state: its router, and its session on each
// cluster it used.
type routing struct {
	r router

	mu       sync.Mutex
	children map[string]*clusterChild // by cluster id
	retired  []*Session               // lost children, closed by Close
}

// clusterChild is the session on one cluster. open is a token held while
// it is opened (a channel, so that a caller waiting for another's opening
// still ends with its ctx or Close); s is guarded by routing.mu.
type clusterChild struct {
	open chan struct{}
	s    *Session
}

// newRoutedSession is the seam's constructor, for package shard only (its
// shard.NewSession calls it through seam.NewRoutedSession): a session that
// holds no lease of its own and puts each acquisition on its session of
// the cluster r gives the name's slot, opened on first use with opts, whose key-creating writes carry the
// slot's stamp guard. Such a session is never handed to users as it is:
// its Lease is 0 and it is not lost when one of its clusters' sessions is,
// the contract shard.Session documents. root is its Client; ctx bounds
// nothing past this call. It returns an error wrapping ErrInvalidArgument
// for a nil r or root, or an invalid option.
func newRoutedSession(ctx context.Context, root *clientv3.Client, r router, opts ...SessionOption) (*Session, error) {
	var missing error
	if r == nil || root == nil {
		missing = fmt.Errorf("%w: nil router or root client", ErrInvalidArgument)
	}
	o, err := parseSessionOptions(opts, missing)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, newError("new session", "", ctxErr(ctx, err))
	}
	s := &Session{cli: root, ttl: o.ttl, identity: o.identity, opts: o, tune: defaultTuning(),
		log: o.logger.With(zap.String("identity", o.identity)), closing: make(chan struct{}),
		router: &routing{r: r, children: map[string]*clusterChild{}}}
	s.grantLog = s.log
	s.testHandle = newTestHandle(s)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.revoking, s.stopRevoking = context.WithCancel(context.Background())
	return s, nil
}

// route returns the session of routed session s to acquire name on: the
// session on the cluster that owns name's slot, once the slot's stamp there
// is active. While the slot is moving it waits for the move to finish
// (until ctx ends), unless try: then it returns ErrLocked.
func (s *Session) route(ctx context.Context, name string, try bool) (*Session, error) {
	slot := layout.SlotOf(name)
	for {
		if err := s.wanted(ctx); err != nil {
			return nil, err
		}
		cs, changed, err := s.routeRead(ctx, name)
		if err != nil {
			return nil, err
		}
		id := cs.stamps.id
		st, err := cs.stamps.stamp(ctx, cs, slot)
		if err != nil {
			return nil, s.cause(ctx, fmt.Errorf("read the stamp of slot %d on %s: %w", slot, id, ctxErr(ctx, err)))
		}
		if st.Active() {
			return cs, nil
		}
		if try {
			return nil, fmt.Errorf("%w: slot %d is moving from cluster %s", ErrLocked, slot, id)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctxErr(ctx, ctx.Err())
		case <-s.closing:
			return nil, ErrSessionClosed
		}
	}
}

// routeRead returns the session to read name's queue on: s itself unless s
// is routed; else the session of the cluster its router gives name's slot
// now, and a channel closed when the map changes.
func (s *Session) routeRead(ctx context.Context, name string) (*Session, <-chan struct{}, error) {
	set := s.router
	if set == nil {
		return s, nil, nil
	}
	id, changed, err := set.r.Owner(layout.SlotOf(name))
	if err != nil {
		return nil, nil, err
	}
	cs, err := set.child(ctx, s, id)
	return cs, changed, err
}

// child returns the live session of s on cluster id, opening it (again,
// after a loss) as needed.
func (set *routing) child(ctx context.Context, s *Session, id string) (*Session, error) {
	c, cur := set.current(id)
	if cur != nil && cur.Err() == nil {
		return cur, nil
	}
	select {
	case c.open <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxErr(ctx, ctx.Err())
	case <-s.closing:
		return nil, ErrSessionClosed
	}
	defer func() { <-c.open }()
	if _, cur = set.current(id); cur != nil && cur.Err() == nil {
		return cur, nil // opened by the one it waited for
	}
	cli, err := set.r.Client(ctx, id)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)() // Close ends an opening too
	o := s.opts
	o.tune = s.tune // one set of knobs (tests' hooks) for all its clusters
	cs, err := openChild(octx, cli, o)
	if err != nil {
		if s.Err() != nil {
			return nil, ErrSessionClosed
		}
		return nil, err
	}
	cs.root = s
	cs.stamps = &clusterStamps{id: id, moving: set.r.Moving}
	set.mu.Lock()
	closed := s.Err() != nil // closed meanwhile: Close did not see cs
	if !closed {
		if c.s != nil {
			set.retired = append(set.retired, c.s)
		}
		c.s = cs
	}
	set.mu.Unlock()
	if closed {
		// Outside set.mu: Close may wait for a revoke that others need not.
		if err := cs.Close(); err != nil {
			s.log.Warn("close a cluster session opened as the session closed", zap.String("cluster", id), zap.Error(err))
		}
		return nil, ErrSessionClosed
	}
	return cs, nil
}

// current returns the entry of cluster id (made on first use) and its
// session, nil before its first opening.
func (set *routing) current(id string) (*clusterChild, *Session) {
	set.mu.Lock()
	defer set.mu.Unlock()
	c := set.children[id]
	if c == nil {
		c = &clusterChild{open: make(chan struct{}, 1)}
		set.children[id] = c
	}
	return c, c.s
}

// openChild opens a cluster session with o. An opening that ends on its
// own validity clock (ErrSessionExpired: a lease grant slower than the TTL,
// as right after a member's restart, or a lease lost at once) is opened
// again: the caller's acquisition has not begun and nothing of it was
// written. It returns the session; the error of an opening that failed
// otherwise, or once cli is closed; or, when ctx ends, the last error.
func openChild(ctx context.Context, cli *clientv3.Client, o sessionOptions) (*Session, error) {
	b := wire.NewBackoff(requestFloor, requestCeil)
	for {
		cs, err := newSession(ctx, cli, o)
		if err == nil || !errors.Is(err, ErrSessionExpired) || cli.Ctx().Err() != nil || !b.Wait(ctx) {
			return cs, err
		}
	}
}

// closeRouted is Close of a routed session: it ends it (ErrSessionClosed)
// and closes every cluster session, in parallel; it returns their errors
// joined.
func (s *Session) closeRouted() error {
	s.mu.Lock()
	s.err = ErrSessionClosed
	s.mu.Unlock()
	close(s.closing)
	s.cancel(errClosedCause)
	// child installs a session only while s.err is nil, under set.mu: every
	// one installed is seen below.
	set := s.router
	set.mu.Lock()
	all := append([]*Session(nil), set.retired...)
	set.mu.Unlock()
	all = append(all, set.live()...)
	errs := make([]error, len(all))
	parallel(len(all), func(i int) { errs[i] = all[i].Close() })
	s.stopRevoking()
	return errors.Join(errs...)
}

// validUntil is ValidUntil of a routed session: the earliest of its live
// cluster sessions' (far ahead while it has none).
func (set *routing) validUntil() time.Time {
	until := time.Now().Add(maxTTL)
	for _, cs := range set.live() {
		if v := cs.ValidUntil(); cs.Err() == nil && v.Before(until) {
			until = v
		}
	}
	return until
}

// live returns the current session of each cluster.
func (set *routing) live() []*Session {
	set.mu.Lock()
	defer set.mu.Unlock()
	var out []*Session
	for _, c := range set.children {
		if c.s != nil {
			out = append(out, c.s)
		}
	}
	return out
}

// routed runs op on the queue of name (of kind tag, for verb) on the
// session of routed session s's cluster that owns name's slot (route). When
// the slot moves away while op writes (errSlotMoved), it routes again and
// runs op again: a waiter that arrives during a move waits for it. try
// makes route refuse a moving slot (ErrLocked) instead of waiting.
func routed[T any](ctx context.Context, s *Session, name, tag, verb string, try bool, op func(queue) (T, error)) (T, error) {
	var zero T
	for {
		q, err := newQueue(s, name, tag, verb)
		if err != nil {
			return zero, err
		}
		// Before routing: route may wait for a move of the slot, which
		// waits for the caller's own grant of the name (ErrWouldDeadlock
		// must come at once; admit checks again on the cluster session).
		if err := q.wouldDeadlock(ctx); err != nil {
			return zero, q.errorf(err)
		}
		if q.s, err = s.route(ctx, name, try); err != nil {
			return zero, q.errorf(err)
		}
		v, err := op(q)
		if !errors.Is(err, errSlotMoved) && !q.forcedAway(ctx, err) {
			return v, err
		}
	}
}
