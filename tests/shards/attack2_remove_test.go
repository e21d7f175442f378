package shards_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackRemoveRacesMove: RemoveCluster of the target lands between
// MoveSlot's contact and its record (the dialer of the target runs it, so
// the interleaving is exact). Wanted: the move fails with nothing written,
// or the remove fails. Seen: the move records, freezes and drains the
// source, then fails at the raise ("unknown cluster"); AbortMove cannot
// reach the target either, so the slot stays frozen.
func TestAttackRemoveRacesMove(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	c2 := embedtest.Start(t, embedtest.WithMembers(1))
	ctx := embedtest.Context(t, 2*time.Minute)
	if err := d.admin.AddCluster(ctx, "c2", c2.Endpoints()); err != nil {
		t.Fatal(err)
	}
	name := d.nameOn(t, "c0")
	removed := false
	mover := d.newShards(t, shard.WithDialer(func(ctx context.Context, id string, eps []string) (*clientv3.Client, error) {
		if id == "c2" && !removed {
			removed = true
			if err := d.admin.RemoveCluster(ctx, "c2"); err != nil {
				t.Errorf("remove c2 inside the move's contact: %v", err)
			}
		}
		return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	}))
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := mover.MoveSlot(mctx, shard.SlotOf(name), "c2", shard.MoveOptions{})
	cancel()
	t.Logf("MoveSlot: %v", err)
	resp, gerr := d.root.Get(ctx, "etcdlock-shards/moves/", clientv3.WithPrefix())
	if gerr != nil {
		t.Fatal(gerr)
	}
	if err == nil {
		got, _ := d.admin.ClusterOf(name)
		t.Fatalf("the move to a removed cluster succeeded: the map now gives slot %d to %q, a cluster with no record", shard.SlotOf(name), got)
	}
	if len(resp.Kvs) == 0 {
		return // failed with nothing recorded: fine
	}
	t.Logf("move record left: %s", resp.Kvs[0].Value)
	aerr := d.admin.AbortMove(ctx, shard.SlotOf(name))
	t.Logf("AbortMove: %v", aerr)
	s := session(t, d.admin)
	tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
	_, lerr := s.NewMutex(name).Lock(tctx)
	tcancel()
	t.Logf("Lock of %s (slot %d) afterwards: %v", name, shard.SlotOf(name), lerr)
	if aerr != nil {
		// The way out: record c2 again, then abort.
		if err := d.admin.AddCluster(ctx, "c2", c2.Endpoints()); err != nil {
			t.Logf("re-add c2: %v", err)
		}
		waitFor(t, 10*time.Second, "c2 known", func() bool { _, err := d.admin.Client(ctx, "c2"); return err == nil })
		t.Logf("AbortMove after re-adding c2: %v", d.admin.AbortMove(ctx, shard.SlotOf(name)))
	}
	if aerr != nil || lerr != nil {
		t.Fatalf("slot %d stranded: the move to removed c2 is recorded (%v), abort fails (%v), lock fails (%v)",
			shard.SlotOf(name), err, aerr, lerr)
	}
}
