package etcdlock

// This file holds the keeper: one keepalive stream per client, shared by all
// of the client's sessions and pinned to the etcd leader's endpoint
// (DESIGN.md, "Scale: keepalives go to the leader"). While the stream runs on
// the leader's connection, the keeper also lends that connection to the
// queue's writes, hand-off reads and predecessor watches (leaderConn).

import (
	"container/heap"
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

const (
	statusTimeout  = time.Second
	leaderCheck    = 2 * time.Second
	wallSweep      = time.Second
	watchdogTick   = 100 * time.Millisecond
	minStall       = 500 * time.Millisecond
	reconnectFloor = 50 * time.Millisecond
	reconnectCeil  = time.Second
)

var (
	errLeaderMoved = errors.New("etcdlock: keepalive endpoint is no longer the leader")
	errStalled     = errors.New("etcdlock: keepalive stream stalled")
	errLeaderFound = errors.New("etcdlock: leader found, re-pinning")
	errUnanswered  = errors.New("etcdlock: keepalive endpoint failed two status checks")
)

type keeperKey struct {
	cli    *clientv3.Client
	pinned bool
}

// keepers holds the running keepers, one per client and pinning mode.
var keepers = struct {
	sync.Mutex
	m map[keeperKey]*keeper
}{m: map[keeperKey]*keeper{}}

// keeper sends the keepalives of every session of one client over one
// stream. Sessions register with add and leave with remove; the keeper stops
// when its last session leaves or its client closes (then it ends every
// session still registered with ErrSessionExpired).
type keeper struct {
	key  keeperKey
	cli  *clientv3.Client
	log  *zap.Logger
	refs int // guarded by keepers' mutex

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	// leader is the connection the current stream runs on while that
	// connection reaches the leader; nil otherwise (see borrowLeader).
	leader atomic.Pointer[leaderConn]

	mu       sync.Mutex
	sessions map[clientv3.LeaseID]*Session
	seq      map[*Session]uint64
	sched    schedHeap
	stopped  bool
	kick     chan struct{}

	// stall detection, guarded by mu
	outstanding  int
	firstUnacked time.Time // the last progress: first send after idle, or an ack
	minTTL       time.Duration
}

func acquireKeeper(cli *clientv3.Client, pinned bool, log *zap.Logger) *keeper {
	keepers.Lock()
	defer keepers.Unlock()
	key := keeperKey{cli, pinned}
	if k := keepers.m[key]; k != nil {
		k.refs++
		return k
	}
	ctx, cancel := context.WithCancel(cli.Ctx())
	k := &keeper{
		key: key, cli: cli, log: log, refs: 1,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		sessions: map[clientv3.LeaseID]*Session{},
		seq:      map[*Session]uint64{},
		kick:     make(chan struct{}, 1),
	}
	keepers.m[key] = k
	go k.run()
	return k
}

// add registers s with its first keepalive due at due; false if the keeper
// already stopped (its client closed).
func (k *keeper) add(s *Session, due time.Time) bool {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return false
	}
	k.sessions[s.lease] = s
	if k.minTTL == 0 || s.ttl < k.minTTL {
		k.minTTL = s.ttl
	}
	k.pushLocked(s, due)
	k.mu.Unlock()
	k.wake()
	return true
}

// remove unregisters s and drops the keeper's reference; the last reference
// stops the keeper (without waiting: see waitStopped).
func (k *keeper) remove(s *Session) {
	k.mu.Lock()
	delete(k.sessions, s.lease)
	delete(k.seq, s)
	k.mu.Unlock()

	keepers.Lock()
	k.refs--
	last := k.refs == 0
	if last && keepers.m[k.key] == k {
		delete(keepers.m, k.key)
	}
	keepers.Unlock()
	if last {
		k.cancel()
	}
}

// waitStopped waits for the keeper's goroutine if the keeper has stopped.
func (k *keeper) waitStopped() {
	if k.ctx.Err() != nil {
		<-k.done
	}
}

func (k *keeper) wake() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

