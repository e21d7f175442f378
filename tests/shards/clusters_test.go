package shards_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCheckEndpoints: endpoints of a live cluster answer; a port nobody
// listens on is ErrUnavailable; no endpoints is ErrInvalidArgument.
func TestCheckEndpoints(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1)
	c := d.clusters[0]
	for _, tc := range []struct {
		name string
		eps  []string
		want string // "" for nil
		is   error
	}{
		{"live", c.Endpoints(), "", nil},
		{"nobody there", []string{"http://127.0.0.1:1"}, "endpoints http://127.0.0.1:1 do not answer", shard.ErrUnavailable},
		{"none", nil, "no endpoints", etcdlock.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.admin.CheckEndpoints(embedtest.Context(t, 2*time.Second), tc.eps)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %v with %q", err, tc.is, tc.want)
			}
		})
	}
}

// TestSetEndpoints: a cluster's new endpoints (a link to the same
// cluster) are recorded with its generation kept; a Shards moves its
// client to them, so the grant held there lives on, and the next
// acquisition goes through the new ones. Bad calls change nothing.
func TestSetEndpoints(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	s := session(t, r)
	name := d.nameOn(t, "c1")
	l, err := s.NewMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := r.Client(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	link, err := d.clusters[1].NewLink()
	if err != nil {
		t.Fatal(err)
	}
	gen := generationOf(t, r, "c1")
	if err := d.admin.SetEndpoints(ctx, "c1", link.Endpoints()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the client to move to the new endpoints", func() bool {
		return slices.Equal(old.Endpoints(), link.Endpoints())
	})
	l2, err := s.NewMutex(d.nameOn(t, "c1")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() || l2.Token().Generation() != gen {
		t.Fatalf("token %s after %s, want above it, of generation %d", l2.Token(), l.Token(), gen)
	}
	if cli, err := r.Client(ctx, "c1"); err != nil || cli != old {
		t.Fatalf("client of c1: %v, %v; want the same client, moved", cli, err)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("the grant on c1 ended with the endpoints' change: %v", context.Cause(l.Context()))
	}
	if got := generationOf(t, r, "c1"); got != gen {
		t.Fatalf("generation %d after the change, want %d", got, gen)
	}
	for _, tc := range []struct {
		id  string
		eps []string
	}{{"c9", link.Endpoints()}, {"c1", nil}, {"bad id", link.Endpoints()}} {
		if err := d.admin.SetEndpoints(ctx, tc.id, tc.eps); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Errorf("SetEndpoints(%q, %v) = %v, want ErrInvalidArgument", tc.id, tc.eps, err)
		}
	}
}

// generationOf returns the generation the root records for cluster id, as
// r last read it.
func generationOf(t *testing.T, r *shard.Shards, id string) int64 {
	t.Helper()
	for _, c := range r.Clusters() {
		if c.ID == id {
			return c.Generation
		}
	}
	t.Fatalf("no cluster %s", id)
	return 0
}

// awaitDone waits until ctx ends.
func awaitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestRemoveCluster: a cluster with slots, or named by a move, is not
// removed (nor one unknown); once its slots moved away and its move ended
// it is, and a Shards closes its client of it.
func TestRemoveCluster(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	if err := d.admin.AddCluster(ctx, "c2", d.clusters[1].Endpoints()); err != nil {
		t.Fatal(err)
	}
	r := d.newShards(t)
	slot := shard.SlotOf(d.nameOn(t, "c0"))
	stopAfterRecord(t, r, slot, "c2")
	for _, tc := range []struct{ id, want string }{
		{"c1", "gives cluster c1 2048 slots"},
		{"c2", "named by the move of slot"},
		{"c9", "unknown cluster"},
	} {
		if err := d.admin.RemoveCluster(ctx, tc.id); !errors.Is(err, etcdlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("RemoveCluster(%s) = %v, want ErrInvalidArgument with %q", tc.id, err, tc.want)
		}
	}
	// Finish the move, then move the slot back: c2 has nothing left.
	if err := r.MoveSlot(ctx, slot, "c2", shard.MoveOptions{Resume: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.MoveSlot(ctx, slot, "c0", shard.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	old, err := r.Client(ctx, "c2")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.admin.RemoveCluster(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, old.Ctx(), "the client of the removed cluster to close")
	if _, err := r.Client(ctx, "c2"); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("Client(c2) after the removal: %v, want ErrInvalidArgument", err)
	}
}

// stopAfterRecord starts a move of slot to id with r and stops it once it
// is recorded: the move record stays (and the slot is not frozen).
func stopAfterRecord(t *testing.T, r *shard.Shards, slot int, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(embedtest.Context(t, time.Minute))
	defer cancel()
	err := r.MoveSlot(ctx, slot, id, shard.MoveOptions{Progress: func(p shard.MoveProgress) {
		if p.Phase == "started" {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped move: %v, want context.Canceled", err)
	}
}

// TestRemoveClusterRace: a move to the cluster that is recorded between
// RemoveCluster's read and its delete makes the delete fail, and the
// check that runs again refuses.
func TestRemoveClusterRace(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	if err := d.admin.AddCluster(ctx, "c2", d.clusters[1].Endpoints()); err != nil {
		t.Fatal(err)
	}
	r := d.newShards(t)
	slot := shard.SlotOf(d.nameOn(t, "c0"))
	// A root client whose first Txn (RemoveCluster's read) is followed,
	// before anything else is sent, by a move recorded to c2.
	root := d.clusters[0].TestClient(t)
	rr, err := shard.New(ctx, root) // before the hook: its first Txn is RemoveCluster's
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rr.Close() })
	first := true
	root.KV = afterTxn{KV: root.KV, after: func() {
		if first {
			first = false
			stopAfterRecord(t, r, slot, "c2")
		}
	}}
	if err := rr.RemoveCluster(ctx, "c2"); !errors.Is(err, etcdlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "named by the move of slot") {
		t.Fatalf("RemoveCluster during a move's start = %v, want ErrInvalidArgument naming the move", err)
	}
	if resp, err := d.root.Get(ctx, "etcdlock-shards/clusters/c2", clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
		t.Fatalf("c2's record after the refusal: %v, %v", resp, err)
	}
}

// afterTxn is a KV whose Txns call after once committed.
type afterTxn struct {
	clientv3.KV
	after func()
}

func (kv afterTxn) Txn(ctx context.Context) clientv3.Txn {
	return hookedTxn{Txn: kv.KV.Txn(ctx), after: kv.after}
}

type hookedTxn struct {
	clientv3.Txn
	after func()
}

func (t hookedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { return hookedTxn{t.Txn.If(cs...), t.after} }
func (t hookedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	return hookedTxn{t.Txn.Then(ops...), t.after}
}
func (t hookedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	return hookedTxn{t.Txn.Else(ops...), t.after}
}

func (t hookedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	t.after()
	return resp, err
}
