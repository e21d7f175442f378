package main

// The shards scenario: how names spread over 1, 2 and 4 clusters, how
// long a dead client's lock takes to free after an etcd leader change with
// 8,000 leases on one cluster against 2,000 on each of 4, and what a move
// of one slot costs with and without other slots' keys (shardmove.go).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// deployment is a sharded deployment of the bench: n clusters in process.
type deployment struct {
	clusters []*embedtest.Cluster
	clients  map[string]*clientv3.Client
	shards   *shard.Shards
}

func startDeployment(ctx context.Context, o options, n int) (*deployment, error) {
	cs, err := embedtest.NewClusters(ctx, n, embedtest.WithMembers(o.members), embedtest.WithFsync(o.fsync))
	if err != nil {
		return nil, err
	}
	d := &deployment{clusters: cs, clients: map[string]*clientv3.Client{}}
	eps := map[string][]string{}
	for i, c := range cs {
		id := fmt.Sprintf("c%d", i)
		cfg := c.ClientConfig()
		cfg.Logger = zap.NewNop() // a worker's canceled request is no news
		if d.clients[id], err = clientv3.New(cfg); err != nil {
			d.close()
			return nil, err
		}
		eps[id] = c.Endpoints()
	}
	if err := shard.Create(ctx, d.clients["c0"], eps); err != nil {
		d.close()
		return nil, err
	}
	if d.shards, err = shard.New(ctx, d.clients["c0"]); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *deployment) close() {
	if d.shards != nil {
		_ = d.shards.Close()
	}
	for _, cli := range d.clients {
		_ = cli.Close()
	}
	for _, c := range d.clusters {
		_ = c.Close()
	}
}

// appliedIndex is the applied raft index of cluster i's leader (0 if
// unknown).
func (d *deployment) appliedIndex(ctx context.Context, i int) uint64 {
	_, index, _, _ := etcdx.LeaderStatus(ctx, d.clients[fmt.Sprintf("c%d", i)])
	return index
}

func shardsScenario(ctx context.Context, o options) []Result {
	var out []Result
	for _, n := range []int{1, 2, 4} {
		out = append(out, spread(ctx, o, n)...)
	}
	for _, n := range []int{1, 4} {
		out = append(out, freeTime(ctx, o, n))
	}
	for _, others := range []int{0, moveOthers} {
		out = append(out, moveCost(ctx, o, others))
	}
	return out
}

// spreadWorkers lock names of spreadTeams shard keys at random.
const (
	spreadWorkers = 64
	spreadTeams   = 2000
)

