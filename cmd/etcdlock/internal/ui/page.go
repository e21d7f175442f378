package ui

// This file holds the page itself: one html/template and the static files,
// embedded in the binary (no build step, nothing fetched from elsewhere).

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"time"
)

//go:embed static
var staticFiles embed.FS

var pageTmpl = template.Must(template.ParseFS(staticFiles, "static/index.html"))

// pageData is what the page's template shows before its script runs.
type pageData struct {
	Prefix, KeyPrefix string
	AllowBreak        bool
}

// Handler returns the page, its static files and its API:
//
//	GET  /                  the page
//	GET  /api/locks         ?filter=&offset=&limit=: one page of names, as status -o json
//	GET  /api/locks/{name}  one name, as status -o json
//	GET  /api/timeline      ?since=N: the recent events
//	GET  /api/chart         grants per second and waiters, last 15 minutes
//	GET  /api/stream        server-sent events: change, timeline, resync
//	POST /api/break         {"name","token"}: only with Config.AllowBreak
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static") // cannot fail: the directory is embedded
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.handlePage)
	mux.HandleFunc("GET /api/locks", s.handleLocks)
	mux.HandleFunc("GET /api/locks/{name...}", s.handleLock)
	mux.HandleFunc("GET /api/timeline", s.handleTimeline)
	mux.HandleFunc("GET /api/chart", s.handleChart)
	mux.HandleFunc("GET /api/stream", s.handleStream)
	mux.HandleFunc("POST /api/break", s.handleBreak)
	return mux
}

func (s *Server) handlePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = pageTmpl.Execute(w, pageData{Prefix: s.cfg.Prefix, KeyPrefix: s.keyPrefix, AllowBreak: s.cfg.AllowBreak}) // the client may be gone
}

// Serve runs the view (Run) and serves Handler on ln until ctx ends or the
// HTTP server fails, then ends the view first (which ends every event
// stream, so the shutdown need not wait for them) and shuts the server
// down. It returns nil after ctx ended, else the server's error; it closes
// ln either way.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	viewDone := make(chan struct{})
	go func() {
		defer close(viewDone)
		_ = s.Run(ctx) // returns ctx's error once it ends
	}()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	cancel()
	<-viewDone
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx) // a client still sending is cut off
	if err == nil {
		err = <-served
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
