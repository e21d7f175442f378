package serve

// This file holds the holds by session, for clients that cannot keep a
// stream open: POST /v1/sessions opens an etcdlock session of its own lease;
// the server keeps that lease alive only while the client calls keepalive
// within the TTL (else it closes the session: its keys are deleted, guarded,
// and its lease revoked); locks taken on it are released by token.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
)

// clientSession is one session of /v1/sessions.
type clientSession struct {
	// Set when opened, then read-only.
	id   string
	cred string // the credentials that opened it (principal.go): only requests with them use it
	s    acquire.Session
	ttl  time.Duration
	free func() // ends the session's count against the bounds (limits.go) and its use of its client

	mu     sync.Mutex
	expiry *time.Timer                    // closes the session; reset by each keepalive
	busy   int                            // lock requests in flight: each counts as a keepalive
	closed bool                           // set by endSession: keepalives fail from then on
	locks  map[etcdlock.Token]sessionLock // the grants not yet unlocked
}

type sessionLock struct {
	name string
	l    *etcdlock.Lock
}

// newSessionID returns 128 random bits in hex: a session id is a
// capability, so it must not be guessable.
func newSessionID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func (srv *Server) openSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TTL      string `json:"ttl"`
		Identity string `json:"identity"`
	}
	if err := srv.decode(w, r, &req); err != nil {
		srv.writeError(w, err)
		return
	}
	ttl, err := parseTTL(req.TTL)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	opts := []etcdlock.SessionOption{etcdlock.WithTTL(ttl), etcdlock.WithLogger(srv.cfg.Logger), etcdlock.WithObserver(srv.obs)}
	if req.Identity != "" {
		opts = append(opts, etcdlock.WithIdentity(req.Identity))
	}
	admitted, err := srv.admitSession(r)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	p := principalOf(r)
	release := p.keep()
	free := func() { release(); admitted() }
	s, err := srv.newSession(r.Context(), p, opts...)
	if err != nil {
		free()
		srv.writeError(w, err)
		return
	}
	cs := &clientSession{id: newSessionID(), cred: p.cred, s: s, ttl: ttl, free: free, locks: map[etcdlock.Token]sessionLock{}}
	srv.mu.Lock()
	closed := srv.closed
	if !closed {
		srv.sessions[cs.id] = cs
		cs.expiry = time.AfterFunc(ttl, func() { srv.expire(cs) })
	}
	srv.mu.Unlock()
	if closed {
		_ = s.Close()
		free()
		srv.writeError(w, errStopping)
		return
	}
	srv.metrics.sessions.Inc()
	writeJSON(w, http.StatusOK, map[string]string{"session": cs.id, "ttl": ttl.String()})
}

// session returns the open session of r's id, if r's credentials opened
// it (its user's, with the same password: the session acts through their
// client), or writes the error (another's session is as unknown as none).
func (srv *Server) session(w http.ResponseWriter, r *http.Request) *clientSession {
	srv.mu.Lock()
	cs := srv.sessions[r.PathValue("id")]
	srv.mu.Unlock()
	if cs != nil && cs.cred != principalOf(r).cred {
		cs = nil
	}
	if cs == nil {
		srv.writeError(w, errorf(codeSessionExpired, "no such session (it expired, was closed, or never was)"))
	}
	return cs
}

// expire ends cs a TTL after its last keepalive, unless a lock request of
// it is in flight (the request's end counts as a keepalive).
func (srv *Server) expire(cs *clientSession) {
	cs.mu.Lock()
	if cs.busy > 0 {
		cs.mu.Unlock()
		return
	}
	cs.mu.Unlock()
	srv.endSession(cs.id)
}

// request marks a lock request of cs in flight (keeping the session from
// expiring) until the returned func is called, which counts as a keepalive.
func (cs *clientSession) request() (done func()) {
	cs.mu.Lock()
	cs.busy++
	cs.mu.Unlock()
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.busy--
		if !cs.closed {
			cs.expiry.Reset(cs.ttl)
		}
	}
}

// endSession closes the session id, if it is still open: its keys are
// deleted (guarded) and its lease revoked.
func (srv *Server) endSession(id string) {
	srv.mu.Lock()
	cs := srv.sessions[id]
	delete(srv.sessions, id)
	if cs != nil {
		srv.ending.Add(1)
	}
	srv.mu.Unlock()
	if cs == nil {
		return
	}
	defer srv.ending.Done()
	cs.mu.Lock()
	cs.closed = true
	cs.expiry.Stop()
	cs.mu.Unlock()
	_ = cs.s.Close()
	cs.free()
	srv.metrics.sessions.Dec()
}

