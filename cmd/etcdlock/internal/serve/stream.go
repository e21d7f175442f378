package serve

// This file holds the holds by stream: POST /v1/hold and POST
// /v1/campaign. A grant lives as long as its response stays open: the
// stream says "granted" (or "elected"), then "alive" with the session's
// ValidUntil, and "lost" with the cause if the grant ends first; when the
// client goes (its connection closes), the grant is released at once,
// guarded by its create revision.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// Bounds of the TTL and wait fields.
const (
	defaultTTL = 10 * time.Second
	maxTTL     = time.Hour
	maxWait    = 24 * time.Hour
	// aliveEvery bounds the time between two "alive" lines.
	aliveEvery = 2 * time.Second
	// releaseBound bounds a release when a stream ends.
	releaseBound = 5 * time.Second
)

// holdRequest is the body of /v1/hold (and, with Value, /v1/campaign).
type holdRequest struct {
	Name     string `json:"name"`
	Wait     string `json:"wait"`
	Identity string `json:"identity"`
	TTL      string `json:"ttl"`
	Try      bool   `json:"try"`
	Kind     string `json:"kind"` // "mutex" (default), "semaphore", "read", "write"
	N        int    `json:"n"`    // a semaphore's size
	Value    string `json:"value"`
}

// parsed checks the request and returns its TTL and wait.
func (req *holdRequest) parsed() (ttl, wait time.Duration, err error) {
	if err := layout.ValidateName(req.Name, etcdlock.ErrInvalidName); err != nil {
		return 0, 0, err
	}
	if ttl, err = parseTTL(req.TTL); err != nil {
		return 0, 0, err
	}
	if wait, err = duration("wait", req.Wait, 0, maxWait); err != nil {
		return 0, 0, err
	}
	return ttl, wait, checkKind(req.Kind, req.N)
}

// parseTTL parses a ttl field: whole seconds from 1s to maxTTL, default
// defaultTTL.
func parseTTL(s string) (time.Duration, error) {
	ttl, err := duration("ttl", s, time.Second, maxTTL)
	switch {
	case err != nil:
		return 0, err
	case ttl == 0:
		return defaultTTL, nil
	case ttl%time.Second != 0:
		return 0, errorf(codeInvalidArgument, "ttl %v must be whole seconds (etcd's unit)", ttl)
	}
	return ttl, nil
}

// holdContext is ctx with the request's identity (if any) on its keys.
func holdContext(ctx context.Context, identity string) (context.Context, error) {
	if identity == "" {
		return ctx, nil
	}
	return etcdlock.WithHolderIdentity(ctx, identity)
}

// grantLine is the first line of a hold or campaign stream.
type grantLine struct {
	Event string `json:"event"`
	Name  string `json:"name"`
	Token string `json:"token"`
	Key   string `json:"key"`
	Lease string `json:"lease"`
	Hold  string `json:"hold"` // the id of DELETE /v1/holds/{id} (holds.go)
}

func (srv *Server) hold(w http.ResponseWriter, r *http.Request) {
	var req holdRequest
	if err := srv.decode(w, r, &req); err != nil {
		srv.writeError(w, err)
		return
	}
	srv.stream(w, r, &req, "granted", func(ctx context.Context, s acquire.Session) (grant, error) {
		l, err := take(ctx, s, req.Name, req.Kind, req.N, req.Try)
		if err != nil {
			return grant{}, err
		}
		return grant{l.Token(), l.Key(), l.Context, l.Unlock}, nil
	})
}

func (srv *Server) campaign(w http.ResponseWriter, r *http.Request) {
	var req holdRequest
	if err := srv.decode(w, r, &req); err != nil {
		srv.writeError(w, err)
		return
	}
	if req.Kind != "" || req.N != 0 || req.Try {
		srv.writeError(w, errorf(codeInvalidArgument, "a campaign takes name, value, wait, identity and ttl only"))
		return
	}
	srv.stream(w, r, &req, "elected", func(ctx context.Context, s acquire.Session) (grant, error) {
		l, err := s.NewElection(req.Name).Campaign(ctx, req.Value)
		if err != nil {
			return grant{}, err
		}
		return grant{l.Token(), l.Key(), l.Context, l.Resign}, nil
	})
}

// grant is what a stream holds: a Lock or a Leadership.
type grant struct {
	token etcdlock.Token
	key   string
	// ctx returns a context that ends with the grant, with its cause; its
	// first call starts a watch of the grant's key (see watchAfter).
	ctx     func() context.Context
	release func(context.Context) error
}

// end releases g, bounded; a release that does not finish is completed by
// the session's reaper.
func (g grant) end() error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseBound)
	defer cancel()
	return g.release(ctx)
}

