package serve

// This file holds the stream holds' shared sessions: one session (one
// lease, one keepalive stream) per TTL in use (per user's TTL with
// client-auth: a user's session acts through that user's client), opened
// on first use,
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
// once, of each user (of the server without client-auth): a client trying
// many TTLs is refused too_many past it.
const maxSharedTTLs = 16

// sharedKey is whose shared session of which TTL: user and cred are ""
// without client-auth. A session is of one password of its user (cred,
// see principal): one opened with a password etcd no longer takes must
// serve no request with the new one, and one opened with the new one no
// request with the old.
type sharedKey struct {
	user, cred string
	ttl        time.Duration
}

// sharedSession is the session of one TTL and who uses it. Its fields are
// guarded by Server.mu.
type sharedSession struct {
	s       *etcdlock.Session
	release func()      // ends s's use of its user's client
	uses    int         // requests holding, waiting or reading on s
	idle    *time.Timer // closes s; set while uses is 0
}

// useShared returns p's live session of ttl, opening one (or a
// replacement of a lost one: its keys went with its lease), and the
// function that ends this use (call it once). It fails with errStopping
// once the server stops, too_many past maxSharedTTLs, or with NewSession's
// error.
func (srv *Server) useShared(ctx context.Context, p *principal, ttl time.Duration) (*etcdlock.Session, func(), error) {
	k := sharedKey{p.user, p.cred, ttl}
	if s, ok := srv.takeShared(k, nil, nil); ok {
		return s, srv.doneShared(k), nil
	}
	if err := srv.roomForShared(k); err != nil {
		return nil, nil, err
	}
	release := p.keep()
	s, err := srv.newSession(ctx, p, etcdlock.WithTTL(ttl), etcdlock.WithIdentity(srv.cfg.Identity),
		etcdlock.WithLogger(srv.cfg.Logger), etcdlock.WithObserver(srv.obs))
	if err != nil {
		release()
		return nil, nil, err
	}
	cur, ok := srv.takeShared(k, s, release)
	switch {
	case !ok:
		_ = s.Close()
		release()
		return nil, nil, errStopping
	case cur != s: // another request opened one meanwhile
		_ = s.Close()
		release()
	}
	return cur, srv.doneShared(k), nil
}

// takeShared counts a use of k's live session and returns it. Without a
// live one it installs fresh (when not nil; release ends its use of its
// client) and returns it, closing the lost one in the background; with
// fresh nil it returns false. It returns false once the server is
// stopping.
func (srv *Server) takeShared(k sharedKey, fresh *etcdlock.Session, release func()) (*etcdlock.Session, bool) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.closed {
		return nil, false
	}
	sh := srv.shared[k]
	if sh == nil || sh.s.Err() != nil {
		if fresh == nil {
			return nil, false
		}
		if sh != nil {
			srv.closeLater(sh.s, sh.release)
		} else {
			sh = &sharedSession{}
			srv.shared[k] = sh
		}
		sh.s, sh.release = fresh, release
	}
	sh.uses++
	if sh.idle != nil {
		sh.idle.Stop()
		sh.idle = nil
	}
	return sh.s, true
}

// doneShared returns the end of one use of k's session: the last one
// arms its idle close.
func (srv *Server) doneShared(k sharedKey) func() {
	return func() {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		sh := srv.shared[k]
		if sh == nil { // the server stopped
			return
		}
		if sh.uses--; sh.uses == 0 && !srv.closed {
			s := sh.s
			sh.idle = time.AfterFunc(srv.sharedIdle(), func() { srv.closeIdle(k, s) })
		}
	}
}

// closeIdle closes k's session s if nobody has used it since its idle
// timer was armed and it is still k's.
func (srv *Server) closeIdle(k sharedKey, s *etcdlock.Session) {
	srv.mu.Lock()
	sh := srv.shared[k]
	if srv.closed || sh == nil || sh.s != s || sh.uses > 0 {
		srv.mu.Unlock()
		return
	}
	delete(srv.shared, k)
	srv.closeLater(s, sh.release)
	srv.mu.Unlock()
}

// closeLater closes s, then ends its use of its client (release), in a
// goroutine that stop waits for (srv.ending). Call with srv.mu held,
// before stop sets closed.
func (srv *Server) closeLater(s *etcdlock.Session, release func()) {
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

// roomForShared returns too_many when a new shared session for k would
// pass maxSharedTTLs of k's user (a lost one's replacement takes its
// place).
func (srv *Server) roomForShared(k sharedKey) error {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.shared[k] != nil {
		return nil
	}
	n := 0
	for other := range srv.shared {
		if other.user == k.user {
			n++
		}
	}
	if n >= maxSharedTTLs {
		return errorf(codeTooMany, "the server has shared leases of %d ttls, the most it keeps: use one of theirs", n)
	}
	return nil
}
