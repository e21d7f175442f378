package serve

// This file holds the stream holds' shared sessions: one session (one
// lease, one keepalive stream) per TTL in use, opened on first use,
// replaced when lost, and closed once no request has used it for
// Config.SharedIdle, so that a client trying many TTLs leaves no lease
// behind.

import (
	"context"
	"time"

	"github.com/etcdlock/etcdlock"
)

// defaultSharedIdle is Config.SharedIdle's default.
const defaultSharedIdle = 30 * time.Second

// maxSharedTTLs bounds the TTLs with a shared session (a lease each) at
// once: a client trying many TTLs is refused too_many past it.
const maxSharedTTLs = 16

// sharedSession is the session of one TTL and who uses it. Its fields are
// guarded by Server.mu.
type sharedSession struct {
	s    *etcdlock.Session
	uses int         // requests holding, waiting or reading on s
	idle *time.Timer // closes s; set while uses is 0
}

// useShared returns the live session of ttl, opening one (or a
// replacement of a lost one: its keys went with its lease), and the
// function that ends this use (call it once). It fails with errStopping
// once the server stops, or with NewSession's error.
func (srv *Server) useShared(ctx context.Context, ttl time.Duration) (*etcdlock.Session, func(), error) {
	if s, ok := srv.takeShared(ttl, nil); ok {
		return s, srv.doneShared(ttl), nil
	}
	if err := srv.roomForShared(ttl); err != nil {
		return nil, nil, err
	}
	s, err := srv.newSession(ctx, etcdlock.WithTTL(ttl), etcdlock.WithIdentity(srv.cfg.Identity),
		etcdlock.WithLogger(srv.cfg.Logger), etcdlock.WithObserver(srv.obs))
	if err != nil {
		return nil, nil, err
	}
	cur, ok := srv.takeShared(ttl, s)
	switch {
	case !ok:
		_ = s.Close()
		return nil, nil, errStopping
	case cur != s: // another request opened one meanwhile
		_ = s.Close()
	}
	return cur, srv.doneShared(ttl), nil
}

// takeShared counts a use of ttl's live session and returns it. Without a
// live one it installs fresh (when not nil) and returns it, closing the
// lost one in the background; with fresh nil it returns false. It returns
// false once the server is stopping.
func (srv *Server) takeShared(ttl time.Duration, fresh *etcdlock.Session) (*etcdlock.Session, bool) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.closed {
		return nil, false
	}
	sh := srv.shared[ttl]
	if sh == nil || sh.s.Err() != nil {
		if fresh == nil {
			return nil, false
		}
		if sh != nil {
			srv.closeLater(sh.s)
		} else {
			sh = &sharedSession{}
			srv.shared[ttl] = sh
		}
		sh.s = fresh
	}
	sh.uses++
	if sh.idle != nil {
		sh.idle.Stop()
		sh.idle = nil
	}
	return sh.s, true
}

// doneShared returns the end of one use of ttl's session: the last one
// arms its idle close.
func (srv *Server) doneShared(ttl time.Duration) func() {
	return func() {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		sh := srv.shared[ttl]
		if sh == nil { // the server stopped
			return
		}
		if sh.uses--; sh.uses == 0 && !srv.closed {
			s := sh.s
			sh.idle = time.AfterFunc(srv.sharedIdle(), func() { srv.closeIdle(ttl, s) })
		}
	}
}

// closeIdle closes ttl's session s if nobody has used it since its idle
// timer was armed and it is still ttl's.
func (srv *Server) closeIdle(ttl time.Duration, s *etcdlock.Session) {
	srv.mu.Lock()
	sh := srv.shared[ttl]
	if srv.closed || sh == nil || sh.s != s || sh.uses > 0 {
		srv.mu.Unlock()
		return
	}
	delete(srv.shared, ttl)
	srv.closeLater(s)
	srv.mu.Unlock()
}

// closeLater closes s in a goroutine that stop waits for (srv.ending).
// Call with srv.mu held, before stop sets closed.
func (srv *Server) closeLater(s *etcdlock.Session) {
	srv.ending.Add(1)
	go func() {
		defer srv.ending.Done()
		_ = s.Close()
	}()
}

// sharedIdle is Config.SharedIdle, or its default.
func (srv *Server) sharedIdle() time.Duration {
	if d := srv.cfg.SharedIdle; d > 0 {
		return d
	}
	return defaultSharedIdle
}

// roomForShared returns too_many when a new shared session for ttl would
// pass maxSharedTTLs (a lost one's replacement takes its place).
func (srv *Server) roomForShared(ttl time.Duration) error {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.shared[ttl] == nil && len(srv.shared) >= maxSharedTTLs {
		return errorf(codeTooMany, "the server has shared leases of %d ttls, the most it keeps: use one of theirs", len(srv.shared))
	}
	return nil
}
