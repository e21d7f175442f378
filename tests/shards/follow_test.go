package shards_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFollowAfterCompaction: a process's map watch is cut off from the
// root; meanwhile a slot moves and the root is compacted past the watch's
// last revision. When the path heals, the watch, resumed from that
// revision, is refused; the process must read the map afresh and follow
// it on, not re-open the same refused watch for ever.
func TestFollowAfterCompaction(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	flaky, link, err := d.clusters[0].FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flaky.Close() })
	r, err := shard.New(ctx, flaky)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	name := d.nameOn(t, "c0")
	link.Cut()
	d.move(t, name, "c1", shard.MoveOptions{})
	// More revisions, then a compaction past all of them.
	for range 3 {
		if _, err := d.root.Put(ctx, "unrelated", "x"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := d.root.Get(ctx, "unrelated")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.root.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// The client notices the cut (its keepalive), and its watch is resumed
	// from its last revision once the path heals.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for flaky.ActiveConnection().GetState().String() == "READY" && cctx.Err() == nil {
		flaky.ActiveConnection().WaitForStateChange(cctx, flaky.ActiveConnection().GetState())
	}
	link.Restore()
	waitFor(t, 30*time.Second, "the process to follow the map past the compaction", func() bool {
		got, _ := r.ClusterOf(name)
		return got == "c1"
	})
}
