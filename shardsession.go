package etcdlock

// This file holds the sharded session: a Session whose names live on
// several clusters. It holds no lease of its own; on first use of a cluster
// it opens a session there (a child) with its own options, and routes each
// acquisition to the child of the cluster that owns the name's slot. It
// also holds the check that keeps a plain session from acquiring on a
// member cluster (shardMember, route).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// shardSet is a sharded session's routing state.
type shardSet struct {
	r *Shards

	mu       sync.Mutex
	children map[string]*shardChild // by cluster id
	retired  []*Session             // lost children, closed by Close
}

// shardChild is the session on one cluster; mu serialises its opening.
type shardChild struct {
	mu sync.Mutex
	s  *Session
}

// NewShardedSession returns a session whose names live on the clusters of
// r: each acquisition goes to the cluster that owns the name's slot, on a
// session (one lease) of that cluster opened on first use, with opts. The
// recipes (Mutex, RWMutex, Semaphore, Election, RunOnce, LockAll of names
// on one cluster) work on it as on any session, and tokens carry the
// cluster's generation (see Token.Generation).
//
// A grant's loss is per cluster: when one cluster's session is lost, only
// its grants are, and the next acquisition there opens a new one. So the
// sharded session itself is never lost: Done and Err report Close only.
// Lease returns 0 and Client the root's client. ValidUntil is the earliest
// of its live cluster sessions'. Close closes every cluster session. ctx
// bounds nothing past this call (cluster sessions are opened later, under
// the acquisition's ctx). It returns an error wrapping ErrInvalidArgument
// for a nil r or an invalid option.
func NewShardedSession(ctx context.Context, r *Shards, opts ...SessionOption) (*Session, error) {
	var missing error
	if r == nil {
		missing = fmt.Errorf("%w: nil shards", ErrInvalidArgument)
	}
	o, err := parseSessionOptions(opts, missing)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, newError("new session", "", ctxErr(ctx, err))
	}
	s := &Session{cli: r.root, ttl: o.ttl, identity: o.identity, opts: o, tune: defaultTuning(),
		log: o.logger.With(zap.String("identity", o.identity)), closing: make(chan struct{}),
		shards: &shardSet{r: r, children: map[string]*shardChild{}}}
	s.grantLog = s.log
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.revoking, s.stopRevoking = context.WithCancel(context.Background())
	return s, nil
}

