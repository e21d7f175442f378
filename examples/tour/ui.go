package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/ui"
)

// startUI serves etcdlock's status page of the tour's cluster on
// cfg.ui for as long as the tour runs (--ui), and returns what stops it.
func (t *tour) startUI(ctx context.Context, c *embedtest.Cluster) (stop func(), err error) {
	cli, err := c.Client()
	if err != nil {
		return nil, err
	}
	srv, err := ui.New(cli, ui.Config{})
	if err != nil {
		cli.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", t.cfg.ui)
	if err != nil {
		cli.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	viewDone, served := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(viewDone)
		_ = srv.Run(ctx) // returns once ctx ends
	}()
	go func() {
		defer close(served)
		_ = hs.Serve(ln) // returns once Close is called
	}()
	url := "http://" + ln.Addr().String() + "/"
	t.say("ui", 0, "status page on %s: watch the queues move (it closes with the tour)", url)
	if t.cfg.onUI != nil {
		t.cfg.onUI(url)
	}
	return func() {
		cancel()
		<-viewDone // the event streams have ended
		_ = hs.Close()
		<-served
		cli.Close()
	}, nil
}