func (k *keeper) pushLocked(s *Session, due time.Time) {
	k.seq[s]++
	heap.Push(&k.sched, schedEntry{due: due, s: s, seq: k.seq[s]})
}

func (k *keeper) push(s *Session, due time.Time) {
	k.mu.Lock()
	if _, ok := k.sessions[s.lease]; ok {
		k.pushLocked(s, due)
	}
	k.mu.Unlock()
	k.wake()
}

// popDue returns the sessions whose keepalive is due and when the next one is.
func (k *keeper) popDue(now time.Time) (due []*Session, next time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for k.sched.Len() > 0 {
		e := k.sched[0]
		if e.due.After(now) {
			return due, e.due
		}
		heap.Pop(&k.sched)
		if k.seq[e.s] != e.seq {
			continue // rescheduled or removed
		}
		due = append(due, e.s)
	}
	return due, now.Add(time.Hour)
}

func (k *keeper) snapshot() []*Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Session, 0, len(k.sessions))
	for _, s := range k.sessions {
		out = append(out, s)
	}
	return out
}

func (k *keeper) run() {
	defer close(k.done)
	backoff := reconnectFloor
	for k.ctx.Err() == nil {
		conn, ep, owned := k.connect()
		start := time.Now()
		lc := &leaderConn{conn: conn}
		err := k.serve(lc, ep)
		if owned {
			lc.retire() // closes conn once no request lent it is in flight
		}
		if k.ctx.Err() != nil {
			break
		}
		k.log.Debug("keepalive stream ended", zap.String("endpoint", ep), zap.Error(err))
		if time.Since(start) > 5*time.Second {
			backoff = reconnectFloor
		}
		if !sleepCtx(k.ctx, jitter(backoff)) {
			break
		}
		backoff = min(2*backoff, reconnectCeil)
	}
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	if k.cli.Ctx().Err() != nil {
		for _, s := range k.snapshot() {
			s.expire(ErrSessionExpired, ReasonClientClosed)
		}
	}
}

// connect returns the connection for the next stream: with pinning, a
// connection to the client's own endpoint that reaches the leader (so the
// keepalives cross the same network path, credentials and dial options as
// the data), else (or while no leader is known) the client's balanced one.
func (k *keeper) connect() (conn *grpc.ClientConn, ep string, owned bool) {
	if k.key.pinned {
		if ep = k.leaderEndpoint(); ep != "" {
			c, err := k.cli.Dial(ep)
			if err == nil {
				return c, ep, true
			}
			k.log.Debug("dial leader endpoint", zap.String("endpoint", ep), zap.Error(err))
		}
	}
	return k.cli.ActiveConnection(), "", false
}

// leaderEndpoint asks every endpoint of the client for its status and
// returns the one whose member is the leader most members report, "" if none.
func (k *keeper) leaderEndpoint() string {
	eps := k.cli.Endpoints()
	type answer struct {
		ep             string
		member, leader uint64
	}
	answers := make(chan answer, len(eps))
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(k.ctx, statusTimeout)
			defer cancel()
			resp, err := k.cli.Status(ctx, ep)
			if err != nil {
				return
			}
			answers <- answer{ep, resp.Header.MemberId, resp.Leader}
		}()
	}
	wg.Wait()
	close(answers)
	votes := map[uint64]int{}
	byMember := map[uint64]string{}
	for a := range answers {
		byMember[a.member] = a.ep
		if a.leader != 0 {
			votes[a.leader]++
		}
	}
	var best uint64
	for id, n := range votes {
		if n > votes[best] {
			best = id
		}
	}
	return byMember[best]
}

// leaderConn is a connection the keeper dialed, and (kv != nil) lends to
// requests while it reaches the leader. It is closed once it is retired and
// no request that borrowed it is in flight, so a stream that ends (the leader
// moved, the last session left) never cuts a request short.
type leaderConn struct {
	conn    *grpc.ClientConn
	kv      clientv3.KV
	watcher clientv3.Watcher

	mu      sync.Mutex
	users   int
	retired bool
}

// borrow lends the connection; giveBack is to be called when the request is
// done. ok is false once the connection is retired.
func (c *leaderConn) borrow() (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return false
	}
	c.users++
	return true
}

