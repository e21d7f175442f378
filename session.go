package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/internal/wire"
)

const (
	defaultTTL = 10 * time.Second
	maxTTL     = 24 * time.Hour
	maxRevoke  = 5 * time.Second
)

// Session is one etcd lease kept alive by etcdlock; every lock a session
// takes is attached to its lease, so all of them are freed when the session
// is closed or lost. A Session is safe for concurrent use.
//
// A session is lost (Done is closed, Err returns ErrSessionExpired) when the
// server refuses a keepalive or reports the lease gone, when a write finds the
// lease gone, when its client is closed, or when its validity clock runs out:
// no keepalive was acknowledged for a whole TTL, counted from the send time of
// the last acknowledged one, minus a margin. A lost session stays lost: it
// never sends another keepalive, so it cannot revive keys it declared lost.
type Session struct {
	// Set by newSession, then read-only.
	cli        *clientv3.Client
	lease      clientv3.LeaseID
	ttl        time.Duration
	identity   string
	log        *zap.Logger
	grantLog   *zap.Logger // log, for lines logged through a helper (one more caller frame)
	opts       sessionOptions
	keeper     *wire.Keeper
	tune       *tuning
	book       *keyBook // its keys and requests (book.go)
	testHandle          // the tests' way to its knobs (testhooks.go)
	// router is set on a routed session (newRoutedSession, the seam for
	// package shard), which holds no lease: its acquisitions go to its
	// sessions on each cluster (route.go). nil on every other session.
	router *routing
	// stamps is set on a routed session's session of one cluster: the
	// stamps of that cluster's slots (slotguard.go).
	stamps *clusterStamps
	// member is set on a plain session (NewSession) of a member cluster
	// of a sharded deployment: every acquisition refuses (member.go).
	member bool
	// root is the caller's session that a Run opened this one to replace
	// (set by Run before first use); nil otherwise (see origin).
	root   *Session
	ctx    context.Context // canceled with the loss cause, by expire
	cancel context.CancelCauseFunc
	// revoking bounds the revoke of a lost session's lease (see expire):
	// it ends when the client closes, or stopRevoking is called (by Close).
	revoking     context.Context
	stopRevoking context.CancelFunc
	closing      chan struct{}  // closed when Close is first called (Election.Run watches it)
	wg           sync.WaitGroup // every goroutine the session and its grants start (goRun)

	mu sync.Mutex // guards the fields below
	// The lifecycle: err is set once, by expire; detached once, by detach.
	err           error
	detached      bool
	leaseGoneSeen bool // the server said the lease is gone (no revoke needed)
	// The validity clock (validity.go), written by the keeper's sends and
	// acknowledgements.
	validMono time.Time   // with a monotonic reading
	validWall time.Time   // the same instant, wall clock only
	sent      []time.Time // send times of unacknowledged keepalives
	expiry    *time.Timer // fires at validMono

	// Written by the first Close.
	closeOnce sync.Once
	closeErr  error
}

// NewSession grants a lease of the configured TTL on cli and keeps it alive
// until Close or loss. ctx bounds only the lease grant and one read before
// it (whether cli's cluster is a member of a sharded deployment). It
// returns an error wrapping ErrInvalidArgument for a nil client or an
// invalid option, and the read's or the grant's error (wrapping ctx's)
// when it fails; nothing is left behind then. Closing cli ends its
// sessions with ErrSessionExpired.
//
// NewSession waits for etcd for as long as ctx allows: the etcd client
// does not fail on an endpoint it cannot reach but keeps trying it, logging
// retry warnings through cli's logger, so with a wrong endpoint or a
// cluster that is down NewSession waits until ctx ends. Pass a ctx with a
// deadline (context.WithTimeout) to get an error rather than a long wait.
//
// On a cluster of a sharded deployment use shard.NewSession instead: a
// plain session's writes do not compare the slot's stamp, so a move of the
// slot could not freeze them, and a name could be held on two clusters.
// So NewSession reads whether the cluster is a member: whether it holds
// etcdlock-shards/generation (every cluster shard.Create records, and one
// of shard.Shards.AddCluster once a slot moved to it). On a member the session opens,
// but every acquisition on it (Lock, TryLock, RLock, Acquire, Campaign,
// LockAll, Run, RunOnce and their Try forms) returns an error wrapping
// ErrInvalidArgument that says to use shard.NewSession, and writes
// nothing; reads (Describe, Leader, Observe) work. A user whom etcd does
// not let read etcdlock-shards/ is taken for one on a cluster that is not
// sharded.
func NewSession(ctx context.Context, cli *clientv3.Client, opts ...SessionOption) (*Session, error) {
	var missing error
	if cli == nil {
		missing = fmt.Errorf("%w: nil client", ErrInvalidArgument)
	}
	o, err := parseSessionOptions(opts, missing)
	if err != nil {
		return nil, err
	}
	member, err := shardMember(ctx, cli, o.logger)
	if err != nil {
		return nil, newError("new session", "", err)
	}
	s, err := newSession(ctx, cli, o)
	if err != nil {
		return nil, err
	}
	s.member = member
	return s, nil
}

