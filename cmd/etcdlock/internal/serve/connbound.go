package serve

// This file bounds a hold by its ttl whatever the network does. A client
// whose host vanishes (power lost, network cut: no FIN, no RST) leaves a
// connection that TCP alone would keep for about 15 minutes (its
// retransmission timeout). So every stream's TCP connection is given, from
// its hold's ttl:
//   - TCP_USER_TIMEOUT = ttl (Linux): the kernel drops the connection when
//     data it sent ("alive" lines, or keepalive probes) stays
//     unacknowledged that long;
//   - keepalive probes after keepaliveIdle of silence, every
//     keepaliveInterval: a waiting stream sends nothing, so the probes are
//     what the timeout counts on;
//   - a write deadline of ttl on every line: a client that stops reading
//     while its kernel goes on acknowledging (a process stopped with
//     SIGSTOP) is dropped only once its receive window is full, which at
//     the alive lines' rate takes long (tens of minutes): such a client is
//     bounded by the fence, not by this.
//
// A dropped connection ends the request's context: a waiter leaves the
// queue, a grant is released (stream.go). A unix socket's client is on
// this machine and cannot vanish that way.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

const (
	keepaliveIdle     = 2 * time.Second
	keepaliveInterval = time.Second
)

// connKey is the context key of a request's connection (Server.Serve's
// ConnContext): a *connInfo.
type connKey struct{}

// connInfo is a connection and the ttl it is bounded by.
type connInfo struct {
	conn net.Conn
	// bound is the ttl of the last boundConn (0: none yet).
	bound atomic.Int64
}

// withConn is http.Server's ConnContext: it keeps c in the connection's
// context.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connInfo{conn: c})
}

// connOf returns ctx's connection, nil if it has none.
func connOf(ctx context.Context) *connInfo {
	ci, _ := ctx.Value(connKey{}).(*connInfo)
	return ci
}

// boundConn bounds the life of ctx's connection, if it is TCP, by ttl (see
// the file's header), unless the connection's last stream had the same
// ttl (a kept connection holding in a loop sets its options once). It
// returns an error only when the socket refuses the options.
func boundConn(ctx context.Context, ttl time.Duration) error {
	ci := connOf(ctx)
	if ci == nil || time.Duration(ci.bound.Load()) == ttl {
		return nil
	}
	conn := ci.conn
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	c, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	err := c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle,
		Interval: keepaliveInterval, Count: max(1, int(ttl/keepaliveInterval))})
	if err == nil {
		err = setUserTimeout(c, ttl)
	}
	if err == nil {
		ci.bound.Store(int64(ttl))
	}
	return err
}

// connSet is the server's open connections (http.Server's ConnState), so
// that stopping can end every read at once: a connection whose request
// body the server drains (an answer given without reading it) would hold
// Shutdown for as long as its client sends nothing. Safe for concurrent
// use.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]bool // true while it carries a stream (see streaming)
}

func newConnSet() *connSet { return &connSet{conns: map[net.Conn]bool{}} }

// streaming marks ctx's connection as carrying a stream until the returned
// func is called: endReads leaves it alone, so that the stream, ended by
// the stop, still says why on it (its request's context ending first
// would end it silently).
func (cs *connSet) streaming(ctx context.Context) (done func()) {
	ci := connOf(ctx)
	if ci == nil {
		return func() {}
	}
	c := ci.conn
	cs.mu.Lock()
	if _, open := cs.conns[c]; open {
		cs.conns[c] = true
	}
	cs.mu.Unlock()
	return func() {
		cs.mu.Lock()
		if _, open := cs.conns[c]; open {
			cs.conns[c] = false
		}
		cs.mu.Unlock()
	}
}

// track is http.Server's ConnState.
func (cs *connSet) track(c net.Conn, st http.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch st {
	case http.StateNew:
		cs.conns[c] = false
	case http.StateClosed, http.StateHijacked:
		delete(cs.conns, c)
	}
}

// endReads makes the reads of every open connection that carries no
// stream fail from now on.
func (cs *connSet) endReads() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c, streaming := range cs.conns {
		if !streaming {
			_ = c.SetReadDeadline(time.Now())
		}
	}
}
