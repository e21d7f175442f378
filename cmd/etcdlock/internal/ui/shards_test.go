package ui

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestShardedPage: on a sharded deployment the page shows the names of
// every member cluster, each with its cluster and slot; a holder's expiry
// is told from its own cluster's leases; a slot's move shows on the
// timeline as moving, then moved; Break reaches the name's cluster.
func TestShardedPage(t *testing.T) {
	clis, r := startShards(t)
	ctx := embedtest.Context(t, long)
	_, hs := startUI(t, clis[0], Config{AllowBreak: true, Clusters: []Source{{ID: "a", Client: clis[0]}, {ID: "b", Client: clis[1]}}})
	st := openStream(t, hs)
	s, err := shard.NewSession(ctx, r, etcdlock.WithIdentity("erin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	names := map[string]string{}
	for i := 0; len(names) < 2; i++ {
		name := fmt.Sprintf("team-%d/job", i)
		if id, _ := r.ClusterOf(name); names[id] == "" {
			names[id] = name
			if _, err := s.NewMutex(name).Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := waitLocks(t, hs, "", "a name on each cluster", func(l locksJSON) bool { return l.Sharded && l.Names == 2 })
	for _, l := range got.Locks {
		checkShardedRow(t, l, map[string]string{names["a"]: "a", names["b"]: "b"}[l.Name])
	}
	// Move a's slot to b while a's name is free: the timeline shows it.
	free := names["a"]
	st2, _ := etcdlock.Describe(ctx, clis[0], free)
	if code, body := postBreak(t, hs.URL, hs.Client(), fmt.Sprintf(`{"name":%q,"token":%d}`, free, st2.Holder.Token)); code != http.StatusOK {
		t.Fatalf("break on cluster a: %d %s", code, body)
	}
	if err := r.MoveSlot(ctx, shard.SlotOf(free), "b", shard.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	slot := fmt.Sprintf("slot %d", shard.SlotOf(free))
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindMoving && e.Name == slot && e.Detail == "moving from a to b" })
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindMoved && e.Name == slot && e.Detail == "moved from a to b" })
}

// startShards starts a deployment of two clusters, "a" (the root) and "b",
// and returns their clients and a Shards, closed at cleanup.
func startShards(t *testing.T) ([]*clientv3.Client, *shard.Shards) {
	t.Helper()
	cs := embedtest.StartClusters(t, 2, embedtest.WithMembers(1))
	clis := []*clientv3.Client{cs[0].TestClient(t), cs[1].TestClient(t)}
	ctx := embedtest.Context(t, long)
	if err := shard.Create(ctx, clis[0], map[string][]string{"a": cs[0].Endpoints(), "b": cs[1].Endpoints()}); err != nil {
		t.Fatal(err)
	}
	r, err := shard.New(ctx, clis[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return clis, r
}

// checkShardedRow checks that l names cluster, its slot, and a holder with
// a live lease (asked on its own cluster).
func checkShardedRow(t *testing.T, l lockjson.Status, cluster string) {
	t.Helper()
	if l.Cluster != cluster || l.Slot == nil || *l.Slot != shard.SlotOf(l.Name) ||
		l.Holder == nil || l.Holder.LeaseTTLLeft == nil || *l.Holder.LeaseTTLLeft <= 0 {
		t.Fatalf("lock %+v: want cluster %s, its slot and a live lease", l, cluster)
	}
}
