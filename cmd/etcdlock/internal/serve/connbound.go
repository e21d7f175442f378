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
//   - a write deadline of ttl on every line (a client that stops reading).
//
// A dropped connection ends the request's context: a waiter leaves the
// queue, a grant is released (stream.go). A unix socket's client is on
// this machine and cannot vanish that way.

import (
	"context"
	"net"
	"time"
)

const (
	keepaliveIdle     = 2 * time.Second
	keepaliveInterval = time.Second
)

// connKey is the context key of a request's connection (Server.Serve's
// ConnContext).
type connKey struct{}

// withConn is http.Server's ConnContext: it keeps c in the connection's
// context.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// boundConn bounds the life of ctx's connection, if it is TCP, by ttl (see
// the file's header). It returns an error only when the socket refuses the
// options.
func boundConn(ctx context.Context, ttl time.Duration) error {
	c, ok := ctx.Value(connKey{}).(*net.TCPConn)
	if !ok {
		return nil
	}
	err := c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle,
		Interval: keepaliveInterval, Count: max(1, int(ttl/keepaliveInterval))})
	if err != nil {
		return err
	}
	return setUserTimeout(c, ttl)
}
