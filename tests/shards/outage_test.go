package shards_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestOutageIsolation: one cluster's majority is killed. Its holders see
// their grants lost (ErrSessionExpired); the same sharded session's grant
// on the other cluster stays, and names there keep granting.
func TestOutageIsolation(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 3)
	ctx := embedtest.Context(t, 2*time.Minute)
	r := d.newShards(t)
	s := session(t, r, etcdlock.WithTTL(3*time.Second))
	up, down := d.nameOn(t, "c0"), d.nameOn(t, "c1")
	kept := mustLock(t, s.NewMutex(up))
	lost := mustLock(t, s.NewMutex(down))
	for _, m := range d.clusters[1].Members()[:2] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-lost.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the grant on the cluster without a majority is still held after 30 s")
	}
	if cause := context.Cause(lost.Context()); !errors.Is(cause, etcdlock.ErrSessionExpired) {
		t.Fatalf("the lost grant's cause: %v, want ErrSessionExpired", cause)
	}
	other := session(t, r)
	for i := 0; i < 10; i++ {
		for _, sess := range []*shard.Session{s, other} {
			l := mustLock(t, sess.NewMutex(d.nameOn(t, "c0")))
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := kept.Context().Err(); err != nil || s.Err() != nil {
		t.Fatalf("the grant on the healthy cluster: %v (%v); the session: %v", err, context.Cause(kept.Context()), s.Err())
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := other.NewMutex(down).Lock(short); err == nil {
		t.Fatal("a name on the cluster without a majority was granted")
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
