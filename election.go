package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Election elects one leader among the candidates of a name, in the order
// they campaigned, on the same queue as Mutex. The leader carries a value
// (an address, say) that others read with Leader or Observe. An Election is
// safe for concurrent use; every Campaign call is its own candidacy.
//
// Leadership, like a lock, lives as long as the session's lease: a leader
// paused past its lease may wake believing it still leads. Pass
// Leadership.Token with every write the leader makes and have the resource
// check it (Fence), or make etcd writes conditional on Leadership.Guard.
type Election struct {
	s      *Session
	name   string
	health atomic.Pointer[LeaderHealth]
}

// ReportHealth makes Run record in h when this process acts as leader (while
// its lead function runs), for h's health check. nil stops the reporting.
func (e *Election) ReportHealth(h *LeaderHealth) { e.health.Store(h) }

// LeaderInfo describes the current leader. The zero LeaderInfo means "no
// leader" (Observe).
type LeaderInfo struct {
	Value    string
	Token    Token
	Key      string
	Identity string
	Lease    clientv3.LeaseID
}

// NewElection returns the election called name on session s. It does not talk
// to etcd; an invalid name or a nil session is reported by its methods.
func NewElection(s *Session, name string) *Election { return &Election{s: s, name: name} }

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

func (e *Election) queue(verb string) (queue, error) {
	return newQueue(e.s, e.name, tagElection, verb)
}

// Campaign joins the candidates (first come, first served) and returns once
// this candidacy leads, with value as the leader's value. It never returns a
// Leadership whose key did not exist at the revision that made it leader. It
// returns an error wrapping ctx's error when ctx ends first, ErrSessionExpired
// (or ErrSessionClosed) when the session is lost, ErrLockLost when the
// candidate's key is deleted while it waits, ErrKindMismatch when the name is
// used by another kind of recipe, and ErrInvalidName or ErrInvalidArgument
// for bad input; it leaves no key behind then.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	q, err := e.queue("campaign")
	if err != nil {
		return nil, err
	}
	w, err := q.acquire(ctx, value, exclusive{})
	if err != nil {
		return nil, err
	}
	l := &Leadership{g: Lock{w: w}}
	if !w.sk.uncertain {
		l.mod = w.rev // the enqueue wrote the key then, with its value
	}
	return l, nil
}

// Leader returns the current leader. It returns an error wrapping ErrNoLeader
// when nobody leads, ErrKindMismatch when the name is used by another kind of
// recipe, ErrInvalidName or ErrInvalidArgument for bad input, and the read's
// error otherwise.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	q, err := e.queue("leader")
	if err != nil {
		return LeaderInfo{}, err
	}
	info, _, err := q.leader(ctx, 0)
	if err != nil {
		return LeaderInfo{}, q.errorf(ctxErr(ctx, err))
	}
	if info == (LeaderInfo{}) {
		return LeaderInfo{}, q.errorf(ErrNoLeader)
	}
	return info, nil
}

// leader reads the first candidate of q at rev (0: now, linearizable).
func (q queue) leader(ctx context.Context, rev int64) (LeaderInfo, int64, error) {
	opts := clientv3.WithFirstCreate()
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := q.s.cli.Get(ctx, q.dir, opts...)
	if err != nil {
		return LeaderInfo{}, 0, err
	}
	if len(resp.Kvs) == 0 {
		return LeaderInfo{}, resp.Header.Revision, nil
	}
	kv := resp.Kvs[0]
	if tag := tagOf(q.dir, string(kv.Key)); tag != q.tag {
		kind, _ := kindOfTag(tag)
		return LeaderInfo{}, 0, fmt.Errorf("%w: name is used by a %s", ErrKindMismatch, kind)
	}
	return leaderInfo(kv), resp.Header.Revision, nil
}

func leaderInfo(kv *mvccpb.KeyValue) LeaderInfo {
	v := decodeValue(kv.Value)
	return LeaderInfo{Value: v.Value, Token: Token(kv.CreateRevision), Key: string(kv.Key),
		Identity: v.Identity, Lease: clientv3.LeaseID(kv.Lease)}
}

// Observe returns a channel that receives the current leader at once and
// then every change: a new leader, a proclaimed value, and the zero
// LeaderInfo when nobody leads. The channel holds only the newest value (a
// slow reader skips intermediate states but always gets the latest) and never
// delivers the same value twice in a row. Observe's goroutine re-reads and
// re-watches across compactions, etcd elections and reconnects, logging the
// errors; it closes the channel when ctx ends (at once for an invalid name or
// a nil session) or when the session's client is closed.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	ch := make(chan LeaderInfo, 1)
	q, err := e.queue("observe")
	if err != nil {
		close(ch)
		return ch
	}
	go q.observe(ctx, ch)
	return ch
}

