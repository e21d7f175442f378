package shards_test

// shard.NewSession racing Shards.Close.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackNewSessionRacingShardsClose: goroutines open shard.Sessions and
// take a name with each while the Shards is closed. Every NewSession
// either fails with ErrSessionClosed or returns a session that Close has
// closed by the time it returns (Done closed, Err ErrSessionClosed), also
// one whose NewSession began after Close returned; no key of any name is
// left on the cluster.
func TestAttackNewSessionRacingShardsClose(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1)
	const openers = 6
	o := &closeRacer{
		r:      d.newShards(t),
		base:   d.nameOn(t, "c0"), // the deployment has one cluster: every name is on it
		made:   make(chan struct{}, openers),
		closed: make(chan struct{}),
	}
	ctx := embedtest.Context(t, time.Minute)
	var wg sync.WaitGroup
	for i := 0; i < openers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !o.open(ctx, t) {
			}
		}()
	}
	for i := 0; i < openers; i++ {
		<-o.made // sessions exist and hold names before Close
	}
	if err := o.r.Close(); err != nil {
		t.Fatal(err)
	}
	close(o.closed)
	wg.Wait()
	for i, s := range o.sessions {
		if !isDone(s.Done()) || !errors.Is(s.Err(), etcdlock.ErrSessionClosed) {
			t.Errorf("session %d of %d still open after Shards.Close returned (Err %v)", i, len(o.sessions), s.Err())
		}
	}
	for _, name := range o.names {
		if keys := d.keysOf(t, "c0", name); len(keys) != 0 {
			t.Errorf("keys of %s left after Shards.Close: %v", name, keys)
		}
	}
	t.Logf("%d sessions opened around Close", len(o.sessions))
}

// closeRacer opens sessions on r, each taking a name of its own, until one
// fails or one began after closed was closed.
type closeRacer struct {
	r      *shard.Shards
	base   string
	made   chan struct{} // a send per session that took its name (while room)
	closed chan struct{} // closed once r.Close returned

	mu       sync.Mutex
	seq      int
	sessions []*shard.Session
	names    []string
}

// open makes one session and takes a name with it; it reports whether its
// goroutine should stop.
func (o *closeRacer) open(ctx context.Context, t *testing.T) (stop bool) {
	afterClose := isDone(o.closed)
	s, err := shard.NewSession(ctx, o.r, etcdlock.WithTTL(5*time.Second))
	if err != nil {
		if !errors.Is(err, etcdlock.ErrSessionClosed) {
			t.Errorf("NewSession: %v, want nil or ErrSessionClosed", err)
		}
		return true
	}
	t.Cleanup(func() { _ = s.Close() })
	o.mu.Lock()
	o.seq++
	name := fmt.Sprintf("%s/%d", o.base, o.seq)
	o.sessions, o.names = append(o.sessions, s), append(o.names, name)
	o.mu.Unlock()
	// Held, if taken, until the Shards' Close releases it.
	if _, err := s.NewMutex(name).TryLock(ctx); err != nil && !errors.Is(err, etcdlock.ErrSessionClosed) {
		t.Errorf("TryLock: %v, want nil or ErrSessionClosed", err)
	}
	select {
	case o.made <- struct{}{}:
	default:
	}
	return afterClose
}
