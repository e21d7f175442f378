package serve

// This file holds the stream holds' shared sessions: a session (a lease,
// a keepalive stream) per TTL in use, and a few more while many holds of
// that TTL run at once (per user's TTL with client-auth: a user's sessions
// act through that user's client), opened on first use, replaced when
// lost, and each closed once no request has used it for Config.SharedIdle,
// so that a client trying many TTLs leaves no lease behind.

import (
	"context"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
)

// defaultSharedIdle is Config.SharedIdle's default.
const defaultSharedIdle = 30 * time.Second

// maxSharedTTLs bounds the TTLs with shared sessions at once, of each
// user (of the server without client-auth): a client trying many TTLs is
// refused too_many past it.
const maxSharedTTLs = 16

// A TTL's holds share one session until it carries sharedFill of them at
// once; past that a second opens, up to sharedPerTTL (each session has its
// own connection to the leader, so holds in parallel are not queued on
// one). Holds one after another use one lease.
const (
	sharedFill   = 4
	sharedPerTTL = 4
)

// sharedKey is whose shared sessions of which TTL: user and cred are ""
// without client-auth. A session is of one password of its user (cred,
// see principal): one opened with a password etcd no longer takes must
// serve no request with the new one, and one opened with the new one no
// request with the old.
type sharedKey struct {
	user, cred string
	ttl        time.Duration
}

// sharedSession is one shared session and who uses it. Its fields after
// s and release are guarded by Server.mu.
type sharedSession struct {
	k       sharedKey
	s       acquire.Session
	release func()      // ends s's use of its user's client
	uses    int         // requests holding, waiting or reading on s
	idle    *time.Timer // closes s; set while uses is 0
}

// useShared returns a live shared session of p's of ttl, opening one (or
// a replacement of a lost one: its keys went with its lease) when none has
// room, and the function that ends this use (call it once). It fails with
// errStopping once the server stops, too_many past maxSharedTTLs, or with
// NewSession's error.
func (srv *Server) useShared(ctx context.Context, p *principal, ttl time.Duration) (acquire.Session, func(), error) {
	k := sharedKey{p.user, p.cred, ttl}
	if sh, err := srv.takeShared(k, false); sh != nil || err != nil {
		return sharedUse(sh, srv, err)
	}
	release := p.keep()
	s, err := srv.newSession(ctx, p, etcdlock.WithTTL(ttl), etcdlock.WithIdentity(srv.cfg.Identity),
		etcdlock.WithLogger(srv.cfg.Logger), etcdlock.WithObserver(srv.obs))
	if err != nil {
		release()
		return nil, nil, err
	}
	sh := srv.addShared(&sharedSession{k: k, s: s, release: release})
	if sh == nil {
		_ = s.Close()
		release()
		return nil, nil, errStopping
	}
	return sh.s, srv.doneShared(sh), nil
}

func sharedUse(sh *sharedSession, srv *Server, err error) (acquire.Session, func(), error) {
	if err != nil {
		return nil, nil, err
	}
	return sh.s, srv.doneShared(sh), nil
}

// takeShared counts a use of k's least used live session and returns it,
// unless it is full (sharedFill) and k may have another (or, with force,
// whenever one is live); nil then, and the caller opens one. Lost sessions
// are dropped (closed in the background). It fails with errStopping once
// the server stops, and with too_many when k would be a new TTL past
// maxSharedTTLs.
func (srv *Server) takeShared(k sharedKey, force bool) (*sharedSession, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.closed {
		return nil, errStopping
	}
	var live []*sharedSession
	var least *sharedSession
	for _, sh := range srv.shared[k] {
		if sh.s.Err() != nil {
			srv.closeLater(sh.s, sh.release)
			continue
		}
		live = append(live, sh)
		if least == nil || sh.uses < least.uses {
			least = sh
		}
	}
	srv.setShared(k, live)
	switch {
	case least != nil && (force || least.uses < sharedFill || len(live) >= sharedPerTTL):
		srv.use(least)
		return least, nil
	case least == nil && srv.sharedTTLs(k.user) >= maxSharedTTLs:
		return nil, errorf(codeTooMany, "the server has shared leases of %d ttls, the most it keeps: use one of theirs", maxSharedTTLs)
	}
	return nil, nil
}

// addShared adds fresh, a new session of fresh.k, and counts a use of it;
// when k has its most sessions meanwhile, it closes fresh and uses the
// least used of them instead. It returns nil once the server stops.
func (srv *Server) addShared(fresh *sharedSession) *sharedSession {
	if len(srv.sharedOf(fresh.k)) >= sharedPerTTL {
		if sh, err := srv.takeShared(fresh.k, true); sh != nil || err != nil {
			_ = fresh.s.Close()
			fresh.release()
			return sh
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.closed {
		return nil
	}
	srv.shared[fresh.k] = append(srv.shared[fresh.k], fresh)
	srv.use(fresh)
	return fresh
}

// use counts one more use of sh. Call with srv.mu held.
func (srv *Server) use(sh *sharedSession) {
	sh.uses++
	if sh.idle != nil {
		sh.idle.Stop()
		sh.idle = nil
	}
}

// sharedOf returns k's sessions.
func (srv *Server) sharedOf(k sharedKey) []*sharedSession {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.shared[k]
}

// setShared sets k's sessions (none: k goes). Call with srv.mu held.
func (srv *Server) setShared(k sharedKey, list []*sharedSession) {
	if len(list) == 0 {
		delete(srv.shared, k)
		return
	}
	srv.shared[k] = list
}

// sharedTTLs counts user's TTLs with shared sessions. Call with srv.mu
// held.
func (srv *Server) sharedTTLs(user string) int {
	n := 0
	for k := range srv.shared {
		if k.user == user {
			n++
		}
	}
	return n
}

// doneShared returns the end of one use of sh: the last one arms its idle
// close.
func (srv *Server) doneShared(sh *sharedSession) func() {
	return func() {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if sh.uses--; sh.uses == 0 && !srv.closed {
			sh.idle = time.AfterFunc(srv.sharedIdle(), func() { srv.closeIdle(sh) })
		}
	}
}

// closeIdle closes sh if nobody has used it since its idle timer was
// armed and it is still one of its TTL's.
func (srv *Server) closeIdle(sh *sharedSession) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.closed || sh.uses > 0 {
		return
	}
	list := srv.shared[sh.k]
	for i, other := range list {
		if other == sh {
			srv.setShared(sh.k, append(list[:i:i], list[i+1:]...))
			srv.closeLater(sh.s, sh.release)
			return
		}
	}
}

// closeLater closes s, then ends its use of its client (release), in a
// goroutine that stop waits for (srv.ending). Call with srv.mu held,
// before stop sets closed.
func (srv *Server) closeLater(s acquire.Session, release func()) {
	srv.ending.Add(1)
	go func() {
		defer srv.ending.Done()
		_ = s.Close()
		release()
	}()
}

// sharedIdle is Config.SharedIdle, or its default.
func (srv *Server) sharedIdle() time.Duration {
	if d := srv.cfg.SharedIdle; d > 0 {
		return d
	}
	return defaultSharedIdle
}
