package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// endWatch watches everything of a name (its queue, its barriers, its
// markers) from now on, and tells how each queue key went, as a watcher such
// as the status page tells it.
type endWatch struct {
	t        *testing.T
	ch       clientv3.WatchChan
	ends     map[etcdlock.Token]string           // token -> how its key went
	barriers map[clientv3.LeaseID]int64          // lease -> revision its barrier was deleted at (0: alive)
	pending  map[etcdlock.Token]*mvccpb.KeyValue // deleted keys whose barrier's fate is not known yet
	deleted  map[etcdlock.Token]int64            // token -> revision its key was deleted at
	broken   map[int64]map[etcdlock.Token]bool   // revision -> tokens a break marker names
}

func watchEnds(t *testing.T, cli *clientv3.Client, name string) *endWatch {
	t.Helper()
	root := layout.KeyRoot + layout.EscapeName(name)
	resp, err := cli.Get(embedtest.Context(t, 10*time.Second), root, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &endWatch{t: t, ends: map[etcdlock.Token]string{}, barriers: map[clientv3.LeaseID]int64{},
		pending: map[etcdlock.Token]*mvccpb.KeyValue{}, deleted: map[etcdlock.Token]int64{}, broken: map[int64]map[etcdlock.Token]bool{},
		ch: cli.Watch(ctx, root, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(resp.Header.Revision+1))}
}

// await reads events until it can tell how tok's key went: "broken" (a
// break marker at its deletion), "expired" (its session's barrier went at
// the same revision: the lease ended) or "released" (the barrier lived on
// past it).
func (ew *endWatch) await(tok etcdlock.Token) string {
	ew.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if how, ok := ew.ends[tok]; ok {
			return how
		}
		select {
		case resp := <-ew.ch:
			ew.apply(resp.Events)
		case <-timeout:
			ew.t.Fatalf("never told how token %d's key went", tok)
		}
	}
}

func (ew *endWatch) apply(evs []*clientv3.Event) {
	for _, ev := range evs {
		ew.note(ev)
	}
	ew.name()
}

// note records what ev shows: a break marker, a barrier's life, or a queue
// key's deletion.
func (ew *endWatch) note(ev *clientv3.Event) {
	rev := ev.Kv.ModRevision
	if b, ok := layout.BrokenOf(ev.Kv); ok && ev.Type == mvccpb.PUT {
		if ew.broken[rev] == nil {
			ew.broken[rev] = map[etcdlock.Token]bool{}
		}
		ew.broken[rev][etcdlock.Token(b.Token)] = true
	}
	if _, lease, ok := layout.SessionOfKey(string(ev.Kv.Key)); ok {
		if ev.Type == mvccpb.DELETE {
			ew.barriers[lease] = rev
		} else if _, seen := ew.barriers[lease]; !seen {
			ew.barriers[lease] = 0
		}
	}
	if _, queue := layout.ParseKey(string(ev.Kv.Key)); queue && ev.Type == mvccpb.DELETE && ev.PrevKv != nil {
		tok := etcdlock.Token(ev.PrevKv.CreateRevision)
		ew.pending[tok], ew.deleted[tok] = ev.PrevKv, rev
	}
}

// name tells, for each deletion noted, how its key went, once it can.
func (ew *endWatch) name() {
	for tok, kv := range ew.pending {
		d := ew.deleted[tok]
		gone, known := ew.barriers[clientv3.LeaseID(kv.Lease)]
		switch {
		case ew.broken[d][tok]:
			ew.ends[tok] = "broken"
		case known && gone == d:
			ew.ends[tok] = "expired"
		case known && (gone == 0 || gone > d):
			ew.ends[tok] = "released"
		default:
			continue
		}
		delete(ew.pending, tok)
	}
}

// TestWhyAKeyWent: a watcher of a name tells how each key went from what
// etcd shows at the key's deletion: a break marker (Break), or whether the
// session's barrier went too (the lease ended) or lived on (released):
// Unlock, a canceled Lock's cleanup and Session.Close (which deletes its
// keys before it revokes its lease) read as released, a revoked lease as
// expired. Describe and List never show a barrier or a marker.
// canceledWaiter makes s wait for name, cancels that Lock once it waits,
// and returns its key's token.
func canceledWaiter(t *testing.T, ctx context.Context, cli *clientv3.Client, s *etcdlock.Session, name string) etcdlock.Token {
	t.Helper()
	lctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { _, err := etcdlock.NewMutex(s, name).Lock(lctx); res <- err }()
	st := locktest.WaitState(t, cli, name, "a waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	cancel()
	<-res
	return st.Waiters[0].Token
}

func TestWhyAKeyWent(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, time.Minute)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ew := watchEnds(t, cli, name)

	l := mustLock(t, etcdlock.NewMutex(s, name))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(l.Token()); how != "released" {
		t.Errorf("Unlock: %s, want released", how)
	}
	l = mustLock(t, etcdlock.NewMutex(s, name))
	if err := etcdlock.Break(ctx, cli, name, l.Token()); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(l.Token()); how != "broken" {
		t.Errorf("Break: %s, want broken", how)
	}

	holder := mustLock(t, etcdlock.NewMutex(s, name))
	other := locktest.OpenSession(t, cli)
	if how := ew.await(canceledWaiter(t, ctx, cli, other, name)); how != "released" {
		t.Errorf("a canceled Lock's cleanup: %s, want released (left)", how)
	}

	waiting := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(other, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		waiting <- l
	}()
	locktest.WaitState(t, cli, name, "a waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(holder.Token()); how != "released" {
		t.Errorf("Session.Close: %s, want released (its keys deleted before the revoke)", how)
	}
	next := <-waiting
	if _, err := cli.Revoke(ctx, other.Lease()); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(next.Token()); how != "expired" {
		t.Errorf("a revoked lease: %s, want expired", how)
	}
	all, err := etcdlock.List(ctx, cli, name)
	if err != nil || len(all) != 0 {
		t.Fatalf("List after every end: %+v, %v; want nothing", all, err)
	}
}
