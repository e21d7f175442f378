package wire

// This file holds the keeper's connection: which endpoint the keepalive
// stream runs on (with pinning, the leader's, or a member's that answers when
// the leader's does not), when it must move, and the lending of that
// connection to the queue's writes, hand-off reads and watches (Conn).

import (
	"context"
	"errors"
	"io"
	"reflect"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// fallbackWait is how long findEndpoint waits for the leader's own answer
// once a follower has answered with a leader. The leader's endpoint may not
// answer this client at all (a black-holed path, while the cluster keeps its
// quorum); the follower forwards keepalives to the leader meanwhile.
const fallbackWait = 200 * time.Millisecond

// endpoint is where the keeper's stream runs.
type endpoint struct {
	addr   string // one of the client's endpoints; "": its balanced connection
	leader bool   // addr's member said it was the leader
}

// connect returns the connection for the next stream: with pinning, a
// connection to the client's own endpoint that reaches the leader (so the
// keepalives cross the same network path, credentials and dial options as
// the data), or to a member that answered and knows a leader when the
// leader's endpoint does not answer; else (or while no member answers) the
// client's balanced one.
func (k *Keeper) connect() (conn *grpc.ClientConn, at endpoint, owned bool) {
	if k.key.pinned {
		if at = k.findEndpoint(); at.addr != "" {
			c, err := k.cli.Dial(at.addr)
			if err == nil {
				return c, at, true
			}
			k.log.Debug("dial endpoint", zap.String("endpoint", at.addr), zap.Error(err))
		}
	}
	return k.cli.ActiveConnection(), endpoint{}, false
}

// findEndpoint asks every endpoint of the client for its status, all at
// once. It returns the endpoint whose member says it is the leader as soon
// as that answer comes. Failing that, it returns an endpoint whose member
// answered and knows a leader (the first such answer), once every endpoint
// has answered or failed, fallbackWait after that answer, or at
// statusTimeout, whichever comes first; and the zero endpoint when no member
// answered with a leader. It waits for its status calls before it returns.
func (k *Keeper) findEndpoint() endpoint {
	eps := k.cli.Endpoints()
	ctx, cancel := context.WithTimeout(k.ctx, statusTimeout)
	answers := make(chan endpoint, len(eps))
	var wg sync.WaitGroup
	defer func() {
		cancel() // ends the calls still waiting for an answer
		wg.Wait()
	}()
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- k.askStatus(ctx, ep)
		}()
	}
	var fallback endpoint
	grace := time.NewTimer(time.Hour)
	defer grace.Stop()
	for range eps {
		select {
		case a := <-answers:
			switch {
			case a.leader:
				return a
			case a.addr != "" && fallback.addr == "":
				fallback = a
				grace.Reset(fallbackWait)
			}
		case <-grace.C:
			return fallback
		case <-ctx.Done():
			return fallback
		}
	}
	return fallback
}

// askStatus asks the member behind ep for its status. It returns ep when the
// member answered and knows a leader (leader: it is the leader), else the
// zero endpoint.
func (k *Keeper) askStatus(ctx context.Context, ep string) endpoint {
	conn, err := k.cli.Dial(ep)
	if err != nil {
		return endpoint{}
	}
	defer conn.Close()
	resp, err := quietStatus(ctx, conn)
	if err != nil || resp.Leader == 0 {
		return endpoint{}
	}
	return endpoint{addr: ep, leader: resp.Leader == resp.Header.MemberId}
}

// Conn is a connection the keeper dialed for its stream, and (kv != nil)
// lends to the queue's requests and watches while the stream runs on it
// (see Keeper.lend). It is closed once it is retired and no request that
// borrowed it is in flight, so a stream that ends (the leader moved, the last
// session left) never cuts a request short.
type Conn struct {
	conn    *grpc.ClientConn
	at      endpoint
	kv      clientv3.KV
	watcher clientv3.Watcher

	mu      sync.Mutex
	users   int
	retired bool
}

// open makes the KV and Watcher of the queue's requests and watches on c's
// connection, as cli's own are made.
func (c *Conn) open(cli *clientv3.Client) {
	c.kv = clientv3.NewKVFromKVClient(pb.NewKVClient(c.conn), cli)
	c.watcher = clientv3.NewWatchFromWatchClient(pb.NewWatchClient(c.conn), cli)
}

// borrow lends the connection; GiveBack is to be called when the request is
// done. ok is false once the connection is retired.
func (c *Conn) borrow() (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return false
	}
	c.users++
	return true
}

// KV is the connection's KV, for the request that borrowed it.
func (c *Conn) KV() clientv3.KV { return c.kv }

// Watcher is the connection's Watcher (watches are not borrowed: see
// retire).
func (c *Conn) Watcher() clientv3.Watcher { return c.watcher }

