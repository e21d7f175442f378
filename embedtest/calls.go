package embedtest

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// callCounter counts gRPC requests by full method name.
type callCounter struct {
	kills    atomic.Int64 // Kill calls of the member
	killing  atomic.Bool  // a Kill is stopping the member
	arrived  counts       // calls when they arrive (Member.Calls)
	answered counts       // unary calls once their handler returned (Member.Answered)
}

func newCallCounter() *callCounter {
	return &callCounter{arrived: counts{byMethod: make(map[string]*atomic.Int64)},
		answered: counts{byMethod: make(map[string]*atomic.Int64)}}
}

// counts are counters by full method name, and their total.
type counts struct {
	total    atomic.Int64
	mu       sync.RWMutex
	byMethod map[string]*atomic.Int64
}

func (c *counts) add(method string) {
	c.total.Add(1)
	c.mu.RLock()
	n := c.byMethod[method]
	c.mu.RUnlock()
	if n == nil {
		c.mu.Lock()
		if n = c.byMethod[method]; n == nil {
			n = new(atomic.Int64)
			c.byMethod[method] = n
		}
		c.mu.Unlock()
	}
	n.Add(1)
}

func (c *counts) get(method string) int64 {
	if method == "" {
		return c.total.Load()
	}
	c.mu.RLock()
	n := c.byMethod[method]
	c.mu.RUnlock()
	if n == nil {
		return 0
	}
	return n.Load()
}

// killedUnder turns a panic of a request the member's Kill overtook into
// an Unavailable error: Kill closes the member's storage under the requests
// still running (etcd's own handlers, for example Status, then dereference
// a closed bolt transaction: etcd-io/etcd#22189). A request overtaken is one
// that a Kill began after, or that began while a Kill was stopping the
// member (bytes already received when Kill closed the connections; its
// handler may run on after Kill returned). Other panics go on. kills and
// killing are cc's when the request started (Kill sets killing before it
// counts, so no start falls between the two).
func (cc *callCounter) killedUnder(kills int64, killing bool, err *error) {
	if cc.kills.Load() == kills && !killing && !cc.killing.Load() {
		return
	}
	if r := recover(); r != nil {
		*err = status.Errorf(codes.Unavailable, "embedtest: member killed during the request (%v)", r)
	}
}

func (cc *callCounter) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	cc.arrived.add(info.FullMethod)
	defer cc.answered.add(info.FullMethod) // after killedUnder's recover
	defer cc.killedUnder(cc.kills.Load(), cc.killing.Load(), &err)
	return handler(ctx, req)
}

func (cc *callCounter) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer cc.killedUnder(cc.kills.Load(), cc.killing.Load(), &err)
	return handler(srv, &countingStream{ServerStream: ss, cc: cc, method: info.FullMethod})
}

// countingStream counts every message received on a server stream.
type countingStream struct {
	grpc.ServerStream
	cc     *callCounter
	method string
}

func (s *countingStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if err == nil {
		s.cc.arrived.add(s.method)
	}
	return err
}