// latest is a one-slot channel writer that keeps only the newest value and
// never delivers the same value twice in a row.
type latest struct {
	ch          chan LeaderInfo
	sent, taken LeaderInfo
	started     bool
}

func (l *latest) publish(v LeaderInfo) {
	select {
	case <-l.ch: // l.sent was not taken: replace it
	default:
		l.taken = l.sent // the reader has it (or nothing was sent yet)
	}
	if l.started && v == l.taken {
		return
	}
	l.started = true
	l.ch <- v
	l.sent = v
}

func (q queue) observe(ctx context.Context, ch chan LeaderInfo) {
	defer close(ch)
	out := latest{ch: ch}
	log := q.s.log.With(zap.String("election", q.name))
	backoff := 50 * time.Millisecond
	retry := func(what string, err error) bool {
		log.Debug("observe: retrying", zap.String("step", what), zap.Error(err))
		if !sleepCtx(ctx, jitter(backoff)) {
			return false
		}
		backoff = min(2*backoff, 2*time.Second)
		return true
	}
	for ctx.Err() == nil && q.s.cli.Ctx().Err() == nil {
		cur, rev, err := q.leader(ctx, 0)
		if err != nil {
			if !retry("read", err) {
				return
			}
			continue
		}
		out.publish(cur)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := q.s.cli.Watch(wctx, q.dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	watch:
		for resp := range wch {
			if resp.Canceled || resp.Err() != nil || resp.CompactRevision != 0 {
				break // re-read and re-watch
			}
			backoff = 50 * time.Millisecond
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				switch {
				case cur.Key == "" && ev.Type == mvccpb.PUT,
					key == cur.Key && ev.Type == mvccpb.DELETE:
					// A first candidate, or the leader left: read who leads now.
					next, _, err := q.leader(wctx, ev.Kv.ModRevision)
					if err != nil {
						break watch
					}
					cur = next
				case key == cur.Key && ev.Type == mvccpb.PUT:
					cur = leaderInfo(ev.Kv) // proclaimed
				default:
					continue
				}
				out.publish(cur)
			}
		}
		cancel()
		if ctx.Err() == nil && !retry("watch", errors.New("watch ended")) {
			return
		}
	}
}

// Leadership is one term of leadership won by Campaign. Its methods are safe
// for concurrent use.
type Leadership struct {
	g Lock // the leader's key is a grant of the election's queue

	pmu sync.Mutex // serialises Proclaim
	// mod is the leader key's mod revision as this process last wrote it
	// (Campaign, Proclaim); 0 when unknown (after a write of unknown outcome).
	mod int64
}

// Token returns the leader key's create revision: a fencing token for what
// the leader writes, larger in every later term.
func (l *Leadership) Token() Token { return l.g.Token() }

// Key returns the leader's etcd key.
func (l *Leadership) Key() string { return l.g.Key() }

// Guard returns a comparison that holds inside an etcd Txn only while this
// term of leadership is current.
func (l *Leadership) Guard() clientv3.Cmp { return l.g.Guard() }

// Context returns a context canceled when leadership is lost or resigned;
// context.Cause tells why (ErrReleased after Resign, ErrSessionExpired,
// ErrSessionClosed, ErrLockLost), as for Lock.Context.
func (l *Leadership) Context() context.Context { return l.g.Context() }

// Proclaim changes the leader's value without a new election. It is guarded
// by the leader key's create revision: it returns an error wrapping
// ErrNotHeld (and the loss cause) and changes nothing when this candidacy no
// longer leads, and ctx's error when ctx ends first.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	w := l.g.w
	l.pmu.Lock()
	defer l.pmu.Unlock()
	for {
		if w.ctx.Err() != nil {
			return w.q.errorf(fmt.Errorf("proclaim: %w: %w", ErrNotHeld, context.Cause(w.ctx)))
		}
		if l.mod == 0 {
			// A Proclaim of unknown outcome may still be applied: learn
			// where the key is; the compare below then refuses that write.
			resp, err := w.q.s.cli.Get(ctx, w.key, clientv3.WithKeysOnly())
			if err != nil {
				return w.q.errorf(fmt.Errorf("proclaim: %w", ctxErr(ctx, err)))
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != w.rev {
				return w.q.errorf(fmt.Errorf("proclaim: %w: %w", ErrNotHeld, w.lost()))
			}
			l.mod = resp.Kvs[0].ModRevision
		}
		// Guarded by the term (create revision) and by the last write of
		// this process (mod revision): a late copy of an earlier Proclaim
		// can never overwrite a later value.
		resp, err := w.q.s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev),
				clientv3.Compare(clientv3.ModRevision(w.key), "=", l.mod)).
			Then(clientv3.OpPut(w.key, w.q.s.value(value), clientv3.WithLease(w.q.s.lease))).
			Commit()
		switch {
		case err != nil && w.q.s.failed(err) != nil:
			return w.q.errorf(fmt.Errorf("proclaim: %w: %w", ErrNotHeld, ErrSessionExpired))
		case err != nil:
			l.mod = 0
			return w.q.errorf(fmt.Errorf("proclaim: %w", ctxErr(ctx, err)))
		case resp.Succeeded:
			l.mod = resp.Header.Revision
			return nil
		}
		l.mod = 0 // changed since (a late write of ours, a loss): look again
	}
}

