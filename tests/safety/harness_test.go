//go:build linux

package safety

// The harness runs one cell: one workload, one register mode, one fault
// schedule, against a 5-member embedtest cluster of its own. It spawns the
// worker processes, turns their reports into a History, injects the faults
// (faults_test.go), heals everything, stops the workers and runs Check.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// scenarioCap bounds a targeted pause that waits for its lease to
	// expire and for the next holder to read.
	scenarioCap = 30 * time.Second
	// extendCap bounds how long a cell may run past its duration to reach
	// its minimum counts. A cell's targeted pauses need a worker that is not
	// steady to write while nobody is paused, and an election's writer is
	// its leader, so a cell may take a minute or two past its duration.
	extendCap = 150 * time.Second
	// checkTimeout bounds porcupine's search.
	checkTimeout = 90 * time.Second
)

// cellConfig describes one cell.
type cellConfig struct {
	name string
	role string // worker role
	mode Mode   // of the register (register and election roles)
	// unbatched: the workers' sessions use WithoutBatching (one request
	// per write instead of the client's group commit).
	unbatched bool
	duration  time.Duration
	workers   int
	ttl       time.Duration
	seed      uint64
	// The cell runs past duration until these hold (by construction: the
	// fault schedule keeps arming targeted pauses until they do).
	minAcked    int
	minExpiries int // leases expired during targeted pauses
	minClean    int // clean targeted scenarios (see scenarioResult)
	// expectFail: a self-test; its visualization goes to t.TempDir().
	expectFail bool
}

// counts are the figures of a run.
type counts struct {
	acked, failed, unknown             int
	staleReads, staleWrites, readErrs  int
	pauses, targeted, csPauses, random int
	kills, forcedKills                 int
	memberCrashes, leaderCrashes       int
	twoDown, isolations, compactions   int
	holds                              int // delay-then-deliver holds of the workers' link
	pauseExpiries, targetedExpiries    int
	sessionsLost, lockErrors, grants   int
	scenarios, clean                   int
	lateHolds, cancels                 int // the late-write scenario (lateHold)
}

func (a *counts) add(b counts) {
	a.acked += b.acked
	a.failed += b.failed
	a.unknown += b.unknown
	a.staleReads += b.staleReads
	a.staleWrites += b.staleWrites
	a.readErrs += b.readErrs
	a.pauses += b.pauses
	a.targeted += b.targeted
	a.csPauses += b.csPauses
	a.random += b.random
	a.kills += b.kills
	a.forcedKills += b.forcedKills
	a.memberCrashes += b.memberCrashes
	a.leaderCrashes += b.leaderCrashes
	a.twoDown += b.twoDown
	a.isolations += b.isolations
	a.holds += b.holds
	a.compactions += b.compactions
	a.pauseExpiries += b.pauseExpiries
	a.targetedExpiries += b.targetedExpiries
	a.sessionsLost += b.sessionsLost
	a.lockErrors += b.lockErrors
	a.grants += b.grants
	a.scenarios += b.scenarios
	a.clean += b.clean
	a.lateHolds += b.lateHolds
	a.cancels += b.cancels
}

func (a counts) String() string {
	return fmt.Sprintf("ops acknowledged=%d failed=%d unknown=%d | pauses=%d (targeted %d, in critical section %d, random %d) kills=%d | "+
		"member crashes=%d (leader %d, 2-of-5-down %d) isolations=%d compactions=%d link holds=%d (late-write %d, Locks canceled %d) | "+
		"lease expiries from pauses=%d (targeted %d) sessions lost=%d | stale writes rejected=%d stale reads rejected=%d | "+
		"grants=%d targeted scenarios=%d (clean %d)",
		a.acked, a.failed, a.unknown, a.pauses, a.targeted, a.csPauses, a.random, a.kills,
		a.memberCrashes, a.leaderCrashes, a.twoDown, a.isolations, a.compactions, a.holds, a.lateHolds, a.cancels,
		a.pauseExpiries, a.targetedExpiries, a.sessionsLost, a.staleWrites, a.staleReads,
		a.grants, a.scenarios, a.clean)
}

// proc is the harness's view of one worker process.
type proc struct {
	id     int
	cmd    *exec.Cmd
	pid    int
	stderr *lockedBuffer
	done   chan struct{} // closed once the process exited and its output was read

	inMu  sync.Mutex
	stdin io.WriteCloser

	// guarded by cell.mu
	lease     int64
	pend      *pending
	paused    bool
	killed    bool
	busy      bool // victim or held in a targeted scenario: no other fault touches it
	steady    bool // never paused or killed (see spawn)
	exited    bool
	stopping  bool
	grants    int
	recent    []string // the last lines of its output, stamped (stallReport)
	canceling *Cancel  // a bounded Lock that has not returned yet
	status    string   // its last STATUS line (stallReport)
}