func (srv *Server) keepAlive(w http.ResponseWriter, r *http.Request) {
	cs := srv.session(w, r)
	if cs == nil {
		return
	}
	if err := cs.s.Err(); err != nil {
		srv.endSession(cs.id)
		srv.writeError(w, err)
		return
	}
	if lost := cs.lost(); lost != "" {
		// A keepalive answered vouches for every lock of the session (the
		// client counts them held until then + ttl): one lost (its cluster
		// session expired on a sharded deployment, a break, a forced move)
		// ends the session.
		srv.endSession(cs.id)
		srv.writeError(w, errorf(codeSessionExpired, "the session lost %s: it is closed", lost))
		return
	}
	cs.mu.Lock()
	closed := cs.closed
	if !closed {
		cs.expiry.Reset(cs.ttl)
	}
	cs.mu.Unlock()
	if closed {
		srv.writeError(w, errorf(codeSessionExpired, "the session expired"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"session": cs.id, "ttl": cs.ttl.String()})
}

// lost names the locks of cs whose grant ended (the token and the cause),
// "" when none did.
func (cs *clientSession) lost() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []string
	for tok, sl := range cs.locks {
		if sl.l.Context().Err() != nil {
			out = append(out, fmt.Sprintf("the lock of %q with token %s (%v)", sl.name, tok, context.Cause(sl.l.Context())))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func (srv *Server) closeSession(w http.ResponseWriter, r *http.Request) {
	if cs := srv.session(w, r); cs != nil {
		srv.endSession(cs.id)
		writeJSON(w, http.StatusOK, struct{}{})
	}
}

func (srv *Server) sessionLock(w http.ResponseWriter, r *http.Request) {
	cs := srv.session(w, r)
	if cs == nil {
		return
	}
	var req holdRequest
	if err := srv.decode(w, r, &req); err != nil {
		srv.writeError(w, err)
		return
	}
	if req.TTL != "" || req.Identity != "" || req.Value != "" {
		srv.writeError(w, errorf(codeInvalidArgument, "a session's lock takes name, wait, try, kind and n only"))
		return
	}
	_, wait, err := req.parsed()
	if err != nil {
		srv.writeError(w, err)
		return
	}
	admitted, err := srv.admitStream(r)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	defer admitted()
	defer srv.conns.streaming(r.Context())()
	// A waiting lock request counts as a keepalive: its connection must not
	// outlive the session's ttl unanswered (connbound.go).
	if err := boundConn(r.Context(), cs.ttl); err != nil {
		srv.writeError(w, errorf(codeUnavailable, "bounding the connection by the ttl: %v", err))
		return
	}
	defer cs.request()()
	ctx, cancel := srv.untilStopping(r.Context())
	defer cancel()
	wctx, wcancel := waitCtx(ctx, wait)
	defer wcancel()
	l, err := take(wctx, cs.s, req.Name, req.Kind, req.N, req.Try)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	if err := ctx.Err(); err != nil {
		// The client went (or the server stops) as it was granted: nobody
		// would know the token, so nobody could unlock it.
		_ = grant{release: l.Unlock}.end()
		srv.writeError(w, errorf(codeUnavailable, "the request ended before the grant was answered: released"))
		return
	}
	cs.mu.Lock()
	cs.locks[l.Token()] = sessionLock{name: req.Name, l: l}
	cs.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"name": req.Name, "token": l.Token().String(), "key": l.Key()})
}

func (srv *Server) sessionUnlock(w http.ResponseWriter, r *http.Request) {
	cs := srv.session(w, r)
	if cs == nil {
		return
	}
	var req struct {
		Name  string `json:"name"`
		Token string `json:"token"`
	}
	if err := srv.decode(w, r, &req); err != nil {
		srv.writeError(w, err)
		return
	}
	tok, err := etcdlock.ParseToken(req.Token)
	if err != nil {
		srv.writeError(w, errorf(codeInvalidArgument, "token: %v", err))
		return
	}
	cs.mu.Lock()
	sl, ok := cs.locks[tok]
	cs.mu.Unlock()
	if !ok || sl.name != req.Name {
		srv.writeError(w, errorf(codeNotHeld, "this session holds no grant of %q with token %s", req.Name, req.Token))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), releaseBound)
	defer cancel()
	err = sl.l.Unlock(ctx)
	if ctx.Err() == nil || err == nil {
		// Final (released, or lost before): forget it. A delete cut short
		// by ctx is finished by the reaper; a retry then answers as it.
		cs.mu.Lock()
		delete(cs.locks, tok)
		cs.mu.Unlock()
	}
	if err != nil {
		srv.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}
