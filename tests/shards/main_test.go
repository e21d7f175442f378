// Package shards_test tests sharding (several etcd clusters, slots that
// move between them) against real embedded members.
package shards_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// TestMain runs up to four tests at once (each has a deployment of its
// own and mostly waits for its clusters), unless -parallel is given.
func TestMain(m *testing.M) {
	flag.Parse()
	locktest.ParallelUnlessSet(4)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(embedtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// deployment is a sharded deployment for one test: its clusters (ids "c0",
// "c1", ...; c0 is also the root), a direct client of each, and an
// operator's Shards.
type deployment struct {
	clusters []*embedtest.Cluster
	ids      []string
	clients  map[string]*clientv3.Client
	root     *clientv3.Client
	admin    *shard.Shards
}

// startDeployment starts one cluster per entry of members, with that many
// members, and makes them one sharded deployment (shard.Create), closed at
// cleanup.
func startDeployment(t *testing.T, members ...int) *deployment {
	t.Helper()
	d := &deployment{clients: map[string]*clientv3.Client{}}
	for _, n := range members {
		d.clusters = append(d.clusters, embedtest.Start(t, embedtest.WithMembers(n)))
	}
	eps := map[string][]string{}
	for i, c := range d.clusters {
		id := fmt.Sprintf("c%d", i)
		d.ids = append(d.ids, id)
		d.clients[id] = c.TestClient(t)
		eps[id] = c.Endpoints()
	}
	d.root = d.clients["c0"]
	ctx := embedtest.Context(t, time.Minute)
	if err := shard.Create(ctx, d.root, eps); err != nil {
		t.Fatal(err)
	}
	d.admin = d.newShards(t)
	return d
}

// newShards returns a Shards of d (dial: each cluster's client, nil for
// the default), closed at cleanup.
func (d *deployment) newShards(t *testing.T, opts ...shard.Option) *shard.Shards {
	t.Helper()
	r, err := shard.New(embedtest.Context(t, 30*time.Second), d.root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close shards: %v", err)
		}
	})
	return r
}

// session opens a sharded session on r, closed at cleanup.
func session(t *testing.T, r *shard.Shards, opts ...etcdlock.SessionOption) *shard.Session {
	t.Helper()
	s, err := shard.NewSession(embedtest.Context(t, 10*time.Second), r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// nameOn returns a name no other test uses whose slot the map gives
// cluster id now.
func (d *deployment) nameOn(t *testing.T, id string) string {
	t.Helper()
	for i := 0; i < 100000; i++ {
		name := fmt.Sprintf("%s-%d/%d", strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1), i)
		if got, _ := d.admin.ClusterOf(name); got == id {
			return name
		}
	}
	t.Fatalf("no name found on %s", id)
	return ""
}

var nameSeq atomic.Int64

// keysOf returns the queue keys of name on cluster id.
func (d *deployment) keysOf(t *testing.T, id, name string) []string {
	t.Helper()
	prefix := layout.NamePrefix(name)
	resp, err := d.clients[id].Get(embedtest.Context(t, 10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// move moves name's slot to id with the operator's Shards, and waits until
// every Shards in also routes it there.
func (d *deployment) move(t *testing.T, name, to string, o shard.MoveOptions, also ...*shard.Shards) {
	t.Helper()
	if err := d.admin.MoveSlot(embedtest.Context(t, time.Minute), shard.SlotOf(name), to, o); err != nil {
		t.Fatal(err)
	}
	for _, r := range append(also, d.admin) {
		waitFor(t, 10*time.Second, "the map to reach every client", func() bool {
			got, _ := r.ClusterOf(name)
			return got == to
		})
	}
}

// waitFor polls cond every 20ms until it holds or d passes: for state that
// lives in etcd or in another goroutine's view, where no event can be
// awaited from the test.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
