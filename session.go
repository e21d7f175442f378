package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	defaultTTL = 10 * time.Second
	maxTTL     = 24 * time.Hour
	maxRevoke  = 5 * time.Second
)

// sessionOptions is the configuration a SessionOption edits.
type sessionOptions struct {
	ttl      time.Duration
	identity string
	logger   *zap.Logger
	pinning  bool
	observer Observer
	err      error // the first invalid option
}

func (o *sessionOptions) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// SessionOption configures NewSession. An invalid option makes NewSession
// return an error wrapping ErrInvalidArgument; no option is silently ignored.
type SessionOption func(*sessionOptions)

// WithTTL sets the lease TTL (default 10s). It is rounded up to whole seconds,
// etcd's unit. A TTL <= 0 or over 24h makes NewSession fail with
// ErrInvalidArgument. The server may grant a longer TTL (its minimum is about
// 1.5 election timeouts); Session.TTL reports what it granted.
func WithTTL(ttl time.Duration) SessionOption {
	return func(o *sessionOptions) {
		if ttl <= 0 || ttl > maxTTL {
			o.fail(fmt.Errorf("%w: TTL %v must be > 0 and <= %v", ErrInvalidArgument, ttl, maxTTL))
			return
		}
		o.ttl = ttl
	}
}

// WithIdentity sets the identity stored with every key of the session (shown
// by Describe and the CLI); default "hostname/pid". An empty identity makes
// NewSession fail with ErrInvalidArgument.
func WithIdentity(id string) SessionOption {
	return func(o *sessionOptions) {
		if id == "" {
			o.fail(fmt.Errorf("%w: empty identity", ErrInvalidArgument))
			return
		}
		o.identity = id
	}
}

// WithLogger sets the session's logger (default zap.NewNop()). A nil logger
// makes NewSession fail with ErrInvalidArgument.
func WithLogger(l *zap.Logger) SessionOption {
	return func(o *sessionOptions) {
		if l == nil {
			o.fail(fmt.Errorf("%w: nil logger", ErrInvalidArgument))
			return
		}
		o.logger = l
	}
}

// WithLeaderPinning chooses where keepalives go (default true): to the etcd
// leader's endpoint over one stream per client, shared by all of that
// client's sessions. Only the leader renews leases; a follower forwards every
// keepalive to it as a separate peer request, which loses leases under load
// (DESIGN.md). While pinned, the queue's writes (enqueue, release), its
// waiters' predecessor watches and hand-off reads use that connection too,
// saving a follower's forwarding hop, unless cli.KV or cli.Watcher is wrapped
// (a namespace), which they must go through. With false, keepalives and every
// request use the client's balanced connection.
func WithLeaderPinning(on bool) SessionOption {
	return func(o *sessionOptions) { o.pinning = on }
}

func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

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
	cli      *clientv3.Client
	lease    clientv3.LeaseID
	ttl      time.Duration
	identity string
	noValue  string // encodeValue(identity, ""), the value of most keys
	log      *zap.Logger
	grantLog *zap.Logger // log, for lines logged through a helper (one more caller frame)
	opts     sessionOptions
	keeper   *keeper

	ctx    context.Context // canceled with the loss cause
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	err       error
	validMono time.Time // with a monotonic reading
	validWall time.Time // the same instant, wall clock only
	sent      []time.Time
	expiry    *time.Timer
	detached  bool
	// leaseGoneSeen: the server said the lease is gone (no revoke needed)
	leaseGoneSeen bool
	reapQ         []reapItem
	reapParked    []reapItem // keys the reaper may not delete: done at the session's end
	reaping       bool       // a reapLoop runs
	slots         map[string][]bool
	barriers      map[string]int64 // queue dir -> the barrier's mod revision (barrier.go)
	wg            sync.WaitGroup   // every goroutine the session and its grants start

	closeOnce sync.Once
	closeErr  error
	closing   chan struct{} // closed when Close is first called (Election.Run watches it)
}

