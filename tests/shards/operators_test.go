package shards_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRaiseFreezesASlotThatMovedAway: a cluster restored from a snapshot
// taken while it owned a slot holds that slot's stamp active again,
// though the slot moved away since. RaiseGeneration must not re-stamp it
// active with a raised generation (a client with a stale map would be
// granted there, with a token above the real holder's): it freezes it,
// and re-stamps only the slots the root gives the cluster.
func TestRaiseFreezesASlotThatMovedAway(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	name, kept := d.nameOn(t, "c0"), d.nameOn(t, "c0")
	key := fmt.Sprintf("etcdlock-shards/slots/%04d", shard.SlotOf(name))
	snap, err := d.clients["c0"].Get(ctx, key)
	if err != nil || len(snap.Kvs) != 1 {
		t.Fatalf("the stamp before the move: %v, %v", snap, err)
	}
	d.move(t, name, "c1", shard.MoveOptions{})
	// The restore, as far as this slot goes: its stamp as the snapshot had it.
	if _, err := d.clients["c0"].Put(ctx, key, string(snap.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	g, err := d.admin.RaiseGeneration(ctx, "c0")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.stamp(t, "c0", name); st.State == "active" {
		t.Fatalf("the moved slot's stamp on the restored cluster: %+v, want frozen", st)
	}
	if st := d.stamp(t, "c0", kept); st.State != "active" || st.Gen != g {
		t.Fatalf("an owned slot's stamp: %+v, want active at generation %d", st, g)
	}
	if st := d.stamp(t, "c1", name); st.State != "active" {
		t.Fatalf("the slot's stamp on its owner: %+v", st)
	}
}

// TestMoveToADeadClusterRecordsNothing: a move to a cluster whose
// endpoints do not answer fails with ErrUnavailable before it records or
// freezes anything; so does a move to the source's own etcd cluster
// recorded under another id (ErrInvalidArgument); the name stays free to
// take at once.
func TestMoveToADeadClusterRecordsNothing(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1)
	ctx := embedtest.Context(t, time.Minute)
	if err := d.admin.AddCluster(ctx, "gone", []string{"127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	name := d.nameOn(t, "c0")
	err := d.admin.MoveSlot(ctx, shard.SlotOf(name), "gone", shard.MoveOptions{})
	if !errors.Is(err, shard.ErrUnavailable) {
		t.Fatalf("a move to a dead cluster: %v, want ErrUnavailable", err)
	}
	if resp, err := d.root.Get(ctx, "etcdlock-shards/moves/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("move records: %v, %v", resp, err)
	}
	if st := d.stamp(t, "c0", name); st.State != "active" {
		t.Fatalf("the source's stamp: %+v", st)
	}
	// An alias: the same etcd cluster recorded under another id.
	if err := d.admin.AddCluster(ctx, "alias", d.clusters[0].Endpoints()); err != nil {
		t.Fatal(err)
	}
	err = d.admin.MoveSlot(ctx, shard.SlotOf(name), "alias", shard.MoveOptions{})
	if !errors.Is(err, etcdlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "one etcd cluster") {
		t.Fatalf("a move to an alias of the source: %v, want ErrInvalidArgument", err)
	}
	if resp, err := d.root.Get(ctx, "etcdlock-shards/moves/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("move records after the refused moves: %v, %v", resp, err)
	}
	l, err := session(t, d.newShards(t)).NewMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the refused moves: %v", err)
	}
	_ = l.Unlock(ctx)
}

// TestMoveRightAfterAddCluster: a cluster added a moment ago, before the
// map watch of the process reports it, is a known target. The process's
// map watch is held back (its root client's Watcher delivers nothing until
// the test is done), so the move cannot learn the cluster from it.
func TestMoveRightAfterAddCluster(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1)
	ctx := embedtest.Context(t, time.Minute)
	root := d.clusters[0].TestClient(t)
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	root.Watcher = heldWatcher{Watcher: root.Watcher, held: held}
	r, err := shard.New(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	name := d.nameOn(t, "c0")
	extra := embedtest.Start(t, embedtest.WithMembers(1))
	if err := d.admin.AddCluster(ctx, "n0", extra.Endpoints()); err != nil {
		t.Fatal(err)
	}
	if err := r.MoveSlot(ctx, shard.SlotOf(name), "n0", shard.MoveOptions{}); err != nil {
		t.Fatalf("move to n0 right after adding it: %v", err)
	}
	if st := d.stamp(t, "c0", name); st.State == "active" {
		t.Fatalf("the source's stamp after the move: %+v", st)
	}
}

// heldWatcher is a real client's Watcher whose watches deliver nothing
// until held is closed: a map watch that lags.
type heldWatcher struct {
	clientv3.Watcher
	held <-chan struct{}
}

func (w heldWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		select {
		case <-w.held:
		case <-ctx.Done():
			return
		}
		for resp := range in {
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// TestAbortMove: a move waiting in its drain is aborted: the source grants
// again at once, the stalled mover writes nothing more when it wakes
// (ErrMoveAborted), and the target never becomes active.
func TestAbortMove(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c0")
	holder := mustLock(t, session(t, r).NewMutex(name))
	phases := make(chan shard.MoveProgress, 100)
	moved := make(chan error, 1)
	go func() {
		moved <- d.admin.MoveSlot(ctx, shard.SlotOf(name), "c1", shard.MoveOptions{Progress: func(p shard.MoveProgress) { phases <- p }})
	}()
	awaitPhase(t, phases, "draining", 1)
	waiter := lockAsync(ctx, session(t, r).NewMutex(name))
	if err := d.admin.AbortMove(ctx, 5000); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("abort of a slot out of range: %v", err)
	}
	if err := d.admin.AbortMove(ctx, shard.SlotOf(name)); err != nil {
		t.Fatal(err)
	}
	// The mover's drain sees its frozen stamp re-written: it ends now, not
	// when the holder lets go.
	if err := <-moved; !errors.Is(err, shard.ErrMoveAborted) {
		t.Fatalf("the aborted mover: %v, want ErrMoveAborted", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-waiter
	if g.err != nil || len(d.keysOf(t, "c0", name)) != 1 || g.l.Token() <= holder.Token() {
		t.Fatalf("the waiter after the abort: %v (keys on the source %v)", g.err, d.keysOf(t, "c0", name))
	}
	if st := d.stamp(t, "c1", name); st.State == "active" {
		t.Fatalf("the target's stamp: %+v", st)
	}
	if err := d.admin.AbortMove(ctx, shard.SlotOf(name)); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("abort with no move recorded: %v", err)
	}
}

// TestRaiseUnstrandsAnOwnedSlot: a slot the map gives c0, with no move
// recorded, whose stamp there is frozen (a restore took back the stamp an
// abort wrote, and a mover that woke late froze it) would wait for ever.
// RaiseGeneration makes it active again, at the raised generation.
func TestRaiseUnstrandsAnOwnedSlot(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	name := d.nameOn(t, "c0")
	key := fmt.Sprintf("etcdlock-shards/slots/%04d", shard.SlotOf(name))
	if _, err := d.clients["c0"].Put(ctx, key, `{"state":"frozen","gen":1,"to":"c1","move":3}`); err != nil {
		t.Fatal(err)
	}
	g, err := d.admin.RaiseGeneration(ctx, "c0")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.stamp(t, "c0", name); st.State != "active" || st.Gen != g {
		t.Fatalf("the owned slot's stamp after the raise: %+v, want active at %d", st, g)
	}
	l := mustLock(t, session(t, d.newShards(t)).NewMutex(name))
	if l.Token().Generation() != g {
		t.Fatalf("granted at generation %d, want %d", l.Token().Generation(), g)
	}
}
