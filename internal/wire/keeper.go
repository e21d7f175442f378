package wire

// This file holds the keeper: one keepalive stream per client, shared by all
// of the client's sessions and pinned to the etcd leader's endpoint
// (DESIGN.md, "Keepalives go to the leader"). The connection it runs
// on, and lends to the queue, is in leaderconn.go.

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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
	errLeaderMoved = errors.New("etcdlock: keepalive endpoint is no longer the leader, or has none")
	errStalled     = errors.New("etcdlock: keepalive stream stalled")
	errLeaderFound = errors.New("etcdlock: leader found, re-pinning")
	// ErrUnanswered is why the keeper leaves an endpoint that failed two
	// status checks in a row (the tests look for it).
	ErrUnanswered = errors.New("etcdlock: keepalive endpoint failed two status checks")
)

// ReasonClientClosed is the reason the keeper gives Kept.Expire when its
// client closed (the root's ReasonClientClosed).
const ReasonClientClosed = "client_closed"

// Kept is what the keeper needs of a session: it owns the validity clock
// the keepalives feed, and ends itself. A Kept is a map key: comparable,
// and the same value each time its session is passed.
type Kept interface {
	Lease() clientv3.LeaseID
	TTL() time.Duration
	// RecordSend notes a keepalive sent at now; false once the session
	// ended (send nothing).
	RecordSend(now time.Time) bool
	// OnAck takes an acknowledgement with the granted TTL; it returns when
	// the next keepalive is due, false once the session ended.
	OnAck(ttl int64) (next time.Time, ok bool)
	// ResetInflight forgets the keepalives sent on a stream that ended.
	ResetInflight()
	// CheckExpiry ends the session if its validity ran out (the wall-clock
	// sweep, for a clock that jumped).
	CheckExpiry()
	// Expire ends the session as lost (expired) for reason.
	Expire(reason string)
}

type keeperKey struct {
	cli      *clientv3.Client
	pinned   bool
	batching bool
}

// keepers holds the running keepers, one per client, pinning and batching
// mode.
var keepers = struct {
	sync.Mutex
	m map[keeperKey]*Keeper
}{m: map[keeperKey]*Keeper{}}

// Keeper sends the keepalives of every session of one client over one
// stream. Sessions register with Add and leave with Remove; the keeper stops
// when its last session leaves or its client closes (then it ends every
// session still registered: Kept.Expire with ReasonClientClosed).
type Keeper struct {
	key  keeperKey
	cli  *clientv3.Client
	log  *zap.Logger
	refs int // guarded by keepers' mutex

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	held atomic.Pointer[chan struct{}] // tests only: see waitHeld

	// batch is the client's group commit; nil without batching.
	batch *Batcher

	// lent is what the keeper lends to the queue: the connection the
	// current stream runs on (see Borrow and Lent). Never nil; written by
	// serve.
	lent atomic.Pointer[lending]

	mu       sync.Mutex
	sessions map[clientv3.LeaseID]Kept
	seq      map[Kept]uint64
	sched    schedHeap
	stopped  bool
	kick     chan struct{}

	// stall detection, guarded by mu
	outstanding  int
	firstUnacked time.Time // the last progress: first send after idle, or an ack
	minTTL       time.Duration
}

// AcquireKeeper returns the running keeper of cli for pinned (keepalives to
// the leader) and batching (group commit), starting one if there is none,
// and takes a reference to it (Remove drops it).
func AcquireKeeper(cli *clientv3.Client, pinned, batching bool, log *zap.Logger) *Keeper {
	keepers.Lock()
	defer keepers.Unlock()
	key := keeperKey{cli, pinned, batching}
	if k := keepers.m[key]; k != nil {
		k.refs++
		return k
	}
	ctx, cancel := context.WithCancel(cli.Ctx())
	k := &Keeper{
		key: key, cli: cli, log: log, refs: 1,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		sessions: map[clientv3.LeaseID]Kept{},
		seq:      map[Kept]uint64{},
		kick:     make(chan struct{}, 1),
	}
	k.lend(nil)
	if batching {
		k.batch = newBatcher(k)
	}
	keepers.m[key] = k
	go k.run()
	return k
}

// Add registers s with its first keepalive due at due; false if the keeper
// already stopped (its client closed).
func (k *Keeper) Add(s Kept, due time.Time) bool {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return false
	}
	k.sessions[s.Lease()] = s
	if k.minTTL == 0 || s.TTL() < k.minTTL {
		k.minTTL = s.TTL()
	}
	k.pushLocked(s, due)
	k.mu.Unlock()
	k.wake()
	return true
}