func (c *leaderConn) giveBack() {
	c.mu.Lock()
	c.users--
	last := c.retired && c.users == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
}

// retire closes the connection's watcher at once and the connection now if
// nobody borrowed it, else when the last borrower is done. Watches are not
// borrowed: one on a connection to a dead member would never end (a
// single-endpoint connection redials that member forever), so retiring ends
// them and their waiters re-open them, from the last revision seen + 1, on
// the keeper's next connection or the client's balanced one. A borrowed
// request is bounded by its attempt timeout.
func (c *leaderConn) retire() {
	c.mu.Lock()
	c.retired = true
	idle := c.users == 0
	c.mu.Unlock()
	if c.watcher != nil {
		_ = c.watcher.Close()
	}
	if idle {
		c.close()
	}
}

func (c *leaderConn) close() { _ = c.conn.Close() }

var (
	plainKVType      = reflect.TypeOf(clientv3.NewKVFromKVClient(nil, nil))
	plainWatcherType = reflect.TypeOf(clientv3.NewWatchFromWatchClient(nil, nil))
)

// plainClient reports whether cli.KV and cli.Watcher are the client's own,
// not wrappers such as a namespace (which requests on another connection
// would bypass).
func plainClient(cli *clientv3.Client) bool {
	return cli.KV != nil && reflect.TypeOf(cli.KV) == plainKVType &&
		cli.Watcher != nil && reflect.TypeOf(cli.Watcher) == plainWatcherType
}

// borrowLeader lends the connection to the etcd leader (the borrower calls
// its giveBack when the request is done; watches are not borrowed, see
// leaderConn.retire), or returns nil when the keeper knows no leader
// connection right now. A write sent to a follower is forwarded to the leader
// and answered only after the follower applies it too; sent to the leader it
// saves that hop (a free lock's grant and a release cost one round trip to
// the leader). The leader applies a write before the followers learn it is
// committed, so a predecessor watch on the leader wakes its waiter first, and
// the hand-off read there does not find the member behind the revision. A
// connection stays open while lent; when its member fails, requests fail like
// any request of unknown outcome and are retried on the balanced connection.
func (k *keeper) borrowLeader() *leaderConn {
	if c := k.leader.Load(); c != nil && c.borrow() {
		return c
	}
	return nil
}

// serve runs one keepalive stream on conn until it fails, stalls, its
// endpoint stops being the leader, or the keeper stops. Watchdogs that never
// block on the network cancel the stream's context when it stalls, which
// also unblocks an opening stream or a Send stuck on flow control.
func (k *keeper) serve(lc *leaderConn, ep string) error {
	conn := lc.conn
	sctx, scancel := context.WithCancelCause(clientv3.WithRequireLeader(k.ctx))
	var opened atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		k.watchdog(sctx, scancel, &opened, time.Now())
	}()
	go func() {
		defer wg.Done()
		k.followLeader(sctx, scancel, conn, ep)
	}()
	defer func() {
		scancel(nil)
		wg.Wait()
	}()

	stream, err := pb.NewLeaseClient(conn).LeaseKeepAlive(sctx)
	if err != nil {
		return streamErr(sctx, err)
	}
	opened.Store(true)
	if ep != "" && plainClient(k.cli) {
		lc.kv = clientv3.NewKVFromKVClient(pb.NewKVClient(conn), k.cli)
		lc.watcher = clientv3.NewWatchFromWatchClient(pb.NewWatchClient(conn), k.cli)
		k.leader.Store(lc)
		defer k.leader.Store(nil) // then run retires lc
	}
	for _, s := range k.snapshot() {
		s.resetInflight()
		k.push(s, time.Now())
	}
	k.mu.Lock()
	k.outstanding, k.firstUnacked = 0, time.Time{}
	k.mu.Unlock()

	recvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		recvErr <- k.recvLoop(stream)
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		due, next := k.popDue(now)
		for _, s := range due {
			if !s.recordSend(now) {
				continue
			}
			k.mu.Lock()
			if k.outstanding == 0 {
				k.firstUnacked = now
			}
			k.outstanding++
			k.mu.Unlock()
			if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(s.lease)}); err != nil {
				return streamErr(sctx, err)
			}
			k.push(s, now.Add(max(s.ttl/10, 100*time.Millisecond)))
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-k.kick:
		case err := <-recvErr:
			return streamErr(sctx, err)
		case <-sctx.Done():
			return context.Cause(sctx)
		}
	}
}

