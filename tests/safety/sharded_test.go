//go:build linux

package safety

// The sharded cell: in-process workers share sharded sessions
// (shard.NewSession) over a deployment of two 3-member clusters, locking
// two names on two slots that the mover nemesis (sharded_mover_test.go)
// moves back and forth between the clusters, while the member lane of each
// cluster (faults_test.go), holds and cuts of the workers' links, and
// revocations of their sessions' leases run. The workers increment a fenced
// Register per name; the checkers are Check's, with the queue checkers run
// on each cluster's record of the queue (sharded_check_test.go).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Run lengths of the sharded cell: 20 s of faults in CI; 3 minutes with
// ETCDLOCK_SAFETY_SHARDED_LONG=1, or ETCDLOCK_SAFETY_SHARDED_DURATION.
const (
	shardedShort      = 20 * time.Second
	shardedLong       = 3 * time.Minute
	shardedExtendCap  = 40 * time.Second
	shardedWorkers    = 4
	shardedMinAcked   = 30
	shardedMinRevoked = 1 // targeted revocations whose next holder read
)

func shardedDuration(t *testing.T) time.Duration {
	v := os.Getenv("ETCDLOCK_SAFETY_SHARDED_DURATION")
	switch {
	case v == "" && os.Getenv("ETCDLOCK_SAFETY_SHARDED_LONG") != "":
		return shardedLong
	case v == "":
		return shardedShort
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("ETCDLOCK_SAFETY_SHARDED_DURATION=%q: want a positive duration such as 5m", v)
	}
	return d
}

// shardNames are the cell's names: their shard keys put them on two
// different slots (checked at start).
var shardNames = []string{"safety/sharded-a{alpha}", "safety/sharded-b{beta}"}

// shardCell is the sharded cell's state.
type shardCell struct {
	t        *testing.T
	duration time.Duration
	seed     uint64
	ids      []string // cluster ids; ids[0] is the root
	clusters map[string]*embedtest.Cluster
	clis     map[string]*clientv3.Client // the test's own, direct
	links    map[string][]*embedtest.Link
	subs     map[string]*cell // per cluster, for its member lane
	recs     map[string]*recorder
	prbs     map[string]*prober
	admin    *shard.Shards // the nemesis's, on the root's direct client
	regs     map[string]*Register
	urls     map[string]string

	rngMu sync.Mutex
	rng   *rand.Rand

	mu         sync.Mutex
	ops        map[string][]Op
	grants     map[string][]Grant
	n          shardCounts
	errs       []string
	scen       *revokeScenario
	armRevoke  bool
	planLeft   int
	stopping   bool
	results    []revokeResult
	nextClient int
}

const shardSentinel = "etcdlock/safety/sharded#sentinel"

func (sc *shardCell) randDur(lo, hi time.Duration) time.Duration {
	sc.rngMu.Lock()
	defer sc.rngMu.Unlock()
	return lo + time.Duration(sc.rng.Int64N(int64(hi-lo)+1))
}

func (sc *shardCell) randN(n int) int {
	sc.rngMu.Lock()
	defer sc.rngMu.Unlock()
	return sc.rng.IntN(n)
}

func (sc *shardCell) errorf(format string, args ...any) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.errs = append(sc.errs, fmt.Sprintf(format, args...))
}

// TestSafetySharded runs the sharded cell and requires every checker to
// pass on each name.
func TestSafetySharded(t *testing.T) {
	sc := &shardCell{t: t, duration: shardedDuration(t), seed: safetySeed(t), ops: map[string][]Op{},
		grants: map[string][]Grant{}, n: shardCounts{moves: map[string]int{}, phases: map[string]int{}}}
	sc.rng = rand.New(rand.NewPCG(sc.seed, 0x5a4d))
	sc.start()
	start := time.Now()
	faultTime := sc.run()
	sc.heal()
	reports := sc.check()
	sc.mu.Lock()
	n, errs, results := sc.n, sc.errs, sc.results
	sc.mu.Unlock()
	summarize(t, "safety sharded (2 clusters of 3, %d workers, %v of faults, %v in all, seed %d): %s",
		shardedWorkers, faultTime.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), sc.seed, n)
	for _, name := range shardNames {
		r := reports[name]
		summarize(t, "safety sharded %s: verdict %s", name, r.Verdict())
		if !r.OK() {
			t.Errorf("safety violated on %s: %s", name, r)
		}
	}
	for _, s := range results {
		if s.revoked && s.held && s.outcome == "ok" {
			t.Errorf("stale write admitted: token %d wrote after its lease was revoked and token %d had read", s.token, s.heldToken)
		}
	}
	for _, e := range errs {
		t.Errorf("harness: %s", e)
	}
}