// pending is an increment whose read was admitted and whose write is not
// reported yet.
type pending struct {
	token             etcdlock.Token
	readCall, readRet int64
	value             int64
	goSent            bool
}

// cellResult is what runCell returns.
type cellResult struct {
	n         counts
	report    *Report
	scenarios []scenarioResult
	history   *History
}

type cell struct {
	t   *testing.T
	cfg cellConfig
	c   *embedtest.Cluster
	cli *clientv3.Client
	// links[i] is the workers' only way to member i: the link lane holds
	// one of them at a time (delay-then-deliver, Link.Hold).
	links []*embedtest.Link
	// members is read-locked by the member lane for each episode and
	// locked by a late-write hold for all of it (see lateHold).
	members sync.RWMutex

	name, dir, prefix, counterKey, sentinel, target string

	reg *Register
	rec *recorder
	prb *prober

	rngMu sync.Mutex
	rng   *rand.Rand

	faultWG  sync.WaitGroup  // pauses, scenarios, respawns
	procWG   sync.WaitGroup  // readers of the workers' output
	pauseCtx context.Context // canceled to end random pauses early

	mu          sync.Mutex
	procs       []*proc
	nextID      int
	ops         []Op
	grants      []Grant
	lostWaits   []LostWait
	leaseAlives []LeaseAlive
	cancels     []Cancel
	n           counts
	armTargeted bool
	armCS       bool
	noFaults    bool
	stopping    bool
	scen        *scenario
	lastScenEnd int64 // monoNow when the last targeted scenario ended
	planLeft    int   // worker faults of the opening plan not done yet
	results     []scenarioResult
	errs        []string
	// For the stall report: the sessions the workers reported lost, and
	// the leaders the leader lane saw.
	lost     map[int64]lostSession
	leaders  leaderLog
	statusCh chan struct{} // a STATUS line came
}

// errorf records a harness error; runCell reports them with t.Errorf.
func (c *cell) errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errorfLocked(format, args...)
}

func (c *cell) errorfLocked(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *cell) randDur(lo, hi time.Duration) time.Duration {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)+1))
}

func (c *cell) randN(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.IntN(n)
}

// runCell runs one cell and returns its figures and the checkers' report.
// Harness failures (a worker that crashed, a member that did not restart,
// a lost watch history, minimum counts not reached) fail t; the report's
// verdict is left to the caller.
func runCell(t *testing.T, cfg cellConfig) *cellResult {
	c := &cell{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0x5afe7)), name: "safety/" + cfg.name,
		lost: map[int64]lostSession{}, statusCh: make(chan struct{}, 64)}
	c.dir = "etcdlock/" + c.name + "%/"
	c.prefix = "etcdlock/" + c.name
	c.counterKey = c.prefix + "#counter"
	c.sentinel = c.prefix + "#sentinel"
	c.start()
	// Whatever happens, no worker outlives the cell.
	defer c.killAll()
	for i := 0; i < cfg.workers; i++ {
		if err := c.spawn(); err != nil {
			t.Fatal(err)
		}
	}
	faultTime := c.runFaults()
	c.heal()
	return c.check(c.collect(), faultTime)
}

// start starts the cluster, the links, the recorder, the prober and the
// resource; the test's cleanup stops them.
func (c *cell) start() {
	t := c.t
	c.c = embedtest.Start(t, embedtest.WithMembers(5))
	setup, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.c.WaitLeader(setup); err != nil {
		t.Fatal(err)
	}
	cli, err := c.c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	c.cli = cli
	for range c.c.Members() {
		l, err := c.c.NewLink()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		c.links = append(c.links, l)
	}
	if c.rec, err = startRecorder(cli, c.prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.rec.stop() })
	c.prb = startProber(cli, c.sentinel)
	t.Cleanup(func() { c.prb.stop() })
	switch c.cfg.role {
	case roleEtcd:
		c.target = c.counterKey
	default:
		c.reg = NewRegister(c.cfg.mode, monoNow)
		srv := httptest.NewServer(c.reg)
		t.Cleanup(srv.Close)
		c.target = srv.URL
	}
}