// NewSession grants a lease of the configured TTL on cli and keeps it alive
// until Close or loss. ctx bounds only the lease grant. It returns an error
// wrapping ErrInvalidArgument for a nil client or an invalid option, and the
// grant's error (wrapping ctx's) when the grant fails; nothing is left behind
// then. Closing cli ends its sessions with ErrSessionExpired.
func NewSession(ctx context.Context, cli *clientv3.Client, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: defaultTTL, pinning: true, logger: zap.NewNop(), observer: NopObserver{}}
	for _, opt := range opts {
		if opt == nil {
			o.fail(fmt.Errorf("%w: nil option", ErrInvalidArgument))
			continue
		}
		opt(&o)
	}
	if cli == nil {
		o.fail(fmt.Errorf("%w: nil client", ErrInvalidArgument))
	}
	if o.err != nil {
		return nil, fmt.Errorf("etcdlock: new session: %w", o.err)
	}
	if o.identity == "" {
		o.identity = defaultIdentity()
	}
	return newSession(ctx, cli, o)
}

func newSession(ctx context.Context, cli *clientv3.Client, o sessionOptions) (*Session, error) {
	if err := cli.Ctx().Err(); err != nil {
		return nil, fmt.Errorf("etcdlock: new session: client closed: %w", ErrSessionExpired)
	}
	secs := int64((o.ttl + time.Second - 1) / time.Second)
	sentAt := time.Now()
	resp, err := cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: new session: grant lease: %w", ctxErr(ctx, err))
	}
	ttl := time.Duration(resp.TTL) * time.Second
	s := &Session{
		cli:      cli,
		lease:    resp.ID,
		ttl:      ttl,
		identity: o.identity,
		noValue:  encodeValue(o.identity, ""),
		opts:     o,
		log:      o.logger.With(zap.String("lease", fmt.Sprintf("%x", int64(resp.ID))), zap.String("identity", o.identity)),
	}
	s.grantLog = s.log.WithOptions(zap.AddCallerSkip(1))
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.closing = make(chan struct{})
	valid := sentAt.Add(ttl - s.margin())
	s.validMono, s.validWall = valid, valid.Round(0)
	giveUp := func(reason string) (*Session, error) {
		s.expire(ErrSessionExpired, reason)
		_ = s.Close() // revokes (best effort) and waits for the session's goroutines
		return nil, fmt.Errorf("etcdlock: new session: %s: %w", reason, ErrSessionExpired)
	}
	s.keeper = acquireKeeper(cli, o.pinning, o.logger)
	s.mu.Lock()
	s.expiry = time.AfterFunc(time.Until(valid), s.checkExpiry)
	s.mu.Unlock()
	if !time.Now().Before(valid) {
		return giveUp(ReasonSlowGrant)
	}
	if !s.keeper.add(s, sentAt.Add(ttl/3)) {
		return giveUp(ReasonClientClosed)
	}
	if s.Err() != nil {
		return giveUp(ReasonValidityClock)
	}
	s.log.Debug("session started", zap.Duration("ttl", ttl))
	return s, nil
}

func (s *Session) observer() Observer { return s.opts.observer }

// margin is subtracted from every validity deadline: TTL/100 + 50ms.
func (s *Session) margin() time.Duration { return s.ttl/100 + 50*time.Millisecond }

func (s *Session) revokeBound() time.Duration { return min(s.ttl, maxRevoke) }

// attempt prepares one attempt of a request the queue retries: ctx bounded
// by attemptTimeout, the KV to send it on, and the func to call when the attempt is done. The KV is the
// leader's connection while the keeper lends one (keeper.borrowLeader), else
// the client's balanced one; a retry (an earlier attempt failed) always uses
// the balanced one, since the leader's connection may lead to a dead or
// unreachable member until the keeper notices.
func (s *Session) attempt(ctx context.Context, retry bool) (context.Context, clientv3.KV, func()) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	if !retry {
		if lc := s.keeper.borrowLeader(); lc != nil {
			return actx, lc.kv, func() { lc.giveBack(); cancel() }
		}
	}
	return actx, s.cli, cancel
}

