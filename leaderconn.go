package etcdlock

// This file holds the keeper's connection: which endpoint the keepalive
// stream runs on (the leader's, with pinning), when it must move, and the
// lending of that connection to the queue's writes, hand-off reads and
// predecessor watches (leaderConn).

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
			conn, err := k.cli.Dial(ep)
			if err != nil {
				return
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(k.ctx, statusTimeout)
			defer cancel()
			resp, err := quietStatus(ctx, conn)
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
		resp, err := quietStatus(ctx, conn)
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
