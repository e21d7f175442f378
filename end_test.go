package etcdlock

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// endWatch watches everything of name (its queue and its markers) from now
// on and returns, for each deletion of a queue key, what end marker was
// written at the same revision ("" for none), by token.
type endWatch struct {
	t    *testing.T
	ch   clientv3.WatchChan
	ends map[Token]string
}

func watchEnds(t *testing.T, cli *clientv3.Client, name string) *endWatch {
	t.Helper()
	root := keyRoot + escapeName(name)
	resp, err := cli.Get(testCtx(t, 10*time.Second), root, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &endWatch{t: t, ends: map[Token]string{},
		ch: cli.Watch(ctx, root, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(resp.Header.Revision+1))}
}

// await reads events until tok's key was deleted, and returns the end
// marker written at the same revision ("" for none).
func (ew *endWatch) await(tok Token) string {
	ew.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if how, ok := ew.ends[tok]; ok {
			return how
		}
		select {
		case resp := <-ew.ch:
			markers := map[int64]map[Token]string{} // revision -> token -> how
			for _, ev := range resp.Events {
				if e, ok := EndOf(ev.Kv); ok && ev.Type == mvccpb.PUT {
					if markers[ev.Kv.ModRevision] == nil {
						markers[ev.Kv.ModRevision] = map[Token]string{}
					}
					markers[ev.Kv.ModRevision][e.Token] = e.How
				}
			}
			for _, ev := range resp.Events {
				if _, ok := parseKey(string(ev.Kv.Key)); ok && ev.Type == mvccpb.DELETE && ev.PrevKv != nil {
					deleted := Token(ev.PrevKv.CreateRevision)
					ew.ends[deleted] = markers[ev.Kv.ModRevision][deleted]
				}
			}
		case <-timeout:
			ew.t.Fatalf("no deletion of token %d seen", tok)
		}
	}
}

// TestEndMarkers: every deletion of a queue key by etcdlock writes the
// name's end marker at the same revision: Unlock, a canceled Lock's
// cleanup and Session.Close (which deletes its keys before it revokes its
// lease) say "released", Break says "broken". Describe and List never show a
// marker.
func TestEndMarkers(t *testing.T) {
	cli := newClient(t, nil)
	ctx := testCtx(t, time.Minute)
	s := openSession(t, cli)
	name := uniqueName(t)
	ew := watchEnds(t, cli, name)

	l := mustLock(t, NewMutex(s, name))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(l.Token()); how != EndReleased {
		t.Errorf("Unlock: marker %q, want %q", how, EndReleased)
	}

	l = mustLock(t, NewMutex(s, name))
	if err := Break(ctx, cli, name, l.Token()); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(l.Token()); how != EndBroken {
		t.Errorf("Break: marker %q, want %q", how, EndBroken)
	}

	holder := mustLock(t, NewMutex(s, name))
	waiterSession := openSession(t, cli)
	lctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { _, err := NewMutex(waiterSession, name).Lock(lctx); res <- err }()
	st := waitState(t, cli, name, "a waiter", func(st *LockState) bool { return len(st.Waiters) == 1 })
	cancel()
	<-res
	if how := ew.await(st.Waiters[0].Token); how != EndReleased {
		t.Errorf("a canceled Lock's cleanup: marker %q, want %q", how, EndReleased)
	}

	waiting := make(chan error, 1)
	go func() { _, err := NewMutex(waiterSession, name).Lock(ctx); waiting <- err }()
	st = waitState(t, cli, name, "a waiter", func(st *LockState) bool { return len(st.Waiters) == 1 })
	waiterToken := st.Waiters[0].Token
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(holder.Token()); how != EndReleased {
		t.Errorf("Session.Close: the holder's marker %q, want %q (deleted before the revoke)", how, EndReleased)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("the waiter after the holder's Close: %v", err)
	}
	if err := waiterSession.Close(); err != nil {
		t.Fatal(err)
	}
	if how := ew.await(waiterToken); how != EndReleased {
		t.Errorf("Session.Close of the next holder: marker %q, want %q", how, EndReleased)
	}
	all, err := List(ctx, cli, name)
	if err != nil || len(all) != 0 {
		t.Fatalf("List after every end: %+v, %v; want nothing (markers are no queue keys)", all, err)
	}
}

// waitState polls Describe until cond holds.
func waitState(t *testing.T, cli *clientv3.Client, name, what string, cond func(*LockState) bool) *LockState {
	t.Helper()
	var st *LockState
	waitFor(t, 30*time.Second, what, func() bool {
		var err error
		st, err = Describe(testCtx(t, 10*time.Second), cli, name)
		return err == nil && cond(st)
	})
	return st
}
