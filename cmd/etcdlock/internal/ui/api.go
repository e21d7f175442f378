package ui

// This file holds the HTTP API: the page's data as JSON (the shapes of
// etcdlock status -o json), the event stream, and the Break action.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/shard"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	defaultLimit = 50
	maxLimit     = 500
)

// locksJSON is /api/locks's answer: one page of the names that match.
type locksJSON struct {
	Prefix     string `json:"prefix"`
	KeyPrefix  string `json:"key_prefix"`
	Loaded     bool   `json:"loaded"`
	Error      string `json:"error,omitempty"`
	Revision   int64  `json:"revision"`
	Names      int    `json:"names"`   // under the prefix
	Matched    int    `json:"matched"` // of them, matching the filter
	Offset     int    `json:"offset"`
	Limit      int    `json:"limit"`
	AllowBreak bool   `json:"allow_break"`
	Sharded    bool   `json:"sharded,omitempty"` // every lock names its cluster
	// Clusters are a sharded page's clusters, each with its failure if it
	// has one (its names are then missing, or as last seen).
	Clusters []clusterJSON     `json:"clusters,omitempty"`
	Locks    []lockjson.Status `json:"locks"`
}

// apiError writes {"error": msg} with code.
func apiError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone
}

// intParam reads a non-negative integer query parameter.
func intParam(r *http.Request, name string, def, most int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > most {
		return 0, fmt.Errorf("%s=%q: want a whole number from 0 to %d", name, v, most)
	}
	return n, nil
}

// handleLocks serves one page of the names that contain ?filter=, from
// ?offset= (default 0), ?limit= at a time (default 50, at most 500).
func (s *Server) handleLocks(w http.ResponseWriter, r *http.Request) {
	offset, err := intParam(r, "offset", 0, 1<<30)
	if err == nil {
		var limit int
		if limit, err = intParam(r, "limit", defaultLimit, maxLimit); err == nil {
			s.serveLocks(w, r, r.URL.Query().Get("filter"), offset, max(limit, 1))
			return
		}
	}
	apiError(w, http.StatusBadRequest, "%v", err)
}

func (s *Server) serveLocks(w http.ResponseWriter, r *http.Request, filter string, offset, limit int) {
	out := locksJSON{Prefix: s.cfg.Prefix, KeyPrefix: s.keyPrefix, Offset: offset, Limit: limit,
		AllowBreak: s.cfg.AllowBreak, Sharded: s.sharded(), Locks: []lockjson.Status{}}
	s.mu.Lock()
	out.Loaded, out.Revision, out.Names, out.Clusters = s.loaded(), s.rev(), s.nnames(), s.clusters()
	if err := s.readErr(); err != nil {
		out.Error = errorText(err, s.keyPrefix)
	}
	names := s.match(filter)
	out.Matched = len(names)
	var states []shard.State
	for _, name := range names[min(offset, len(names)):min(offset+limit, len(names))] {
		states = append(states, s.state(name))
	}
	s.mu.Unlock()
	out.Locks = s.withTTLs(r.Context(), states)
	writeJSON(w, http.StatusOK, out)
}

// withTTLs returns states in their JSON shape, with the time left on their
// leases.
func (s *Server) withTTLs(ctx context.Context, states []shard.State) []lockjson.Status {
	leases := map[string][]clientv3.LeaseID{} // by cluster: lease ids are per cluster
	for _, st := range states {
		for _, e := range append(append([]etcdlock.Entry(nil), st.Holders...), st.Waiters...) {
			leases[st.Cluster] = append(leases[st.Cluster], e.Lease)
		}
	}
	ttls := map[string]map[clientv3.LeaseID]int64{}
	for id, ls := range leases {
		ttls[id] = s.ttlsOf(id).timeLeft(ctx, ls)
	}
	now := time.Now()
	out := make([]lockjson.Status, 0, len(states))
	for i := range states {
		out = append(out, lockjson.FromShardState(&states[i], ttls[states[i].Cluster], now))
	}
	return out
}

