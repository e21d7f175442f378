// Package serve is etcdlock serve: the library's locks, semaphores,
// read-write locks and elections over HTTP/JSON for programs in any
// language. Holders of a name over HTTP hold ordinary etcdlock keys, so they
// share one FIFO queue and one token sequence with Go holders and with
// etcdlock run.
package serve

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/lockmetrics"
	"github.com/etcdlock/etcdlock/shard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config configures a Server.
type Config struct {
	// AuthToken, when set, is required as "Authorization: Bearer <token>"
	// on every request.
	AuthToken string
	// State answers /v1/state: the JSON shape of etcdlock status -o json,
	// read through cli (the caller's, see ClientAuth).
	State func(ctx context.Context, cli *clientv3.Client, name string) (any, error)
	// ClientAuth, when set, makes every request act as the etcd user its
	// HTTP Basic credentials name, through a client of that user that
	// ClientAuth dials (principal.go, users.go); the server's own client is
	// then used for nothing a caller asks. Not with AuthToken or Shards.
	ClientAuth Dialer
	// Identity is the identity of the server's shared sessions (each hold
	// shows its own, see etcdlock.WithHolderIdentity).
	Identity string
	Logger   *zap.Logger
	// Shards, when set, is the sharded deployment whose root is New's
	// client: every session is then a sharded session over its clusters
	// (shard.NewSession), which routes each name to its cluster.
	Shards *shard.Shards
	// AllowOrigins are the Origin headers accepted (exactly); a request with
	// any other is refused (see crossSite). None by default.
	AllowOrigins []string
	// AllowHosts are Host names accepted over TCP besides the server's own
	// (see crossSite).
	AllowHosts []string
	// SharedIdle is how long the shared session (lease) of a TTL that no
	// request uses lives on; 0: 30 s.
	SharedIdle time.Duration
	// MaxClientSessions and MaxClientStreams bound the sessions and the
	// long requests (holds, campaigns, observes, session lock requests)
	// one client (remote address) has open; MaxSessions and MaxStreams
	// bound all clients' (limits.go). 0: 100, 1,000, 1,000 and 10,000.
	MaxClientSessions, MaxClientStreams int
	MaxSessions, MaxStreams             int
	// BodyTimeout bounds the reading of a request's body; IdleTimeout closes
	// a connection idle between requests. 0: 10 s and 2 minutes.
	BodyTimeout, IdleTimeout time.Duration
}

// Server serves the API on one etcd client. It is safe for concurrent use.
type Server struct {
	// Set by New, then read-only.
	cli     *clientv3.Client
	cfg     Config
	users   *userClients // the callers' clients (ClientAuth); nil without
	reg     *prometheus.Registry
	obs     *lockmetrics.Metrics
	metrics serverMetrics
	mux     *http.ServeMux
	conns   *connSet // the open connections (connbound.go)
	// stopping ends (cause errStopping) when the server stops: every hold
	// and campaign releases and ends its stream.
	stopping context.Context
	stopAll  context.CancelCauseFunc

	mu            sync.Mutex
	closed        bool                           // set by stop: no session opens after it
	shared        map[sharedKey][]*sharedSession // the stream holds' sessions, by user and TTL (shared.go)
	sessions      map[string]*clientSession      // the sessions of /v1/sessions, by id
	holds         map[string]*heldStream         // the stream holds, by id (holds.go)
	streamCounts  counts                         // open long requests (limits.go)
	sessionCounts counts                         // open sessions (limits.go)
	streams       sync.WaitGroup                 // open hold and campaign streams
	ending        sync.WaitGroup                 // sessions being closed by endSession
}

// New returns a server on cli.
func New(cli *clientv3.Client, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Identity == "" {
		cfg.Identity = "etcdlock-serve"
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := lockmetrics.New(reg)
	if err != nil {
		return nil, err
	}
	srv := &Server{cli: cli, cfg: cfg, reg: reg, obs: obs,
		shared: map[sharedKey][]*sharedSession{}, sessions: map[string]*clientSession{}, holds: map[string]*heldStream{},
		streamCounts: counts{byClient: map[string]int{}}, sessionCounts: counts{byClient: map[string]int{}}}
	if srv.metrics, err = newServerMetrics(reg); err != nil {
		return nil, err
	}
	switch {
	case cfg.ClientAuth != nil && (cfg.AuthToken != "" || cfg.Shards != nil):
		return nil, errors.New("client-auth etcd takes no bearer token and no sharded deployment")
	case cfg.ClientAuth != nil:
		srv.users = newUserClients(cfg.ClientAuth, 0)
	}
	srv.stopping, srv.stopAll = context.WithCancelCause(context.Background())
	srv.conns = newConnSet()
	srv.routes()
	return srv, nil
}

func (srv *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/hold", srv.hold)
	m.HandleFunc("POST /v1/campaign", srv.campaign)
	m.HandleFunc("GET /v1/leader", srv.leader)
	m.HandleFunc("GET /v1/observe", srv.observe)
	m.HandleFunc("GET /v1/state", srv.state)
	m.HandleFunc("POST /v1/sessions", srv.openSession)
	m.HandleFunc("POST /v1/sessions/{id}/keepalive", srv.keepAlive)
	m.HandleFunc("DELETE /v1/sessions/{id}", srv.closeSession)
	m.HandleFunc("DELETE /v1/holds/{id}", srv.releaseHold)
	m.HandleFunc("POST /v1/sessions/{id}/lock", srv.sessionLock)
	m.HandleFunc("POST /v1/sessions/{id}/unlock", srv.sessionUnlock)
	m.Handle("GET /metrics", srv.metricsHandler())
	srv.mux = m
}

// ServeHTTP refuses what a web page could have sent (crossSite), checks
// the bearer token, if one is required, then serves.
func (srv *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		// A body nobody reads (an error answer, a route that takes none)
		// would be drained by the HTTP server after the answer, as long as
		// the client likes: the connection closes after the answer instead,
		// and the read is bounded meanwhile. decode, which reads the body
		// to its end, lifts both.
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(orDefault(srv.cfg.BodyTimeout, defaultBodyTimeout)))
	}
	if path.Clean(r.URL.Path) != r.URL.Path {
		srv.writeError(w, errorf(codeNotFound, "no such endpoint: %s %s (paths are not cleaned)", r.Method, r.URL.Path))
		return
	}
	if err := srv.crossSite(r); err != nil {
		srv.writeError(w, err)
		return
	}
	if t := srv.cfg.AuthToken; t != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(t)) != 1 {
			srv.writeError(w, errorf(codePermissionDenied, "missing or wrong bearer token"))
			return
		}
	}
	if h, pattern := srv.mux.Handler(r); pattern == "" {
		srv.unrouted(w, r, h)
		return
	}
	p, done, err := srv.authenticate(r)
	if err != nil {
		srv.writeError(w, err)
		return
	}
	defer done()
	srv.mux.ServeHTTP(w, withPrincipal(r, p)) // it sets the route's path values
}

