// Command firstlock is the README's first program: it takes the lock
// "billing/nightly" on the etcd at $ETCDCTL_ENDPOINTS (default
// 127.0.0.1:2379), works under it for 10 s and releases it. Ctrl-C (or
// SIGTERM) ends the wait or the work at once, and the lock and the session
// are released before it exits.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err) // run's defers have released everything by now
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	endpoints := []string{"127.0.0.1:2379"}
	if e := os.Getenv("ETCDCTL_ENDPOINTS"); e != "" {
		endpoints = strings.Split(e, ",")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()

	s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(10*time.Second))
	if err != nil {
		return err
	}
	defer s.Close() // revokes the lease: every lock of s is free at once

	l, err := etcdlock.NewMutex(s, "billing/nightly").Lock(ctx) // waits in FIFO order; Ctrl-C ends the wait
	if err != nil {
		return err
	}
	defer func() {
		if err := l.Unlock(context.Background()); err != nil {
			log.Print(err)
		}
	}()
	log.Printf("holding billing/nightly with fencing token %d", l.Token())

	// Work under l.Context(): it ends if the lock is lost. ctx ends on Ctrl-C.
	select {
	case <-time.After(10 * time.Second):
		log.Print("job done")
	case <-l.Context().Done():
		return context.Cause(l.Context())
	case <-ctx.Done():
		log.Print("interrupted: releasing the lock")
	}
	return nil
}