// Remove unregisters s and drops the keeper's reference; the last reference
// stops the keeper (without waiting: see WaitStopped).
func (k *Keeper) Remove(s Kept) {
	k.mu.Lock()
	delete(k.sessions, s.Lease())
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

// WaitStopped waits for the keeper's goroutine if the keeper has stopped.
func (k *Keeper) WaitStopped() {
	if k.ctx.Err() != nil {
		<-k.done
	}
}

// Batcher returns the client's group commit; nil without batching.
func (k *Keeper) Batcher() *Batcher { return k.batch }

func (k *Keeper) wake() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

func (k *Keeper) pushLocked(s Kept, due time.Time) {
	k.seq[s]++
	heap.Push(&k.sched, schedEntry{due: due, s: s, seq: k.seq[s]})
}

func (k *Keeper) push(s Kept, due time.Time) {
	k.mu.Lock()
	if _, ok := k.sessions[s.Lease()]; ok {
		k.pushLocked(s, due)
	}
	k.mu.Unlock()
	k.wake()
}

// popDue returns the sessions whose keepalive is due and when the next one is.
func (k *Keeper) popDue(now time.Time) (due []Kept, next time.Time) {
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

func (k *Keeper) snapshot() []Kept {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Kept, 0, len(k.sessions))
	for _, s := range k.sessions {
		out = append(out, s)
	}
	return out
}

func (k *Keeper) run() {
	defer close(k.done)
	if k.batch != nil {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.batch.run(k.ctx)
		}()
		defer wg.Wait()
	}
	b := NewBackoff(reconnectFloor, reconnectCeil)
	for k.ctx.Err() == nil {
		if !k.waitHeld() {
			continue
		}
		conn, at, owned := k.connect()
		start := time.Now()
		sc := &Conn{conn: conn, at: at}
		err := k.serve(sc)
		if owned {
			sc.retire() // closes conn once no request lent it is in flight
		}
		if k.ctx.Err() != nil {
			break
		}
		k.log.Debug("keepalive stream ended", zap.String("endpoint", at.addr), zap.Bool("leader", at.leader), zap.Error(err))
		if time.Since(start) > 5*time.Second {
			b.Reset()
		}
		if !b.Wait(k.ctx) {
			break
		}
	}
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	if k.cli.Ctx().Err() != nil {
		for _, s := range k.snapshot() {
			s.Expire(ReasonClientClosed)
		}
	}
}

// serve runs one keepalive stream on sc until it fails, stalls, it
// should move (see followLeader), or the keeper stops. Watchdogs that never
// block on the network cancel the stream's context when it stalls, which
// also unblocks an opening stream or a Send stuck on flow control.
func (k *Keeper) serve(sc *Conn) error {
	conn, at := sc.conn, sc.at
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
		k.followLeader(sctx, scancel, conn, at)
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
	if at.addr != "" && PlainClient(k.cli) {
		sc.open(k.cli)
		k.lend(sc)
		defer k.lend(nil) // then run retires sc
	}
	for _, s := range k.snapshot() {
		s.ResetInflight()
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
	return k.sendLoop(sctx, stream, recvErr)
}

// sendLoop sends each session's keepalive when it is due, until a send or
// the receiving side fails or the stream's context ends.
func (k *Keeper) sendLoop(sctx context.Context, stream pb.Lease_LeaseKeepAliveClient, recvErr <-chan error) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		due, next := k.popDue(now)
		for _, s := range due {
			if !s.RecordSend(now) {
				continue
			}
			k.mu.Lock()
			if k.outstanding == 0 {
				k.firstUnacked = now
			}
			k.outstanding++
			k.mu.Unlock()
			if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(s.Lease())}); err != nil {
				return streamErr(sctx, err)
			}
			k.push(s, now.Add(max(s.TTL()/10, 100*time.Millisecond)))
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
func (k *Keeper) watchdog(sctx context.Context, stop context.CancelCauseFunc, opened *atomic.Bool, start time.Time) {
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
					s.CheckExpiry()
				}
			}
		}
	}
}

// stallLimit is how long requests may go unanswered (or a stream take to
// open) before the stream is replaced: a fifth of the shortest TTL, at least
// 500ms.
func (k *Keeper) stallLimit() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return max(minStall, k.minTTL/5)
}

// stalled reports a stream on which requests have gone unanswered for the
// stall limit: the path or member is dead even if TCP has not noticed yet.
func (k *Keeper) stalled(now time.Time) error {
	limit := k.stallLimit()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.outstanding > 0 && now.Sub(k.firstUnacked) > limit {
		return errStalled
	}
	return nil
}

func (k *Keeper) recvLoop(stream pb.Lease_LeaseKeepAliveClient) error {
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
		if next, ok := s.OnAck(resp.TTL); ok {
			k.push(s, next)
		}
	}
}
