package serve

// This file holds the reads: /v1/state, /v1/leader and /v1/observe.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// nameParam returns the valid name of ?name=, or writes the error.
func (srv *Server) nameParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.URL.Query().Get("name")
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		srv.writeError(w, err)
		return "", false
	}
	return name, true
}

func (srv *Server) state(w http.ResponseWriter, r *http.Request) {
	name, ok := srv.nameParam(w, r)
	if !ok {
		return
	}
	st, err := srv.cfg.State(r.Context(), principalOf(r).cli, name)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// leaderJSON is an election's leader as /v1/leader and /v1/observe show it.
type leaderJSON struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Token    string `json:"token"`
	Key      string `json:"key"`
	Identity string `json:"identity"`
	Lease    string `json:"lease"`
}

// leaderOf returns li's JSON shape; nil when nobody leads.
func leaderOf(name string, li etcdlock.LeaderInfo) *leaderJSON {
	if li.Key == "" {
		return nil
	}
	return &leaderJSON{Name: name, Value: li.Value, Token: li.Token.String(), Key: li.Key,
		Identity: li.Identity, Lease: fmt.Sprintf("%x", int64(li.Lease))}
}

func (srv *Server) leader(w http.ResponseWriter, r *http.Request) {
	name, ok := srv.nameParam(w, r)
	if !ok {
		return
	}
	s, done, err := srv.useShared(r.Context(), principalOf(r), defaultTTL)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	defer done()
	li, err := s.NewElection(name).Leader(r.Context())
	if errors.Is(err, etcdlock.ErrNoLeader) {
		writeJSON(w, http.StatusOK, map[string]any{"name": name, "leader": nil})
		return
	}
	if err != nil {
		srv.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "leader": leaderOf(name, li)})
}

// observe streams the election's leader as server-sent events: one
// "leader" event at once and one at every change (data: the leader, or null
// when nobody leads), until the client goes or the server stops.
func (srv *Server) observe(w http.ResponseWriter, r *http.Request) {
	name, ok := srv.nameParam(w, r)
	if !ok {
		return
	}
	srv.streams.Add(1)
	defer srv.streams.Done()
	admitted, err := srv.admitStream(r)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	defer admitted()
	defer srv.conns.streaming(r.Context())()
	if err := boundConn(r.Context(), defaultTTL); err != nil {
		srv.writeError(w, errorf(codeUnavailable, "bounding the connection: %v", err))
		return
	}
	ctx, cancel := srv.untilStopping(r.Context())
	defer cancel()
	s, done, err := srv.useShared(ctx, principalOf(r), defaultTTL)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	defer done()
	ch := s.NewElection(name).Observe(ctx)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for li := range ch {
		b, _ := json.Marshal(leaderOf(name, li))
		if _, err := fmt.Fprintf(w, "event: leader\ndata: %s\n\n", b); err != nil {
			cancel()
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}
