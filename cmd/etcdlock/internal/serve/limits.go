package serve

// This file bounds what one client, and all of them, may hold open: a
// session is a lease in etcd (and a lease count slows how fast etcd frees
// every user's dead holders after a leader change); a stream is a
// connection, a goroutine and, while it waits, a key. A request over a
// bound is answered 429 too_many with Retry-After. A client is its etcd
// user with client-auth (principal.go), else its remote address (every
// client of a unix socket is one: they share a machine).

import (
	"net"
	"net/http"
	"time"
)

// Default bounds (Config's Max* fields).
const (
	defaultMaxClientSessions = 100
	defaultMaxClientStreams  = 1000
	defaultMaxSessions       = 1000
	defaultMaxStreams        = 10000
)

// Default timeouts (Config's BodyTimeout and IdleTimeout).
const (
	defaultBodyTimeout = 10 * time.Second
	defaultIdleTimeout = 2 * time.Minute
)

// retryAfter is the Retry-After of a too_many answer, in seconds.
const retryAfter = "1"

// counts is what the clients hold open, guarded by Server.mu.
type counts struct {
	byClient map[string]int
	total    int
}

// clientOf names r's client for the bounds: "local" for a unix socket's or
// a loopback address's (one machine, whichever of 127/8 it dials from), an
// IPv6 address by its /64 (one host's share of addresses), else the
// remote IP.
func clientOf(r *http.Request) string {
	if user := principalOf(r).user; user != "" {
		return "user " + user // with client-auth, a client is its etcd user
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	switch {
	case err != nil || ip == nil || ip.IsLoopback():
		return "local"
	case ip.To4() == nil:
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// admit counts one more of c's open things in n, unless that would pass
// perClient or total (a bound of 0 takes def); what admits it releases it
// with the returned func (once). what names the thing in the error.
func (srv *Server) admit(n *counts, c string, perClient, total, defClient, defTotal int, what string) (func(), error) {
	perClient, total = orDefault(perClient, defClient), orDefault(total, defTotal)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	switch {
	case n.byClient[c] >= perClient:
		return nil, errorf(codeTooMany, "%s has %d %s open, the most one client may", c, n.byClient[c], what)
	case n.total >= total:
		return nil, errorf(codeTooMany, "the server has %d %s open, the most it takes", n.total, what)
	}
	n.byClient[c]++
	n.total++
	return func() {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if n.byClient[c]--; n.byClient[c] == 0 {
			delete(n.byClient, c)
		}
		n.total--
	}, nil
}

// admitStream admits one more long request (a hold, a campaign, an
// observe, a session's lock request) of r's client.
func (srv *Server) admitStream(r *http.Request) (func(), error) {
	return srv.admit(&srv.streamCounts, clientOf(r), srv.cfg.MaxClientStreams, srv.cfg.MaxStreams,
		defaultMaxClientStreams, defaultMaxStreams, "streams")
}

// admitSession admits one more session of r's client.
func (srv *Server) admitSession(r *http.Request) (func(), error) {
	return srv.admit(&srv.sessionCounts, clientOf(r), srv.cfg.MaxClientSessions, srv.cfg.MaxSessions,
		defaultMaxClientSessions, defaultMaxSessions, "sessions")
}

func orDefault[T int | time.Duration](n, def T) T {
	if n > 0 {
		return n
	}
	return def
}

// ownerOf names r's client as the owner of a hold (holds.go): its etcd
// user and password (credKey) with client-auth, else its exact remote IP,
// or "local" for a unix socket's.
func ownerOf(r *http.Request) string {
	if cred := principalOf(r).cred; cred != "" {
		return "user " + cred
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err == nil && ip != nil {
		return ip.String()
	}
	return "local"
}