// runFaults runs the fault lanes until the cell's duration has passed and
// its minimum counts are met (or the extension cap ran out), then heals
// everything and lets the workers finish on a healthy cluster. It returns
// how long the faults ran.
func (c *cell) runFaults() time.Duration {
	cfg := c.cfg
	faultCtx, stopFaults := context.WithCancel(context.Background())
	pauseCtx, endPauses := context.WithCancel(context.Background())
	c.pauseCtx = pauseCtx
	var lanes sync.WaitGroup
	plan := openingPlan(cfg)
	c.planLeft = len(plan)
	start := time.Now()
	// The link lane starts no late-write hold once the cell runs past its
	// duration: those holds slow everyone down, and the extension is there
	// to reach the minimum counts. A short cell (CI's 15 s) has none: a
	// 40-60 s hold of the leader's link does not fit in it, and it starves
	// the cell of the increments it must reach on a busy machine.
	lateUntil := start.Add(cfg.duration)
	if cfg.duration < longDuration {
		lateUntil = start
	}
	lanes.Add(4)
	go func() { defer lanes.Done(); c.leaderLane(faultCtx) }()
	go func() { defer lanes.Done(); c.memberLane(faultCtx) }()
	go func() { defer lanes.Done(); c.linkLane(faultCtx, lateUntil) }()
	go func() { defer lanes.Done(); c.workerLane(faultCtx, plan) }()
	if os.Getenv("ETCDLOCK_SAFETY_TRACE") != "" {
		lanes.Add(1)
		go func() { defer lanes.Done(); c.trace(faultCtx, start) }()
	}
	for {
		time.Sleep(250 * time.Millisecond)
		c.mu.Lock()
		met := c.n.acked >= cfg.minAcked && c.n.targetedExpiries >= cfg.minExpiries && c.n.clean >= cfg.minClean &&
			c.planLeft == 0
		c.mu.Unlock()
		elapsed := time.Since(start)
		if elapsed >= cfg.duration && met {
			break
		}
		if elapsed >= cfg.duration+extendCap {
			c.errorf("minimum counts not reached %v after the cell's %v: %s\n%s", extendCap, cfg.duration, c.snapshot(), c.stallReport(start))
			break
		}
	}
	faultTime := time.Since(start)
	c.mu.Lock()
	c.noFaults, c.armTargeted, c.armCS = true, false, false
	c.mu.Unlock()
	stopFaults()
	lanes.Wait()
	endPauses()
	c.faultWG.Wait()
	return faultTime
}

// heal ends every fault and lets the workers finish.
func (c *cell) heal() {
	c.healAll()
	time.Sleep(time.Second)
	c.stopWorkers()
	c.procWG.Wait()
}

// check runs the checkers on h, summarizes the cell, and reports the
// harness's errors.
func (c *cell) check(h *History, faultTime time.Duration) *cellResult {
	t, cfg := c.t, c.cfg
	viz := c.vizPath()
	checkStart := time.Now()
	rep := Check(h, Options{Timeout: checkTimeout, VisualizationPath: viz})
	c.mu.Lock()
	res := &cellResult{n: c.n, report: rep, scenarios: append([]scenarioResult(nil), c.results...), history: h}
	errs := append([]string(nil), c.errs...)
	c.mu.Unlock()
	resource := cfg.mode.String() + " register"
	switch cfg.role {
	case roleEtcd:
		resource = "counter in etcd behind Lock.Guard"
	case roleRW:
		resource = cfg.mode.String() + " register, RWMutex readers admitted shared"
	}
	summarize(t, "safety %s (%s, %v of faults, seed %d): %s | %d ops, %d grants and %d queue events checked in %v (%d grants without a later probe): verdict %s",
		cfg.name, resource, faultTime.Round(100*time.Millisecond), cfg.seed, res.n,
		len(h.Ops), len(h.Grants), len(h.Queue), time.Since(checkStart).Round(10*time.Millisecond), rep.Unbounded, rep.Verdict())
	if !rep.OK() {
		t.Logf("checker report: %s", rep)
		c.dumpHistory(h, strings.TrimSuffix(viz, ".html")+".json")
	}
	for _, e := range errs {
		t.Errorf("harness: %s", e)
	}
	return res
}

// healAll restores the workers' links, restarts killed members, heals
// isolated ones, and waits for every member to serve and for a leader.
func (c *cell) healAll() {
	for _, l := range c.links {
		l.Restore()
	}
	for _, m := range c.c.Members() {
		if m.Isolated() {
			if err := m.Heal(); err != nil {
				c.errorf("heal %s: %v", m.Name(), err)
			}
		}
		if !m.Running() {
			if err := m.Restart(); err != nil {
				c.errorf("restart %s: %v", m.Name(), err)
			}
		}
	}
	c.waitHealthy()
}

func (c *cell) waitHealthy() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range c.c.Members() {
		if m.Running() {
			if err := m.WaitReady(ctx); err != nil {
				c.errorf("%s not ready: %v", m.Name(), err)
			}
		}
	}
	if _, err := c.c.WaitLeader(ctx); err != nil {
		c.errorf("no leader: %v", err)
	}
}