// Resign gives up leadership, exactly as Lock.Unlock releases a lock:
// Context is canceled with ErrReleased at once and the leader key is deleted
// (guarded by its create revision), so the next candidate leads at once. It
// returns nil if this candidacy led when Resign was first called, on every
// later call too; an error wrapping ErrNotHeld and the cause if leadership
// was lost before; ctx's error when ctx ends first (the session's reaper then
// finishes the delete); an error wrapping ErrNotHeld and ErrSessionExpired
// (or ErrSessionClosed) when the session ends or its client is closed before
// the delete is confirmed. It is safe to retry.
func (l *Leadership) Resign(ctx context.Context) error { return l.g.Unlock(ctx) }

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
// session), ErrInvalidName or ErrKindMismatch, and ErrSessionClosed if the
// caller closes the Session. When the Session is lost, Run opens replacement
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
	// The caller's Close must end Run at once even while it runs on a
	// replacement session (the caller's own one lost before, so its Err
	// stays ErrSessionExpired): watch for Close itself.
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	go func() {
		select {
		case <-e.s.closing:
			stopRun(errCallerClosed)
		case <-ctx.Done():
		}
	}()
	closedByCaller := func() bool { return errors.Is(context.Cause(ctx), errCallerClosed) }
	s := e.s
	var owned *Session
	defer func() {
		if owned != nil {
			_ = owned.Close()
		}
	}()
	log := s.log.With(zap.String("election", e.name))
	backoff := 100 * time.Millisecond
	pause := func() bool {
		ok := sleepCtx(ctx, jitter(backoff))
		backoff = min(2*backoff, 2*time.Second)
		return ok
	}
	for ctx.Err() == nil {
		if serr := s.Err(); serr != nil {
			if s == e.s && errors.Is(serr, ErrSessionClosed) {
				return q.errorf(serr)
			}
			if s.cli.Ctx().Err() != nil {
				return q.errorf(fmt.Errorf("%w: client closed", ErrSessionExpired))
			}
			ns, err := newSession(ctx, s.cli, s.opts)
			if err != nil {
				log.Warn("run: cannot open a replacement session", zap.Error(err))
				if !pause() {
					break
				}
				continue
			}
			if owned != nil {
				_ = owned.Close()
			}
			owned, s = ns, ns
			log = s.log.With(zap.String("election", e.name))
			log.Info("run: opened a replacement session")
		}
		l, err := NewElection(s, e.name).Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrInvalidName) || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrKindMismatch) {
				return err
			}
			log.Warn("run: campaign failed", zap.Error(err))
			if !pause() {
				break
			}
			continue
		}
		backoff = 100 * time.Millisecond
		log.Info("run: leading", zap.Stringer("token", l.Token()))
		h := e.health.Load()
		if h != nil {
			h.Set(l)
		}
		lerr := leadTerm(ctx, l, lead)
		if h != nil {
			h.Set(nil)
		}
		lostCause := context.Cause(l.Context()) // nil while still leading
		rctx, cancel := context.WithTimeout(context.Background(), s.revokeBound())
		if rerr := l.Resign(rctx); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			log.Warn("run: resign did not finish; the session's reaper completes it", zap.Error(rerr))
		}
		cancel()
		switch {
		case closedByCaller():
			log.Info("run: the caller closed its session", zap.Stringer("token", l.Token()))
			return q.errorf(ErrSessionClosed)
		case lostCause != nil:
			log.Info("run: leadership lost", zap.Stringer("token", l.Token()), zap.NamedError("cause", lostCause), zap.NamedError("lead", lerr))
		case ctx.Err() != nil || lerr == nil:
			log.Info("run: resigned", zap.Stringer("token", l.Token()))
			return nil
		default:
			log.Info("run: resigned after lead failed", zap.Stringer("token", l.Token()), zap.Error(lerr))
			return lerr
		}
	}
	if closedByCaller() {
		return q.errorf(ErrSessionClosed)
	}
	return nil
}

// errCallerClosed ends Run's context when the caller closes its Session.
var errCallerClosed = errors.New("etcdlock: the caller closed the session")

// leadTerm calls lead with a context that ends when ctx ends or leadership
// is lost (with the loss as its cause), and waits for it to return.
func leadTerm(ctx context.Context, l *Leadership, lead func(context.Context) error) error {
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, leadershipKey{}, l))
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer func() {
		stop()
		cancel(nil)
	}()
	return lead(lctx)
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
