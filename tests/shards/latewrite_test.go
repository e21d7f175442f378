package shards_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/testhook"
	"github.com/etcdlock/etcdlock/shard"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMoveRefusesLateEnqueue: a Lock's enqueue Txn is held on the path to
// the source; meanwhile the slot moves (the drain sees no key: the Txn has
// not arrived). When the held Txn is delivered it fails the stamp's
// compare: no key is created on the source, and the Lock is granted on the
// target. Without the compare the late Txn creates its key on the source
// and the Lock is granted there, beside any holder on the target.
func TestMoveRefusesLateEnqueue(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	r, link := d.flakyShards(t)
	s := session(t, r, etcdlock.WithTTL(15*time.Second))
	name := d.nameOn(t, "c0")
	m := s.NewMutex(name)
	first := mustLock(t, m) // the session's cluster session on c0, and the stamp, are known
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// The next enqueue is held: its first attempt times out, unanswered.
	held := make(chan struct{})
	var once sync.Once
	testhook.SetHook(s, func(p testhook.Point, err error) error {
		if p == testhook.Enqueued && err != nil {
			once.Do(func() { close(held) })
		}
		return err
	})
	member := d.clusters[0].Members()[0]
	before := member.Calls("/etcdserverpb.KV/Txn")
	link.Hold()
	res := lockAsync(ctx, m)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the held enqueue never timed out")
	}
	d.move(t, name, "c1", shard.MoveOptions{}, r)

	// Deliver what the link held, while watching the name on the source.
	prefix := layout.NamePrefix(name)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := d.clients["c0"].Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(currentRev(t, d.clients["c0"])+1))
	link.Restore()
	waitFor(t, 10*time.Second, "the held Txn to reach the source", func() bool {
		return member.Calls("/etcdserverpb.KV/Txn") > before
	})
	g := <-res
	if g.err != nil {
		t.Fatal(g.err)
	}
	if len(d.keysOf(t, "c1", name)) != 1 || g.l.Token() <= first.Token() {
		t.Fatalf("granted token %d (after %d); keys on the target %v, on the source %v",
			g.l.Token(), first.Token(), d.keysOf(t, "c1", name), d.keysOf(t, "c0", name))
	}
	assertNoPut(t, wch, time.Second)
	if keys := d.keysOf(t, "c0", name); len(keys) != 0 {
		t.Fatalf("phantom keys on the source: %v", keys)
	}
}

// flakyShards returns a Shards whose client of c0 goes through a link the
// test controls, and that link.
func (d *deployment) flakyShards(t *testing.T) (*shard.Shards, *embedtest.Link) {
	t.Helper()
	flaky, link, err := d.clusters[0].FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	r := d.newShards(t, shard.WithDialer(func(ctx context.Context, id string, eps []string) (*clientv3.Client, error) {
		if id == "c0" {
			return flaky, nil
		}
		return clientv3.New(d.clusters[1].ClientConfig())
	}))
	return r, link
}

func currentRev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(embedtest.Context(t, 10*time.Second), "any")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// assertNoPut asserts that wch reports no key created within d.
func assertNoPut(t *testing.T, wch clientv3.WatchChan, d time.Duration) {
	t.Helper()
	window := time.After(d) // asserts that nothing happens
	for {
		select {
		case wr := <-wch:
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.PUT && ev.IsCreate() {
					t.Fatalf("a key was created on the source after the move: %s at revision %d", ev.Kv.Key, ev.Kv.CreateRevision)
				}
			}
		case <-window:
			return
		}
	}
}
