package serve

// This file holds the synchronous release of a stream hold: DELETE
// /v1/holds/{id} answers once the grant's guarded delete has committed, so
// a client can hold in a loop at full speed (release, then the next hold,
// with no wait behind its own old grant). The id is in the stream's
// granted line: 128 random bits, a capability like a session id, and only
// the client (remote address) that holds may use it.

import (
	"net/http"
	"sync"

	"github.com/etcdlock/etcdlock"
)

// heldStream is an open stream's grant as DELETE /v1/holds/{id} sees it.
type heldStream struct {
	// Set when the grant is in, then read-only.
	name   string
	token  etcdlock.Token
	client string       // ownerOf the request that holds
	end    func() error // the grant's release (once; its result kept)
	// released is closed by the DELETE once end returned nil: the stream
	// then says "released" and ends.
	released  chan struct{}
	closeOnce sync.Once
}

// addHold registers h under a new id, until the returned func is called.
func (srv *Server) addHold(h *heldStream) (id string, remove func()) {
	id = newSessionID()
	srv.mu.Lock()
	srv.holds[id] = h
	srv.mu.Unlock()
	return id, func() {
		srv.mu.Lock()
		delete(srv.holds, id)
		srv.mu.Unlock()
	}
}

// releaseHold is DELETE /v1/holds/{id}: it releases the hold and answers
// 200 {"released":true,"name":N,"token":T} once the guarded delete has
// committed; 404 not_held for an id unknown, ended, or of another client;
// the release's error if it failed (the stream then goes on as before).
func (srv *Server) releaseHold(w http.ResponseWriter, r *http.Request) {
	srv.mu.Lock()
	h := srv.holds[r.PathValue("id")]
	srv.mu.Unlock()
	if h == nil || h.client != ownerOf(r) {
		srv.writeError(w, &apiError{code: codeNotHeld, status: http.StatusNotFound,
			msg: "no such hold (it was released, ended, or never was)"})
		return
	}
	if err := h.end(); err != nil {
		srv.writeError(w, err)
		return
	}
	h.closeOnce.Do(func() { close(h.released) })
	writeJSON(w, http.StatusOK, map[string]any{"released": true, "name": h.name, "token": h.token.String()})
}