// parseSessionOptions applies opts to the defaults and checks them; missing
// is the caller's own argument error, if any, reported after a bad option.
func parseSessionOptions(opts []SessionOption, missing error) (sessionOptions, error) {
	o := sessionOptions{ttl: defaultTTL, pinning: true, logger: zap.NewNop(), observer: NopObserver{}}
	for _, opt := range opts {
		if opt == nil {
			o.fail(fmt.Errorf("%w: nil option", ErrInvalidArgument))
			continue
		}
		opt(&o)
	}
	if missing != nil {
		o.fail(missing)
	}
	if o.renew > o.ttl/2 {
		o.fail(fmt.Errorf("%w: renewal interval %v must be at most half the TTL %v", ErrInvalidArgument, o.renew, o.ttl))
	}
	if o.err != nil {
		return o, newError("new session", "", o.err)
	}
	if o.identity == "" {
		o.identity = defaultIdentity()
	}
	return o, nil
}

func newSession(ctx context.Context, cli *clientv3.Client, o sessionOptions) (*Session, error) {
	if err := cli.Ctx().Err(); err != nil {
		return nil, newError("new session", "", fmt.Errorf("client closed: %w", ErrSessionExpired))
	}
	secs := int64((o.ttl + time.Second - 1) / time.Second)
	g, err := grantLease(ctx, cli, secs)
	if err != nil {
		return nil, newError("new session", "", fmt.Errorf("grant lease: %w", ctxErr(ctx, err)))
	}
	ttl, sentAt := g.ttl, g.sentAt
	s := &Session{
		cli:      cli,
		lease:    g.id,
		ttl:      ttl,
		identity: o.identity,
		opts:     o,
		tune:     o.tune,
		log:      o.logger.With(zap.String("lease", fmt.Sprintf("%x", int64(g.id))), zap.String("identity", o.identity)),
	}
	if s.tune == nil {
		s.tune = defaultTuning()
	}
	s.grantLog = s.log.WithOptions(zap.AddCallerSkip(1))
	s.book = newKeyBook(s)
	s.testHandle = newTestHandle(s)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.revoking, s.stopRevoking = context.WithCancel(cli.Ctx())
	s.closing = make(chan struct{})
	valid := sentAt.Add(ttl - s.margin())
	s.validMono, s.validWall = valid, valid.Round(0)
	giveUp := func(reason string) (*Session, error) {
		s.expire(ErrSessionExpired, reason)
		_ = s.Close() // revokes (best effort) and waits for the session's goroutines
		return nil, newError("new session", "", fmt.Errorf("%s: %w", reason, ErrSessionExpired))
	}
	s.keeper = wire.AcquireKeeper(cli, o.pinning, !o.noBatching, o.logger)
	s.mu.Lock()
	s.expiry = time.AfterFunc(time.Until(valid), s.checkExpiry)
	s.mu.Unlock()
	if !time.Now().Before(valid) {
		return giveUp(ReasonSlowGrant)
	}
	if !s.keeper.Add(keptSession{s}, sentAt.Add(s.renewEvery())) {
		return giveUp(ReasonClientClosed)
	}
	if s.Err() != nil {
		return giveUp(ReasonValidityClock)
	}
	s.log.Debug("session started", zap.Duration("ttl", ttl))
	return s, nil
}

func (s *Session) observer() Observer { return s.opts.observer }

func (s *Session) revokeBound() time.Duration { return min(s.ttl, maxRevoke) }

// value returns the stored form of the value of a key named sk, granted at
// granted (zero: before its grant, or at its enqueue; see encodeValue).
func (s *Session) value(sk slotKey, granted time.Time) string {
	id := s.identity
	if sk.identity != "" {
		id = sk.identity
	}
	return encodeValue(id, sk.value, sk.at, granted, s.opts.lockDelay, sk.gen)
}

// Client returns the client the session was made with.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Lease returns the session's etcd lease.
func (s *Session) Lease() clientv3.LeaseID { return s.lease }

// Identity returns the identity stored with the session's keys.
func (s *Session) Identity() string { return s.identity }

// TTL returns the TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done returns a channel that is closed once the session is lost or closed.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the session is live; then ErrSessionExpired (lost)
// or ErrSessionClosed (Close was called first).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// expire ends the session with cause (ErrSessionExpired or ErrSessionClosed)
// unless it already ended. It never blocks on the network.
func (s *Session) expire(cause error, reason string) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = cause
	if s.expiry != nil {
		s.expiry.Stop()
	}
	// A session lost by its own clock may still have a live lease (and a
	// keepalive may have slipped out as it was lost): revoke it, so that
	// its keys do not outlive the loss. Nothing else would end the lease
	// soon: each new etcd leader re-arms every lease for a whole TTL.
	revoke := cause == ErrSessionExpired && !s.leaseGoneSeen && s.cli.Ctx().Err() == nil
	if revoke {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	defer s.book.end()
	if revoke {
		go func() {
			defer s.wg.Done()
			// Retried until the server answers: the path to etcd that lost
			// the session is likely broken, others may not be.
			if err := s.revokeLease(s.revoking); err != nil {
				s.log.Warn("cannot revoke the lost session's lease; its keys go when it expires", zap.Error(err))
			}
		}()
	}
	s.detach()
	if cause == ErrSessionClosed {
		s.cancel(errClosedCause)
	} else {
		s.cancel(cause)
	}
	if cause == ErrSessionExpired {
		s.log.Warn("session lost", zap.String("reason", reason))
	} else {
		s.log.Debug("session closed")
	}
	s.observer().SessionEnded(SessionEvent{Lease: s.lease, Identity: s.identity, Reason: reason, Err: cause})
}