// spread runs the many-names workload through a sharded session over n
// clusters and reports each cluster's share of grants and of raft commits.
func spread(ctx context.Context, o options, n int) []Result {
	d, err := startDeployment(ctx, o, n)
	if err != nil {
		return []Result{{Scenario: "shards spread", Note: "error: " + err.Error()}}
	}
	defer d.close()
	sessions := make([]*shard.Session, 16)
	for i := range sessions {
		if sessions[i], err = shard.NewSession(ctx, d.shards); err != nil {
			return []Result{{Scenario: "shards spread", Note: "error: " + err.Error()}}
		}
		defer sessions[i].Close()
	}
	grants := make([]atomic.Int64, n)
	before := make([]uint64, n)
	for i := range n {
		before[i] = d.appliedIndex(ctx, i)
	}
	wctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range spreadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sessions[w%len(sessions)]
			for wctx.Err() == nil {
				name := fmt.Sprintf("team-%d/job", rand.IntN(spreadTeams))
				l, err := s.NewMutex(name).Lock(wctx)
				if err != nil {
					continue
				}
				id, _ := d.shards.ClusterOf(name)
				var i int
				fmt.Sscanf(id, "c%d", &i)
				grants[i].Add(1)
				_ = l.Unlock(wctx)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	return spreadRows(ctx, d, n, grants, before, took)
}

func spreadRows(ctx context.Context, d *deployment, n int, grants []atomic.Int64, before []uint64, took time.Duration) []Result {
	var total, commits int64
	deltas := make([]int64, n)
	for i := range n {
		deltas[i] = int64(d.appliedIndex(ctx, i) - before[i])
		commits += deltas[i]
		total += grants[i].Load()
	}
	var shares []string
	for i := range n {
		shares = append(shares, fmt.Sprintf("c%d %.0f%%/%.0f%%", i,
			100*float64(grants[i].Load())/float64(max(total, 1)), 100*float64(deltas[i])/float64(max(commits, 1))))
	}
	return []Result{{Scenario: "shards spread", Workers: spreadWorkers, Contestant: fmt.Sprintf("%d clusters", n),
		Grants: total, PerSecond: float64(total) / took.Seconds(),
		Note: fmt.Sprintf("grants/commits per cluster (1/N = %.0f%%): %s", 100/float64(n), strings.Join(shares, ", "))}}
}

// freeSessions is the number of sessions (leases) over the deployment.
const freeSessions = 8000

// freeTime puts freeSessions leases of TTL o.ttl over n clusters (the dead
// client's among them, on c0), kills the holder's client and then c0's
// etcd leader, and reports when the waiter was granted and when c0's last
// lease ended (the new leader spreads the expiries of 1,000 leases or more
// at 750 a second).
func freeTime(ctx context.Context, o options, n int) Result {
	r := Result{Scenario: "shards free time", Contestant: fmt.Sprintf("%d clusters", n)}
	d, err := startDeployment(ctx, o, n)
	if err != nil {
		r.Note = "error: " + err.Error()
		return r
	}
	defer d.close()
	granted, drained, err := freeOnce(ctx, d, o.ttl, freeSessions/n)
	if err != nil {
		r.Note = "error: " + err.Error()
		return r
	}
	r.Note = fmt.Sprintf("%d leases on the holder's cluster, TTL %v: next holder after %.1fs, the cluster's last lease gone after %.1fs",
		freeSessions/n, o.ttl, granted.Seconds(), drained.Seconds())
	return r
}

func freeOnce(ctx context.Context, d *deployment, ttl time.Duration, leases int) (granted, drained time.Duration, err error) {
	c0 := d.clusters[0]
	flaky, link, err := c0.FlakyClient()
	if err != nil {
		return 0, 0, err
	}
	defer flaky.Close()
	holder, waiter, name, done, err := freeParties(ctx, d, flaky, ttl)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	if _, err := holder.NewMutex(name).Lock(ctx); err != nil {
		return 0, 0, err
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiter.NewMutex(name).Lock(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "free time waiter:", err)
			close(got)
			return
		}
		got <- time.Now()
		_ = l.Unlock(ctx)
	}()
	if err := fillLeases(ctx, d.clients["c0"], leases-2, ttl); err != nil {
		return 0, 0, err
	}
	link.Cut() // the holder's client dies
	died := time.Now()
	leader, err := c0.WaitLeader(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := leader.Kill(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = leader.Restart() }()
	at, ok := <-got
	if !ok {
		return 0, 0, fmt.Errorf("the waiter failed")
	}
	for {
		resp, err := d.clients["c0"].Leases(ctx)
		if err == nil && len(resp.Leases) <= 1 { // the waiter's
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return at.Sub(died), time.Since(died), nil
}

// freeParties opens the free-time holder and waiter, sharded sessions of
// TTL ttl (a plain session acquires nothing on a member cluster), and picks
// a name that lives on c0. The holder reaches c0 through flaky (its own
// Shards dials c0 so, and closes flaky with it). done closes them.
func freeParties(ctx context.Context, d *deployment, flaky *clientv3.Client, ttl time.Duration) (holder, waiter *shard.Session, name string, done func(), err error) {
	hs, err := shard.New(ctx, d.clients["c0"], shard.WithDialer(
		func(_ context.Context, id string, _ []string) (*clientv3.Client, error) {
			if id != "c0" {
				return nil, fmt.Errorf("the holder uses c0 only, not %s", id)
			}
			return flaky, nil
		}))
	if err != nil {
		return nil, nil, "", nil, err
	}
	if holder, err = shard.NewSession(ctx, hs, etcdlock.WithTTL(ttl)); err == nil {
		waiter, err = shard.NewSession(ctx, d.shards, etcdlock.WithTTL(ttl))
	}
	done = func() {
		for _, s := range []*shard.Session{waiter, holder} {
			if s != nil {
				_ = s.Close()
			}
		}
		_ = hs.Close()
	}
	if err != nil {
		done()
		return nil, nil, "", nil, err
	}
	for i := 0; ; i++ {
		name = fmt.Sprintf("bench/free-%d", i)
		if id, _ := d.shards.ClusterOf(name); id == "c0" {
			return holder, waiter, name, done, nil
		}
	}
}

// fillLeases grants n leases of ttl that nobody keeps alive: the sessions
// of other clients, as the lessor sees them after a leader change.
func fillLeases(ctx context.Context, cli *clientv3.Client, n int, ttl time.Duration) error {
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				if _, err := cli.Grant(ctx, int64(ttl.Seconds())); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}
