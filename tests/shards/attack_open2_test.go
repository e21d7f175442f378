package shards_test

// The opening of a shard.Session's cluster session, seen from a second
// acquisition on the same cluster and from ValidUntil.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackSecondOpenerKeepsItsCtx: while one acquisition (long ctx) opens
// the cluster session of c1, whose one member is down, a second
// acquisition on c1 with a short ctx returns its ctx's error about when
// that ctx ends; it does not wait for the first one's opening. ValidUntil
// of the session answers meanwhile too. Once the member is back the first
// is granted.
func TestAttackSecondOpenerKeepsItsCtx(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	s, err := shard.NewSession(ctx, d.newShards(t), etcdlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	n1, n2 := d.nameOn(t, "c1"), d.nameOn(t, "c1")
	m := d.clusters[1].Members()[0]
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		l, err := s.NewMutex(n1).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		first <- err
	}()
	time.Sleep(300 * time.Millisecond) // the first one opens
	start := time.Now()
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(6 * time.Second) // the member stays down
		restarted <- m.Restart()
	}()
	valid := make(chan struct{})
	go func() { s.ValidUntil(); close(valid) }()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = s.NewMutex(n2).Lock(sctx)
	cancel()
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
		t.Errorf("second Lock (ctx 1s) while the first opens: %v after %v, want DeadlineExceeded about 1s", err, took.Round(time.Millisecond))
	}
	select {
	case <-valid:
	case <-time.After(time.Second):
		t.Errorf("ValidUntil blocks while a cluster session opens")
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first Lock across the restart: %v, want granted", err)
	}
	<-valid
}