// errClosedCause is the cause of the session's context (and so of every
// grant's and waiter's) after Close: the lease is revoked, so it matches both
// ErrSessionClosed and ErrSessionExpired.
var errClosedCause error = closedCause{}

type closedCause struct{}

func (closedCause) Error() string { return ErrSessionClosed.Error() }
func (closedCause) Is(target error) bool {
	return target == ErrSessionClosed || target == ErrSessionExpired
}

// markLeaseGone records that the server reported the lease gone, and ends
// the session.
func (s *Session) markLeaseGone(reason string) {
	s.mu.Lock()
	s.leaseGoneSeen = true
	s.mu.Unlock()
	s.expire(ErrSessionExpired, reason)
}

// detach removes the session from its keeper, once.
func (s *Session) detach() {
	s.mu.Lock()
	done := s.detached
	s.detached = true
	s.mu.Unlock()
	if !done {
		s.keeper.Remove(keptSession{s})
	}
}

// leaseGone asks the server whether the session's lease still exists; it is
// how a deleted key's cause is told apart (ErrSessionExpired vs ErrLockLost).
// A gone lease ends the session.
func (s *Session) leaseGone(ctx context.Context) (bool, error) {
	if err := s.Err(); err != nil {
		return true, nil
	}
	resp, err := s.cli.TimeToLive(ctx, s.lease)
	if err != nil {
		if etcdx.IsLeaseNotFound(err) {
			s.markLeaseGone(ReasonLeaseGone)
			return true, nil
		}
		return false, err
	}
	if resp.TTL <= 0 {
		s.markLeaseGone(ReasonLeaseGone)
		return true, nil
	}
	return false, nil
}

// bound returns a context that ends when ctx ends or the session ends (then
// with the session's cause), and the function that releases it.
func (s *Session) bound(ctx context.Context) (context.Context, func()) {
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	return c, func() {
		stop()
		cancel(nil)
	}
}

// cause maps err, the error of a call made on a bound(ctx) context, to the
// session's cause when the session, not ctx, ended the call.
func (s *Session) cause(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && s.ctx.Err() != nil {
		return context.Cause(s.ctx)
	}
	return err
}

// goRun starts f in a goroutine owned by the session (Close waits for it);
// false, without starting it, once the session is over.
func (s *Session) goRun(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// Close stops the keepalives, cancels every grant's context (cause
// ErrSessionClosed unless the session was lost before), deletes the keys of
// its grants and waits as Unlock does (guarded, before the revoke, so a
// watcher sees them released, not expired; at most min(TTL, 5s)), and
// revokes the lease, which frees whatever is left; the revoke is retried for
// at most min(TTL, 5s). It waits for every goroutine of the session. It
// returns nil, or the revoke's error if the lease may still be alive (its
// keys then free within the TTL). A session lost before had its revoke
// started at the loss: Close waits for it, again for at most min(TTL, 5s),
// and returns nil (a revoke that does not finish is logged). Later calls
// return the first call's result.
func (s *Session) Close() error {
	if s.router != nil {
		s.closeOnce.Do(func() { s.closeErr = s.closeRouted() })
		return s.closeErr
	}
	s.closeOnce.Do(func() {
		close(s.closing)
		wasLive := s.Err() == nil
		s.expire(ErrSessionClosed, ReasonClosed)
		s.mu.Lock()
		gone := s.leaseGoneSeen
		s.mu.Unlock()
		if wasLive && !gone && s.cli.Ctx().Err() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.revokeBound())
			s.book.releaseAll(ctx)
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), s.revokeBound())
			err := s.revokeLease(ctx)
			cancel()
			if err != nil {
				s.closeErr = newError("close session", "", fmt.Errorf("revoke lease %x: %w", int64(s.lease), err))
			}
		}
		// A lost session's revoke (see expire) gets as long as a live
		// session's.
		stop := time.AfterFunc(s.revokeBound(), s.stopRevoking)
		s.wg.Wait()
		stop.Stop()
		s.stopRevoking()
		s.keeper.WaitStopped()
	})
	return s.closeErr
}

// closeReleases bounds how many keys Close deletes at once.
const closeReleases = 256

// ctxErr prefers ctx's error (with its cause) when ctx has ended.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("%w (%w)", ctx.Err(), cause)
	}
	return ctx.Err()
}