// route returns the session to acquire name on: s itself unless s is
// sharded; else the session on the cluster that owns name's slot, once the
// slot's stamp there is active. While the slot is moving it waits for the
// move to finish (until ctx ends), unless try: then it returns ErrLocked.
// Every acquisition goes through here: a plain session of a member cluster
// is refused here (errShardMember).
func (s *Session) route(ctx context.Context, name string, try bool) (*Session, error) {
	if s.shards == nil {
		if s.member {
			return nil, errShardMember
		}
		return s, nil
	}
	slot := SlotOf(name)
	for {
		if err := s.wanted(ctx); err != nil {
			return nil, err
		}
		cs, changed, err := s.routeRead(ctx, name)
		if err != nil {
			return nil, err
		}
		id := cs.shard.id
		st, err := cs.shard.stamp(ctx, cs, slot)
		if err != nil {
			return nil, s.cause(ctx, fmt.Errorf("read the stamp of slot %d on %s: %w", slot, id, ctxErr(ctx, err)))
		}
		if st.active() {
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

// shardMember reports whether cli's cluster is a member of a sharded
// deployment: whether it holds the generation key (one count-only read).
// The read is serializable, so that a member cut off from its leader still
// answers it (the grant then goes on to another member): the key is
// created before the cluster holds any slot and never deleted, so only a
// member that lags behind the cluster's first slot could miss it. A user
// who may not read it is taken for one on a cluster that is not sharded
// (logged at debug); a closed client is left to newSession.
func shardMember(ctx context.Context, cli *clientv3.Client, log *zap.Logger) (bool, error) {
	if cli.Ctx().Err() != nil {
		return false, nil
	}
	resp, err := cli.Get(ctx, generationKey, clientv3.WithCountOnly(), clientv3.WithSerializable())
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		log.Debug("new session: may not read "+generationKey+"; taking the cluster for one that is not sharded", zap.Error(err))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", generationKey, ctxErr(ctx, err))
	}
	return resp.Count > 0, nil
}

// errShardMember refuses an acquisition of a plain session on a member
// cluster of a sharded deployment (see NewSession).
var errShardMember = fmt.Errorf("%w: the cluster is part of a sharded deployment (it holds %s): "+
	"open the session with NewShardedSession", ErrInvalidArgument, generationKey)

// child returns the live session of s on cluster id, opening it (again,
// after a loss) as needed.
func (set *shardSet) child(ctx context.Context, s *Session, id string) (*Session, error) {
	set.mu.Lock()
	c := set.children[id]
	if c == nil {
		c = &shardChild{}
		set.children[id] = c
	}
	set.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s != nil && c.s.Err() == nil {
		return c.s, nil
	}
	cli, err := set.r.Client(ctx, id)
	if err != nil {
		return nil, err
	}
	o := s.opts
	o.tune = s.tune // one set of knobs (tests' hooks) for all its clusters
	cs, err := newSession(ctx, cli, o)
	if err != nil {
		return nil, err
	}
	cs.root = s
	cs.shard = &clusterSlots{id: id, r: set.r}
	set.mu.Lock()
	defer set.mu.Unlock()
	if s.Err() != nil { // closed meanwhile: Close did not see cs
		_ = cs.Close()
		return nil, ErrSessionClosed
	}
	if c.s != nil {
		set.retired = append(set.retired, c.s)
	}
	c.s = cs
	return cs, nil
}

// closeSharded is Close of a sharded session: it ends it (ErrSessionClosed)
// and closes every cluster session, in parallel; it returns their errors
// joined.
func (s *Session) closeSharded() error {
	s.mu.Lock()
	s.err = ErrSessionClosed
	s.mu.Unlock()
	close(s.closing)
	s.cancel(errClosedCause)
	// child installs a session only while s.err is nil, under set.mu: every
	// one installed is seen below.
	set := s.shards
	set.mu.Lock()
	all := append([]*Session(nil), set.retired...)
	set.mu.Unlock()
	all = append(all, set.live()...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, cs := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cs.Close()
		}()
	}
	wg.Wait()
	s.stopRevoking()
	return errors.Join(errs...)
}

// shardedValidUntil is ValidUntil of a sharded session: the earliest of its
// live cluster sessions' (far ahead while it has none).
func (s *Session) shardedValidUntil() time.Time {
	until := time.Now().Add(maxTTL)
	for _, cs := range s.shards.live() {
		if v := cs.ValidUntil(); cs.Err() == nil && v.Before(until) {
			until = v
		}
	}
	return until
}

// live returns the current session of each cluster.
func (set *shardSet) live() []*Session {
	set.mu.Lock()
	cs := make([]*shardChild, 0, len(set.children))
	for _, c := range set.children {
		cs = append(cs, c)
	}
	set.mu.Unlock()
	var out []*Session
	for _, c := range cs {
		c.mu.Lock()
		if c.s != nil {
			out = append(out, c.s)
		}
		c.mu.Unlock()
	}
	return out
}

// Sharded reports whether s was made by NewShardedSession.
func (s *Session) Sharded() bool { return s.shards != nil }

// routed runs op on the queue of name (of kind tag, for verb) on the
// session that holds name: s itself, or on a sharded session the session
// of the cluster that owns name's slot (route). When the slot moves away
// while op writes (errSlotMoved), it routes again and runs op again: a
// waiter that arrives during a move waits for it. try makes route refuse a
// moving slot (ErrLocked) instead of waiting.
func routed[T any](ctx context.Context, s *Session, name, tag, verb string, try bool, op func(queue) (T, error)) (T, error) {
	var zero T
	for {
		q, err := newQueue(s, name, tag, verb)
		if err != nil {
			return zero, err
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

// forcedAway reports whether err, an acquisition's failure on a cluster
// session, is the loss of a waiter's key to a move's ForceAfter: the key
// went (ErrLockLost) and the slot's stamp there is no longer active. The
// acquisition then routes again and waits for the move, as a waiter that
// arrives during it does. A grant is never routed again: op returns no
// error once granted.
func (q queue) forcedAway(ctx context.Context, err error) bool {
	if q.s.shard == nil || !errors.Is(err, ErrLockLost) || ctx.Err() != nil {
		return false
	}
	st, rerr := readStamp(ctx, q.s.cli, SlotOf(q.name))
	if rerr != nil {
		return false
	}
	q.s.shard.learn(SlotOf(q.name), st)
	return !st.active()
}

// routeRead returns the session to read name's queue on: s itself unless s
// is sharded; else the session of the cluster the map gives name's slot now
// (during a move, the source, which holds the name until the map switches),
// and a channel closed when the map changes.
func (s *Session) routeRead(ctx context.Context, name string) (*Session, <-chan struct{}, error) {
	set := s.shards
	if set == nil {
		return s, nil, nil
	}
	m, changed := set.r.snapshot()
	id := m.owner[SlotOf(name)]
	if id == "" {
		return nil, nil, fmt.Errorf("%w: slot %d of the name has no cluster in the slot map", ErrInvalidArgument, SlotOf(name))
	}
	cs, err := set.child(ctx, s, id)
	return cs, changed, err
}