// GiveBack ends a borrow: the request is done.
func (c *Conn) GiveBack() {
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
// the keeper's next connection (see Keeper.Lent). A borrowed request is
// bounded by its attempt timeout.
func (c *Conn) retire() {
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

func (c *Conn) close() { _ = c.conn.Close() }

// lending is what the keeper lends: the connection its stream runs on (nil
// while there is none, or while the stream runs on the client's balanced
// connection), and a channel that is closed when that changes.
type lending struct {
	conn  *Conn
	moved chan struct{}
}

// lend makes c (nil: none) what the keeper lends, and tells every watch
// opened on the previous one to move.
func (k *Keeper) lend(c *Conn) {
	old := k.lent.Swap(&lending{conn: c, moved: make(chan struct{})})
	if old != nil {
		close(old.moved)
	}
}

var (
	plainKVType      = reflect.TypeOf(clientv3.NewKVFromKVClient(nil, nil))
	plainWatcherType = reflect.TypeOf(clientv3.NewWatchFromWatchClient(nil, nil))
)

// PlainClient reports whether cli.KV and cli.Watcher are the client's own,
// not wrappers such as a namespace (which requests on another connection
// would bypass).
func PlainClient(cli *clientv3.Client) bool {
	return cli.KV != nil && reflect.TypeOf(cli.KV) == plainKVType &&
		cli.Watcher != nil && reflect.TypeOf(cli.Watcher) == plainWatcherType
}

// Borrow lends the connection the keeper's stream runs on (the borrower
// calls its GiveBack when the request is done; watches are not borrowed, see
// Conn.retire), or returns nil when the keeper lends none right now.
// That connection leads to the etcd leader whenever the leader's endpoint
// answers: a write sent to a follower is forwarded to the leader and
// answered only after the follower applies it too; sent to the leader it
// saves that hop (a free lock's grant and a release cost one round trip to
// the leader). The leader applies a write before the followers learn it is
// committed, so a predecessor watch on the leader wakes its waiter first, and
// the hand-off read there does not find the member behind the revision. When
// the leader's endpoint does not answer, the connection leads to a member
// that does, which is still a path known to work. A connection stays open
// while lent; when its member fails, requests fail like any request of
// unknown outcome and are retried on the balanced connection.
func (k *Keeper) Borrow() *Conn {
	if c := k.lent.Load().conn; c != nil && c.borrow() {
		return c
	}
	return nil
}

// Lent returns the connection the keeper lends now (nil: none, while it
// finds the next one, or while its stream runs on the client's balanced
// connection) for the queue's watches, and a channel that is closed when
// that changes.
func (k *Keeper) Lent() (c *Conn, moved <-chan struct{}) {
	l := k.lent.Load()
	return l.conn, l.moved
}

// followLeader ends the stream when it should move: its member is no longer
// the leader or lost its leader (errLeaderMoved), it failed two status checks
// in a row (ErrUnanswered), or, while the stream runs on a follower or the
// balanced connection, the leader's endpoint answers again (errLeaderFound).
func (k *Keeper) followLeader(sctx context.Context, stop context.CancelCauseFunc, conn *grpc.ClientConn, at endpoint) {
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
		if err := k.checkEndpoint(sctx, conn, at, &failures); err != nil {
			stop(err)
			return
		}
	}
}

// checkEndpoint is one check of followLeader: the error to end the stream
// with, or nil. failures counts the status checks of conn that failed in a
// row.
func (k *Keeper) checkEndpoint(sctx context.Context, conn *grpc.ClientConn, at endpoint, failures *int) error {
	if at.addr == "" {
		if k.findEndpoint().addr != "" {
			return errLeaderFound
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(sctx, statusTimeout)
	resp, err := quietStatus(ctx, conn)
	cancel()
	switch {
	case err == nil && (resp.Leader == 0 || at.leader && resp.Leader != resp.Header.MemberId):
		return errLeaderMoved
	case err == nil && !at.leader && k.findEndpoint().leader:
		return errLeaderFound
	case err == nil:
		*failures = 0
	case sctx.Err() == nil:
		// The member does not answer: its connection is lent to the
		// queue's requests too, so do not wait for the stall watchdog
		// (which needs a keepalive in flight).
		if *failures++; *failures >= 2 {
			return ErrUnanswered
		}
	}
	return nil
}

// statusMethod is etcd's Status RPC.
const statusMethod = "/etcdserverpb.Maintenance/Status"

// quietStatus asks the member behind conn for its status without a word in
// the client's log. The client's unary interceptor logs every failed call
// at Warn through the user's logger, which would fill the user's stderr
// with this package's housekeeping during every outage; its stream
// interceptor does not retry and does not log. So the call goes out as a
// stream with one request and one response, which is what gRPC makes of a
// unary call anyway.
func quietStatus(ctx context.Context, conn *grpc.ClientConn) (*pb.StatusResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{}, statusMethod)
	if err != nil {
		return nil, err
	}
	// io.EOF from SendMsg means the stream ended: RecvMsg says why.
	if err := st.SendMsg(&pb.StatusRequest{}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	resp := new(pb.StatusResponse)
	if err := st.RecvMsg(resp); err != nil {
		return nil, err
	}
	return resp, nil
}