// handleLock serves one name's state (free: no holder and no waiters).
func (s *Server) handleLock(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		apiError(w, http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "etcdlock: "))
		return
	}
	if !strings.HasPrefix(name, s.cfg.Prefix) {
		apiError(w, http.StatusNotFound, "%q is outside this page's prefix %q", name, s.cfg.Prefix)
		return
	}
	s.mu.Lock()
	st := s.state(name)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.withTTLs(r.Context(), []shard.State{st})[0])
}

// handleTimeline serves the kept events numbered from ?since= on.
func (s *Server) handleTimeline(w http.ResponseWriter, r *http.Request) {
	since, err := intParam(r, "since", 0, 1<<62)
	if err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.mu.Lock()
	evs := s.tl.since(int64(since))
	next := s.tl.next
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"events": evs, "next": next})
}

// handleChart serves grants per second and waiters over the last 15
// minutes.
func (s *Server) handleChart(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	c := s.ch.json(time.Now(), s.nwait())
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, c)
}

// handleStream serves the server-sent events: "change" when the view
// moved, "timeline" with new events, "resync" when this stream fell
// behind and must read everything again.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		apiError(w, http.StatusInternalServerError, "streaming is not supported here")
		return
	}
	st := s.hub.subscribe()
	if st == nil {
		apiError(w, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	defer s.hub.unsubscribe(st)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-st.done:
			return
		case <-keep.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case m := <-st.ch:
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", m.event, m.data)
		}
		fl.Flush()
	}
}

// breakRequest is /api/break's body.
type breakRequest struct {
	Name  string `json:"name"`
	Token int64  `json:"token"`
}

// handleBreak breaks exactly the grant named by the body, guarded by its
// token (see etcdlock.Break): 200 when it was deleted, 409 when that grant
// is no longer held (nothing changed), 403 without --allow-break.
func (s *Server) handleBreak(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.AllowBreak {
		apiError(w, http.StatusForbidden, "this page is read-only: start etcdlock ui with --allow-break to break grants")
		return
	}
	// A JSON body cannot come from another site's plain form post, and a
	// Host that is an address (not a name) cannot come from a page that
	// rebound its own name to this address (DNS rebinding).
	if !addressHost(r.Host) {
		apiError(w, http.StatusForbidden, "break only through an address (such as 127.0.0.1:8080), not through the name %q", r.Host)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		apiError(w, http.StatusUnsupportedMediaType, "send the break as JSON: {\"name\": ..., \"token\": ...}")
		return
	}
	var req breakRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "the break's body: %v", err)
		return
	}
	if !strings.HasPrefix(req.Name, s.cfg.Prefix) {
		apiError(w, http.StatusNotFound, "%q is outside this page's prefix %q", req.Name, s.cfg.Prefix)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	cli := s.clientOf(req.Name)
	if cli == nil {
		apiError(w, http.StatusBadGateway, "the cluster of %q cannot be reached yet", req.Name)
		return
	}
	err := etcdlock.Break(ctx, cli, req.Name, etcdlock.Token(req.Token))
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]any{"broken": true, "name": req.Name, "token": req.Token})
	case errors.Is(err, etcdlock.ErrNotHeld):
		apiError(w, http.StatusConflict, "token %d of %q is no longer held (released, broken, or its lease ended); nothing was changed", req.Token, req.Name)
	case errors.Is(err, etcdlock.ErrInvalidName), errors.Is(err, etcdlock.ErrInvalidArgument):
		apiError(w, http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "etcdlock: "))
	default:
		apiError(w, http.StatusBadGateway, "%s", errorText(err, s.keyPrefix))
	}
}

// errorText explains a failure to read, watch or write the prefix; a
// permission error names the range the user's role lacks.
func errorText(err error, keyPrefix string) string {
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied), strings.Contains(err.Error(), "permission denied"):
		return fmt.Sprintf("permission denied: your etcd role cannot read %q; ask for read on that prefix, or start etcdlock ui with a --prefix your role can read", keyPrefix)
	case errors.Is(err, rpctypes.ErrUserEmpty), strings.Contains(err.Error(), "user name is empty"):
		return "etcd has authentication enabled: give --user (and a password)"
	}
	return strings.TrimPrefix(err.Error(), "etcdlock: ")
}

// addressHost reports whether host (a request's Host, with or without a
// port) is an IP address or "localhost".
func addressHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return host == "localhost" || net.ParseIP(host) != nil
}