// watcher returns the Watcher for a waiter's predecessor watches: the
// leader connection's while the keeper has one (watches are not borrowed:
// they end when the keeper retires the connection), else the client's.
func (s *Session) watcher() clientv3.Watcher {
	if lc := s.keeper.leader.Load(); lc != nil {
		return lc.watcher
	}
	return s.cli
}

// value returns the stored form of a key's value (see encodeValue).
func (s *Session) value(v string) string {
	if v == "" {
		return s.noValue
	}
	return encodeValue(s.identity, v)
}

// Client returns the client the session was made with.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Lease returns the session's etcd lease.
func (s *Session) Lease() clientv3.LeaseID { return s.lease }

// Identity returns the identity stored with the session's keys.
func (s *Session) Identity() string { return s.identity }

// TTL returns the TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// ValidUntil returns the time until which the lease is certainly alive on the
// server, as far as this process can know: the send time of the last
// acknowledged keepalive plus the TTL, minus a margin of TTL/100 + 50ms. The
// session is lost at that moment unless a later keepalive is acknowledged.
func (s *Session) ValidUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validMono
}

// Done returns a channel that is closed once the session is lost or closed.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the session is live; then ErrSessionExpired (lost)
// or ErrSessionClosed (Close was called first).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// live returns nil while the session is live and its validity clock (both
// monotonic and wall) is ahead; else the error that ended it.
func (s *Session) live() error {
	s.mu.Lock()
	err := s.err
	now := time.Now()
	ran := !now.Before(s.validMono) || !now.Round(0).Before(s.validWall)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if ran {
		s.expire(ErrSessionExpired, ReasonValidityClock)
		return ErrSessionExpired
	}
	return nil
}

// checkExpiry ends the session if its validity clock ran out.
func (s *Session) checkExpiry() {
	_ = s.live()
}

// onAck records a keepalive reply with the TTL the server reported.
func (s *Session) onAck(ttl int64) (next time.Time, ok bool) {
	s.mu.Lock()
	if s.err != nil || len(s.sent) == 0 {
		s.mu.Unlock()
		return time.Time{}, false
	}
	sentAt := s.sent[0]
	s.sent = s.sent[1:]
	if ttl <= 0 {
		s.mu.Unlock()
		s.markLeaseGone(ReasonLeaseGone)
		return time.Time{}, false
	}
	valid := sentAt.Add(time.Duration(ttl)*time.Second - s.margin())
	if valid.After(s.validMono) {
		s.validMono, s.validWall = valid, valid.Round(0)
		s.expiry.Reset(time.Until(valid))
	}
	more := len(s.sent) > 0
	headroom := time.Until(s.validMono)
	s.mu.Unlock()
	s.observer().KeepaliveAcked(time.Since(sentAt), headroom)
	if more {
		return time.Time{}, false
	}
	return sentAt.Add(s.ttl / 3), true
}

// recordSend notes that a keepalive is about to be sent; false if the session
// is over and must not send again.
func (s *Session) recordSend(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || !now.Before(s.validMono) || !now.Round(0).Before(s.validWall) {
		return false // lost, or about to be: never renew what was declared lost
	}
	s.sent = append(s.sent, now)
	return true
}

