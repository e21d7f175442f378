package main

import (
	"context"
	"net"

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
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx, ln) // a failure only ends the page, not the tour
	}()
	url := "http://" + ln.Addr().String() + "/"
	t.say("ui", 0, "status page on %s: watch the queues move (it closes with the tour)", url)
	if t.cfg.onUI != nil {
		t.cfg.onUI(url)
	}
	return func() {
		cancel()
		<-done
		cli.Close()
	}, nil
}
