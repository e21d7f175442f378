package shards_test

// The opening of a shard.Session's cluster session, seen from a second
// acquisition on the same cluster and from ValidUntil.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackSecondOpenerKeepsItsCtx: while one acquisition (long ctx) opens
// the cluster session of c1, whose one member is down, a second
// acquisition on c1 with a short ctx returns its ctx's error about when
// that ctx ends; it does not wait for the first one's opening. ValidUntil
// of the session answers meanwhile too. Once the member is back the first
// is granted.
func TestAttackSecondOpenerKeepsItsCtx(t *testing.T) {
	t.Parallel() // its own deployment
	d, s, m, ctx := outageSession(t)
	n1, n2 := d.nameOn(t, "c1"), d.nameOn(t, "c1")
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	first := lockAndUnlock(ctx, s, n1)
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
	_, err := s.NewMutex(n2).Lock(sctx)
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

// TestAttackManyOpenersOneLease: eight acquisitions of different names on
// c1 start while c1's one member is down for longer than the TTL, and a
// ninth whose ctx ends meanwhile. The ninth returns its ctx's error about
// then; the eight are granted once the member is back, all under one
// lease (one cluster session), and no other lease of the failed openings
// is left on c1. After Close nothing of them is left: no key, no lease.
func TestAttackManyOpenersOneLease(t *testing.T) {
	t.Parallel() // its own deployment
	d, s, m, ctx := outageSession(t)
	before := d.leases(t, "c1")
	names := make([]string, 8)
	for i := range names {
		names[i] = d.nameOn(t, "c1")
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	locks := make(chan *etcdlock.Lock, len(names))
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() {
			l, err := s.NewMutex(n).Lock(ctx)
			if err == nil {
				locks <- l
			}
			errs <- err
		}()
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err := s.NewMutex(d.nameOn(t, "c1")).Lock(sctx)
	cancel()
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
		t.Errorf("Lock with a 1.5s ctx during the opening: %v after %v", err, took.Round(time.Millisecond))
	}
	time.Sleep(time.Until(start.Add(openTTL + time.Second)))
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	held := map[clientv3.LeaseID]int{}
	for range names {
		if err := <-errs; err != nil {
			t.Fatalf("Lock across the restart: %v", err)
		}
		held[d.leaseOf(t, "c1", (<-locks).Key())]++
	}
	if extra := newLeases(d.leases(t, "c1"), before); len(held) != 1 || len(extra) != 1 || held[extra[0]] == 0 {
		t.Errorf("after the restart: the grants' leases %v, new leases on c1 %v; want one, the same", held, extra)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	d.nothingLeft(t, "c1", before, names)
}

// nothingLeft fails t if cluster id has a lease not in before, or a key of
// one of names.
func (d *deployment) nothingLeft(t *testing.T, id string, before map[clientv3.LeaseID]bool, names []string) {
	t.Helper()
	if extra := newLeases(d.leases(t, id), before); len(extra) != 0 {
		t.Errorf("leases %v left on %s", extra, id)
	}
	for _, n := range names {
		if keys := d.keysOf(t, id, n); len(keys) != 0 {
			t.Errorf("keys %v left on %s", keys, id)
		}
	}
}

// newLeases returns the leases of now not in before.
func newLeases(now, before map[clientv3.LeaseID]bool) []clientv3.LeaseID {
	var out []clientv3.LeaseID
	for l := range now {
		if !before[l] {
			out = append(out, l)
		}
	}
	return out
}