// resetInflight forgets unanswered keepalives (their stream is gone).
func (s *Session) resetInflight() {
	s.mu.Lock()
	s.sent = nil
	s.mu.Unlock()
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
	// keepalive may have slipped out as it was lost): revoke it, best
	// effort, so its keys do not outlive the loss by another TTL.
	revoke := cause == ErrSessionExpired && !s.leaseGoneSeen && s.cli.Ctx().Err() == nil
	if revoke {
		s.wg.Add(1)
	}
	parked := s.reapParked // their keys go with the lease
	s.reapParked = nil
	s.mu.Unlock()
	defer func() {
		for _, it := range parked {
			if it.done != nil {
				it.done()
			}
		}
	}()
	if revoke {
		go func() {
			defer s.wg.Done()
			// Best effort and short: the path to etcd is likely broken.
			ctx, cancel := context.WithTimeout(context.Background(), min(s.revokeBound(), time.Second))
			defer cancel()
			_, _ = s.cli.Revoke(ctx, s.lease)
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

// revoke revokes the lease, bounded by min(TTL, 5s). A lease the server no
// longer knows counts as revoked.
func (s *Session) revoke() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.revokeBound())
	defer cancel()
	_, err := s.cli.Revoke(ctx, s.lease)
	if err != nil && !isLeaseNotFound(err) {
		return err
	}
	return nil
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
		s.keeper.remove(s)
	}
}

// failed inspects an error of a data-path call made for this session: a
// lease that the server no longer knows ends the session at once (callers
// would otherwise retry on a "live" session until the validity clock runs
// out). It returns ErrSessionExpired in that case, else nil.
func (s *Session) failed(err error) error {
	if isLeaseNotFound(err) {
		s.markLeaseGone(ReasonLeaseGone)
		return ErrSessionExpired
	}
	return nil
}

// permanent reports an error that retrying cannot fix: the user may not
// touch these keys (PermissionDenied), the request is malformed or the
// credentials are wrong (InvalidArgument), or the auth token could not be
// renewed (Unauthenticated; clientv3 already retried with a fresh one).
func permanent(err error) bool {
	code := status.Code(err) // finds a gRPC status anywhere in the chain
	if ee := (rpctypes.EtcdError{}); errors.As(err, &ee) {
		code = ee.Code() // clientv3's form of the same status
	}
	switch code {
	case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated:
		return true
	}
	return false
}

func isLeaseNotFound(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrLeaseNotFound) ||
		strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error()))
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
		if isLeaseNotFound(err) {
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

// takeSlot returns the lowest slot of scope (a queue and kind) that none of
// the session's keys there uses, and marks it used. A session's key in a
// queue is "<lease>-<slot>": reusing key names keeps etcd's index of deleted
// keys (walked by every read of the queue until compaction) from growing
// with every acquisition.
func (s *Session) takeSlot(scope string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = map[string][]bool{}
	}
	busy := s.slots[scope]
	for i, b := range busy {
		if !b {
			busy[i] = true
			return i
		}
	}
	s.slots[scope] = append(busy, true)
	return len(busy)
}

// freeSlot makes slot of scope reusable: its key is certainly gone and no
// write of unknown outcome can re-create it.
func (s *Session) freeSlot(scope string, slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := s.slots[scope]
	if slot < len(busy) {
		busy[slot] = false
	}
	for len(busy) > 0 && !busy[len(busy)-1] {
		busy = busy[:len(busy)-1]
	}
	if len(busy) == 0 {
		delete(s.slots, scope)
	} else {
		s.slots[scope] = busy
	}
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
// ErrSessionClosed unless the session was lost before) and revokes the lease,
// which frees every grant of the session at once; the revoke is bounded by
// min(TTL, 5s). It waits for every goroutine of the session. It returns nil,
// or the revoke's error if the lease may still be alive (its keys then free
// within the TTL). Later calls return the first call's result.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		wasLive := s.Err() == nil
		s.expire(ErrSessionClosed, ReasonClosed)
		s.mu.Lock()
		gone := s.leaseGoneSeen
		s.mu.Unlock()
		if wasLive && !gone && s.cli.Ctx().Err() == nil {
			if err := s.revoke(); err != nil {
				s.closeErr = fmt.Errorf("etcdlock: close session: revoke lease %x: %w", int64(s.lease), err)
			}
		}
		s.wg.Wait()
		s.keeper.waitStopped()
	})
	return s.closeErr
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

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