// streamErr prefers the reason the stream's context was canceled.
func streamErr(sctx context.Context, err error) error {
	if sctx.Err() != nil {
		return context.Cause(sctx)
	}
	return err
}

// watchdog ends the stream when it does not open in time or stalls, and
// checks every session's validity on the wall clock once a second (Go's
// monotonic clock stops while the machine is suspended).
func (k *keeper) watchdog(sctx context.Context, stop context.CancelCauseFunc, opened *atomic.Bool, start time.Time) {
	tick := time.NewTicker(watchdogTick)
	defer tick.Stop()
	lastSweep := start
	for {
		select {
		case <-sctx.Done():
			return
		case now := <-tick.C:
			if !opened.Load() && now.Sub(start) > k.stallLimit() {
				stop(errStalled)
				return
			}
			if err := k.stalled(now); err != nil {
				stop(err)
				return
			}
			if now.Sub(lastSweep) >= wallSweep {
				lastSweep = now
				for _, s := range k.snapshot() {
					s.checkExpiry()
				}
			}
		}
	}
}

// followLeader ends the stream when it should move: its endpoint is no
// longer the leader (errLeaderMoved), fails two status checks in a row
// (errUnanswered), or (the fallback while pinning) a leader is known again
// (errLeaderFound).
func (k *keeper) followLeader(sctx context.Context, stop context.CancelCauseFunc, conn *grpc.ClientConn, ep string) {
	if !k.key.pinned {
		return
	}
	tick := time.NewTicker(leaderCheck)
	defer tick.Stop()
	failures := 0
	for {
		select {
		case <-sctx.Done():
			return
		case <-tick.C:
		}
		if ep == "" {
			if k.leaderEndpoint() != "" {
				stop(errLeaderFound)
				return
			}
			continue
		}
		ctx, cancel := context.WithTimeout(sctx, statusTimeout)
		resp, err := pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{})
		cancel()
		switch {
		case err == nil && resp.Leader != resp.Header.MemberId:
			stop(errLeaderMoved)
			return
		case err == nil:
			failures = 0
		case sctx.Err() == nil:
			// The member does not answer: its connection is lent to the
			// queue's requests too, so do not wait for the stall watchdog
			// (which needs a keepalive in flight).
			if failures++; failures >= 2 {
				stop(errUnanswered)
				return
			}
		}
	}
}

// stallLimit is how long requests may go unanswered (or a stream take to
// open) before the stream is replaced: a fifth of the shortest TTL, at least
// 500ms.
func (k *keeper) stallLimit() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return max(minStall, k.minTTL/5)
}

// stalled reports a stream on which requests have gone unanswered for the
// stall limit: the path or member is dead even if TCP has not noticed yet.
func (k *keeper) stalled(now time.Time) error {
	limit := k.stallLimit()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.outstanding > 0 && now.Sub(k.firstUnacked) > limit {
		return errStalled
	}
	return nil
}

func (k *keeper) recvLoop(stream pb.Lease_LeaseKeepAliveClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		k.mu.Lock()
		s := k.sessions[clientv3.LeaseID(resp.ID)]
		if k.outstanding > 0 {
			k.outstanding--
		}
		k.firstUnacked = time.Now()
		k.mu.Unlock()
		if s == nil {
			continue
		}
		if next, ok := s.onAck(resp.TTL); ok {
			k.push(s, next)
		}
	}
}

type schedEntry struct {
	due time.Time
	s   *Session
	seq uint64
}

type schedHeap []schedEntry

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h schedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *schedHeap) Push(x any)        { *h = append(*h, x.(schedEntry)) }
func (h *schedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