// start starts the two clusters, makes them a sharded deployment, and
// starts the links, recorders, probers and registers.
func (sc *shardCell) start() {
	t := sc.t
	if shard.SlotOf(shardNames[0]) == shard.SlotOf(shardNames[1]) {
		t.Fatalf("the names share slot %d", shard.SlotOf(shardNames[0]))
	}
	sc.clusters, sc.clis, sc.links = map[string]*embedtest.Cluster{}, map[string]*clientv3.Client{}, map[string][]*embedtest.Link{}
	sc.subs, sc.recs, sc.prbs = map[string]*cell{}, map[string]*recorder{}, map[string]*prober{}
	eps := map[string][]string{}
	for i, c := range embedtest.StartClusters(t, 2, embedtest.WithMembers(3)) {
		id := fmt.Sprintf("c%d", i)
		sc.ids = append(sc.ids, id)
		sc.clusters[id], sc.clis[id], eps[id] = c, c.TestClient(t), c.Endpoints()
		for range c.Members() {
			l, err := c.NewLink()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			sc.links[id] = append(sc.links[id], l)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := sc.clis[sc.ids[0]]
	if err := shard.Create(ctx, root, eps); err != nil {
		t.Fatal(err)
	}
	admin, err := shard.New(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	sc.admin = admin
	for i, id := range sc.ids {
		rec, err := startSeededRecorder(sc.clis[id], "etcdlock")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = rec.stop() })
		sc.recs[id], sc.prbs[id] = rec, startProber(sc.clis[id], shardSentinel)
		t.Cleanup(func() { sc.prbs[id].stop() })
		sc.subs[id] = &cell{t: t, cfg: cellConfig{name: "sharded-" + id, ttl: sessionTTL}, c: sc.clusters[id],
			cli: sc.clis[id], rec: rec, links: sc.links[id], rng: rand.New(rand.NewPCG(sc.seed, uint64(i+1)))}
	}
	sc.regs, sc.urls = map[string]*Register{}, map[string]string{}
	for _, name := range shardNames {
		sc.regs[name] = NewRegister(Fenced, monoNow)
		srv := httptest.NewServer(sc.regs[name])
		t.Cleanup(srv.Close)
		sc.urls[name] = srv.URL
	}
}

// workerEndpoints are cluster id's members' endpoints, each through its
// link.
func (sc *shardCell) workerEndpoints(id string) []string {
	eps := sc.clusters[id].Endpoints()
	for i, l := range sc.links[id] {
		eps[i] = l.Endpoints()[i]
	}
	return eps
}

// run starts the workers and the fault lanes, and runs them until the
// cell's duration has passed and its minimums are met (or the extension
// cap ran out). It returns how long the faults ran.
func (sc *shardCell) run() time.Duration {
	workCtx, stopWork := context.WithCancel(context.Background())
	sc.t.Cleanup(stopWork)
	var workers sync.WaitGroup
	for i := 0; i < shardedWorkers; i++ {
		workers.Add(1)
		go func() { defer workers.Done(); sc.worker(workCtx) }()
	}
	sc.t.Cleanup(workers.Wait)
	faultCtx, stopFaults := context.WithCancel(context.Background())
	var lanes sync.WaitGroup
	plan := moverKinds()
	sc.planLeft = len(plan)
	lanes.Add(3 + len(sc.ids))
	for _, id := range sc.ids {
		go func() { defer lanes.Done(); sc.subs[id].memberLane(faultCtx) }()
	}
	go func() { defer lanes.Done(); sc.linkLane(faultCtx) }()
	go func() { defer lanes.Done(); sc.revokeLane(faultCtx) }()
	go func() { defer lanes.Done(); sc.moverLane(faultCtx, plan) }()
	start := time.Now()
	for {
		time.Sleep(250 * time.Millisecond)
		sc.mu.Lock()
		met := sc.n.acked >= shardedMinAcked && sc.n.revokedHeld >= shardedMinRevoked && sc.planLeft == 0
		snap := sc.n.String()
		sc.mu.Unlock()
		elapsed := time.Since(start)
		if elapsed >= sc.duration && met {
			break
		}
		if elapsed >= sc.duration+shardedExtendCap {
			sc.errorf("minimum counts not reached %v after the cell's %v: %s", shardedExtendCap, sc.duration, snap)
			break
		}
	}
	faultTime := time.Since(start)
	sc.mu.Lock()
	sc.armRevoke = false
	sc.mu.Unlock()
	stopFaults()
	lanes.Wait()
	sc.stopWorkers(&workers, stopWork)
	return faultTime
}

// stopWorkers heals everything, settles every move, then lets the workers
// finish their iteration and waits for them.
func (sc *shardCell) stopWorkers(workers *sync.WaitGroup, stopWork context.CancelFunc) {
	sc.healLinksAndMembers()
	for _, name := range shardNames {
		if !sc.settle(shard.SlotOf(name), time.Minute) {
			sc.errorf("%s: a move of its slot is still recorded a minute after the faults", name)
		}
	}
	sc.mu.Lock()
	sc.stopping = true
	sc.mu.Unlock()
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		sc.errorf("the workers did not finish within a minute of a healed deployment")
		stopWork()
		<-done
	}
}

// healLinksAndMembers restores every link and heals every member.
func (sc *shardCell) healLinksAndMembers() {
	for _, id := range sc.ids {
		for _, l := range sc.links[id] {
			l.Restore()
		}
		sc.subs[id].healAll()
	}
}

// heal collects what each cluster recorded up to a sentinel written last.
func (sc *shardCell) heal() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range sc.ids {
		resp, err := sc.clis[id].Put(ctx, shardSentinel, "end")
		if err != nil {
			sc.t.Fatalf("sentinel on %s: %v", id, err)
		}
		if err := sc.recs[id].waitFor(ctx, shardSentinel, resp.Header.Revision); err != nil {
			sc.errorf("%s: %v", id, err)
		}
		sc.prbs[id].stop()
	}
	for _, id := range sc.ids {
		sub := sc.subs[id]
		sub.mu.Lock()
		sc.n.members.add(sub.n)
		for _, e := range sub.errs {
			sc.errs = append(sc.errs, id+": "+e)
		}
		sub.mu.Unlock()
	}
}