// unrouted answers a request no route takes, in the API's JSON error shape:
// not_found (404), or method_not_allowed (405, with the mux's Allow
// header). h is the mux's own answer, run only to learn which.
func (srv *Server) unrouted(w http.ResponseWriter, r *http.Request, h http.Handler) {
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if probe.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", probe.header.Get("Allow"))
		srv.writeError(w, errorf(codeMethod, "%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	srv.writeError(w, errorf(codeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
}

// headerProbe is a ResponseWriter that keeps the status and the headers
// and drops the body.
type headerProbe struct {
	header http.Header
	code   int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int)        { p.code = code }

// Serve serves on every listener until ctx ends (or one fails), then stops
// accepting, ends every stream (each releases its grant, guarded), waits
// for every handler, closes every session (see stop) and returns.
func (srv *Server) Serve(ctx context.Context, lns ...net.Listener) error {
	conns := srv.conns
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ConnContext: withConn,
		IdleTimeout: orDefault(srv.cfg.IdleTimeout, defaultIdleTimeout), ConnState: conns.track}
	failed := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { failed <- hs.Serve(ln) }()
	}
	var err error
	pending := len(lns)
	select {
	case err = <-failed:
		pending--
	case <-ctx.Done():
	}
	// Stop accepting, then end every stream (each releases its grant);
	// Shutdown returns once every handler has.
	for _, ln := range lns {
		_ = ln.Close()
	}
	srv.stopAll(errStopping)
	conns.endReads() // a read that blocks (a body drained) must not hold the stop; streams end on stopAll
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Shutdown closes the listeners too: one closed above and still in
	// use by its Serve answers net.ErrClosed, which says nothing.
	if serr := hs.Shutdown(sctx); err == nil && !errors.Is(serr, net.ErrClosed) {
		err = serr
	}
	for ; pending > 0; pending-- {
		if serr := <-failed; err == nil && !errors.Is(serr, http.ErrServerClosed) && !errors.Is(serr, net.ErrClosed) {
			err = serr
		}
	}
	srv.stop()
	return err
}

// stop releases everything the server holds, once no request can come: it
// ends every stream (each releases its grant, guarded) and waits for them,
// then closes every session (deleting its keys, guarded, and revoking its
// lease).
func (srv *Server) stop() {
	srv.stopAll(errStopping)
	srv.streams.Wait()
	srv.mu.Lock()
	srv.closed = true
	var all []*sharedSession
	for _, list := range srv.shared {
		for _, sh := range list {
			if sh.idle != nil {
				sh.idle.Stop()
			}
			all = append(all, sh)
		}
	}
	ids := make([]string, 0, len(srv.sessions))
	for id := range srv.sessions {
		ids = append(ids, id)
	}
	clear(srv.shared)
	srv.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.endSession(id)
		}()
	}
	for _, sh := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = sh.s.Close()
			sh.release()
		}()
	}
	wg.Wait()
	srv.ending.Wait()
	if srv.users != nil {
		srv.users.close()
	}
}

// newSession opens a session of p on the server's cluster, or a sharded
// one over its deployment's clusters (Config.Shards).
func (srv *Server) newSession(ctx context.Context, p *principal, opts ...etcdlock.SessionOption) (acquire.Session, error) {
	if srv.cfg.Shards != nil {
		s, err := shard.NewSession(ctx, srv.cfg.Shards, opts...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := etcdlock.NewSession(ctx, p.cli, opts...)
	if err != nil {
		return nil, err
	}
	return acquire.Plain(s), nil
}

// errStopping is the cause of a request's context when the server stops.
var errStopping = errors.New("the server is stopping")

// untilStopping returns a child of ctx that also ends, with cause
// errStopping, when the server stops (no goroutine: a stream costs none).
func (srv *Server) untilStopping(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(srv.stopping, func() { cancel(errStopping) })
	return c, func() {
		stop()
		cancel(nil)
	}
}