// stream takes a grant with take on the shared session of the request's
// TTL and holds it while the response is open (see the file's header).
func (srv *Server) stream(w http.ResponseWriter, r *http.Request, req *holdRequest, event string, take func(context.Context, acquire.Session) (grant, error)) {
	srv.streams.Add(1)
	defer srv.streams.Done()
	ttl, wait, err := req.parsed()
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
	if err := boundConn(r.Context(), ttl); err != nil {
		srv.writeError(w, errorf(codeUnavailable, "bounding the connection by the ttl: %v", err))
		return
	}
	ctx, cancel := srv.untilStopping(r.Context())
	defer cancel()
	hctx, err := holdContext(ctx, req.Identity)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	wctx, wcancel := waitCtx(hctx, wait)
	s, done, g, err := srv.acquireShared(ctx, wctx, principalOf(r), ttl, take)
	wcancel()
	if err != nil {
		srv.writeError(w, err)
		return
	}
	defer done() // after the release (deferred below)
	h := &heldStream{name: req.Name, token: g.token, client: ownerOf(r), released: make(chan struct{}),
		end: sync.OnceValue(g.end)} // at most once: a second Unlock waits for the first's result
	defer h.end()
	id, remove := srv.addHold(h)
	defer remove()
	srv.metrics.streams.Inc()
	defer srv.metrics.streams.Dec()
	srv.keepOpen(ctx, w, s, g, h, grantLine{Event: event, Name: req.Name, Token: g.token.String(), Key: g.key,
		Lease: strconv.FormatInt(int64(acquire.Lease(s)), 16), Hold: id})
}

// keepOpen writes the stream's lines until the client goes, the server
// stops, the grant ends (then a "lost" line with its cause), or a DELETE
// of the hold released it (then a "released" line).
func (srv *Server) keepOpen(ctx context.Context, w http.ResponseWriter, s acquire.Session, g grant, h *heldStream, first grantLine) {
	out := newLines(w, s.TTL())
	defer out.done()
	say := out.say
	sayLost := func(cause any) { _ = say(map[string]string{"event": "lost", "cause": fmt.Sprint(cause)}) }
	_ = say(first)
	tick := time.NewTicker(min(aliveEvery, s.TTL()/3))
	defer tick.Stop()
	// Until the first tick the stream watches only the session (a hold
	// that short costs no watch); from then on the grant's own key too, so
	// a break is reported within a tick.
	var gone <-chan struct{}
	var gctx context.Context
	for {
		select {
		case <-ctx.Done():
			if context.Cause(ctx) == errStopping {
				cause := "the server is stopping: released"
				if err := h.end(); err != nil {
					cause = fmt.Sprintf("the server is stopping: %v", err)
				}
				sayLost(cause)
			}
			return
		case <-h.released:
			out.last(map[string]string{"event": "released"})
			return
		case <-s.Done():
			sayLost(s.Err())
			return
		case <-gone:
			sayLost(context.Cause(gctx))
			return
		case <-tick.C:
			if gctx == nil {
				gctx = g.ctx()
				gone = gctx.Done()
				if gctx.Err() != nil {
					continue // report the loss, not a last "alive"
				}
			}
			if say(map[string]string{"event": "alive", "valid_until": s.ValidUntil().UTC().Format(time.RFC3339Nano)}) != nil {
				return // the client went
			}
		}
	}
}

// acquireShared takes a grant with take (bounded by wctx) on the shared
// session of ttl (p's), and returns it with the end of the session's use (call
// it after the release). A session found lost as the grant was asked for
// (it was lost just before, and nobody had replaced it yet) is replaced
// once: the client never had that session, so its loss is not the
// client's to hear.
func (srv *Server) acquireShared(ctx, wctx context.Context, p *principal, ttl time.Duration, take func(context.Context, acquire.Session) (grant, error)) (acquire.Session, func(), grant, error) {
	for try := 0; ; try++ {
		s, done, err := srv.useShared(ctx, p, ttl)
		if err != nil {
			return nil, nil, grant{}, err
		}
		g, err := take(wctx, s)
		if err == nil {
			return s, done, g, nil
		}
		done()
		if try > 0 || s.Err() == nil || wctx.Err() != nil {
			return nil, nil, grant{}, err
		}
	}
}

// lines writes a stream's NDJSON lines. A client that stops reading holds
// no longer than the ttl once its receive window is full (connbound.go):
// each line has a write deadline of ttl; until the window is full its
// kernel acknowledges the small alive lines, which takes long.
type lines struct {
	w   http.ResponseWriter
	enc *json.Encoder
	rc  *http.ResponseController
	ttl time.Duration
}

// newLines starts the stream's 200 answer.
func newLines(w http.ResponseWriter, ttl time.Duration) *lines {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	return &lines{w: w, enc: json.NewEncoder(w), rc: http.NewResponseController(w), ttl: ttl}
}

// say writes v and sends it at once.
func (l *lines) say(v any) error {
	_ = l.rc.SetWriteDeadline(time.Now().Add(l.ttl))
	err := l.enc.Encode(v)
	if f, ok := l.w.(http.Flusher); ok {
		f.Flush()
	}
	return err
}

// last writes v without sending it: the response's end, written as the
// handler returns, goes out with it (one write, not two).
func (l *lines) last(v any) {
	_ = l.rc.SetWriteDeadline(time.Now().Add(l.ttl))
	_ = l.enc.Encode(v)
}

// done lifts the write deadline (the connection may carry the next
// request).
func (l *lines) done() { _ = l.rc.SetWriteDeadline(time.Time{}) }
