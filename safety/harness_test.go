//go:build linux

package safety

// The harness runs one cell: one workload, one register mode, one fault
// schedule, against a 5-member embedtest cluster of its own. It spawns the
// worker processes, turns their reports into a History, injects the faults
// (faults_test.go), heals everything, stops the workers and runs Check.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	// its minimum counts.
	extendCap = 90 * time.Second
	// checkTimeout bounds porcupine's search.
	checkTimeout = 90 * time.Second
)

// cellConfig describes one cell.
type cellConfig struct {
	name     string
	role     string // worker role
	mode     Mode   // of the register (register and election roles)
	duration time.Duration
	workers  int
	ttl      time.Duration
	seed     uint64
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
}

func (a counts) String() string {
	return fmt.Sprintf("ops acknowledged=%d failed=%d unknown=%d | pauses=%d (targeted %d, in critical section %d, random %d) kills=%d | "+
		"member crashes=%d (leader %d, 2-of-5-down %d) isolations=%d compactions=%d link holds=%d | "+
		"lease expiries from pauses=%d (targeted %d) sessions lost=%d | stale writes rejected=%d stale reads rejected=%d | "+
		"grants=%d targeted scenarios=%d (clean %d)",
		a.acked, a.failed, a.unknown, a.pauses, a.targeted, a.csPauses, a.random, a.kills,
		a.memberCrashes, a.leaderCrashes, a.twoDown, a.isolations, a.compactions, a.holds,
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
	lease    int64
	pend     *pending
	paused   bool
	killed   bool
	busy     bool // victim or held in a targeted scenario: no other fault touches it
	exited   bool
	stopping bool
}

// pending is an increment whose read was admitted and whose write is not
// reported yet.
type pending struct {
	token             etcdlock.Token
	readCall, readRet int64
	value             int64
	goSent            bool
}

// scenario is a targeted pause: the victim is stopped between its read and
// its write until its lease has expired and the next holder has read (and
// is held before its write); then the victim writes, then the next holder.
type scenario struct {
	victim        *proc
	token         etcdlock.Token
	value         int64
	lease         int64
	start         int64
	victimDone    chan struct{}
	victimOutcome string
	held          *proc
	heldToken     etcdlock.Token
	heldRead      int64
	released      bool
}

// scenarioResult is a finished targeted pause. It is clean when the next
// holder read the same value as the victim (no write came between) and the
// victim's write had a known outcome: then a register that admits the
// victim's stale write ends up with two increments from one value.
type scenarioResult struct {
	victimToken, heldToken etcdlock.Token
	value, heldRead        int64
	expired, held          bool
	victimOutcome          string
}

func (s scenarioResult) clean() bool {
	return s.held && s.heldRead == s.value && (s.victimOutcome == "ok" || s.victimOutcome == "stale")
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
	c := &cell{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0x5afe7)), name: "safety/" + cfg.name}
	c.dir = "etcdlock/" + c.name + "%/"
	c.prefix = "etcdlock/" + c.name
	c.counterKey = c.prefix + "#counter"
	c.sentinel = c.prefix + "#sentinel"

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
	defer cli.Close()
	c.cli = cli
	for range c.c.Members() {
		l, err := c.c.NewLink()
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c.links = append(c.links, l)
	}
	if c.rec, err = startRecorder(cli, c.prefix); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.rec.stop() }()
	c.prb = startProber(cli, c.sentinel)
	defer c.prb.stop()
	switch cfg.role {
	case roleEtcd:
		c.target = c.counterKey
	default:
		c.reg = NewRegister(cfg.mode, monoNow)
		srv := httptest.NewServer(c.reg)
		defer srv.Close()
		c.target = srv.URL
	}
	// Whatever happens, no worker outlives the cell.
	defer c.killAll()

	for i := 0; i < cfg.workers; i++ {
		if err := c.spawn(); err != nil {
			t.Fatal(err)
		}
	}

	// The faults.
	faultCtx, stopFaults := context.WithCancel(context.Background())
	pauseCtx, endPauses := context.WithCancel(context.Background())
	c.pauseCtx = pauseCtx
	var lanes sync.WaitGroup
	plan := openingPlan(cfg)
	c.planLeft = len(plan)
	lanes.Add(3)
	go func() { defer lanes.Done(); c.memberLane(faultCtx) }()
	go func() { defer lanes.Done(); c.linkLane(faultCtx) }()
	go func() { defer lanes.Done(); c.workerLane(faultCtx, plan) }()
	start := time.Now()
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
			c.errorf("minimum counts not reached %v after the cell's %v: %s", extendCap, cfg.duration, c.snapshot())
			break
		}
	}
	faultTime := time.Since(start)

	// Heal everything, then let the workers finish on a healthy cluster.
	c.mu.Lock()
	c.noFaults, c.armTargeted, c.armCS = true, false, false
	c.mu.Unlock()
	stopFaults()
	lanes.Wait()
	endPauses()
	c.faultWG.Wait()
	c.healAll()
	time.Sleep(time.Second)
	c.stopWorkers()
	c.procWG.Wait()

	// The final value, then etcd's record up to a sentinel written last.
	h := c.history()
	h.SharedGrants = cfg.role == roleRW
	ctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	c.waitQueueEmpty(ctx)
	resp, err := cli.Put(ctx, c.sentinel, "end")
	if err != nil {
		t.Fatalf("sentinel: %v", err)
	}
	if err := c.rec.waitFor(ctx, c.sentinel, resp.Header.Revision); err != nil {
		c.errorf("%v", err)
	}
	events, recErr := c.rec.stop()
	if recErr != nil {
		c.errorf("%v", recErr)
	}
	h.Probes = c.prb.stop()
	c.fillFromEtcd(h, events)

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

// vizPath says where a failed check writes its visualization:
// $ETCDLOCK_SAFETY_ARTIFACTS, else t.TempDir() for a self-test (whose
// failure is expected), else the system's temporary directory.
func (c *cell) vizPath() string {
	file := "etcdlock-safety-" + strings.ReplaceAll(c.cfg.name, "/", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".html"
	switch dir := os.Getenv("ETCDLOCK_SAFETY_ARTIFACTS"); {
	case dir != "":
		return filepath.Join(dir, file)
	case c.cfg.expectFail:
		return filepath.Join(c.t.TempDir(), file)
	}
	return filepath.Join(os.TempDir(), file)
}

// trace logs the state of the workers and members twice a second
// (ETCDLOCK_SAFETY_TRACE=1): P paused, B in a targeted pause, W between
// read and write.
func (c *cell) trace(ctx context.Context, start time.Time) {
	for sleepCtx(ctx, 500*time.Millisecond) {
		c.mu.Lock()
		var ws []string
		for _, p := range c.procs {
			if p.exited {
				continue
			}
			s := fmt.Sprintf("w%d", p.id)
			if p.paused {
				s += "P"
			}
			if p.busy {
				s += "B"
			}
			if p.pend != nil {
				s += "W"
			}
			ws = append(ws, s)
		}
		line := fmt.Sprintf("%5.1fs acked=%d grants=%d sessions-lost=%d workers=%v", time.Since(start).Seconds(),
			c.n.acked, c.n.grants, c.n.sessionsLost, ws)
		c.mu.Unlock()
		var ms []string
		for _, m := range c.c.Members() {
			s := m.Name()
			if !m.Running() {
				s += "(down)"
			}
			if m.Isolated() {
				s += "(isolated)"
			}
			ms = append(ms, s)
		}
		c.t.Logf("%s members=%v", line, ms)
	}
}

// dumpHistory writes h as JSON to path, for a failed check.
func (c *cell) dumpHistory(h *History, path string) {
	b, err := json.MarshalIndent(h, "", " ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		c.t.Logf("history: %v", err)
		return
	}
	c.t.Logf("history written to %s", path)
}

func (c *cell) snapshot() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n.String()
}

// spawn starts one more worker process.
func (c *cell) spawn() error {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return nil
	}
	id := c.nextID
	c.nextID++
	c.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envRole+"="+c.cfg.role,
		envEndpoints+"="+strings.Join(c.workerEndpoints(), ","),
		envName+"="+c.name,
		envTTL+"="+c.cfg.ttl.String(),
		envTarget+"="+c.target,
		envID+"="+fmt.Sprintf("worker-%d", id))
	p := &proc{id: id, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.stdin, p.pid = stdin, cmd.Process.Pid
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.procWG.Add(1)
	go func() {
		defer c.procWG.Done()
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.handle(p, sc.Text())
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.exited(p, cmd.Wait())
	}()
	return nil
}

// sendGo lets p write.
func (c *cell) sendGo(p *proc) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil {
		_, _ = io.WriteString(p.stdin, "GO\n") // fails only once p is gone
	}
}

func (c *cell) closeStdin(p *proc) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
}

func parseInt(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// leaseOfKey returns the lease of a queue key ".../<lease hex>-<random hex>".
func leaseOfKey(key string) int64 {
	last := key[strings.LastIndexByte(key, '/')+1:]
	hexLease, _, _ := strings.Cut(last, "-")
	v, _ := strconv.ParseUint(hexLease, 16, 64)
	return int64(v)
}

// handle processes one line of worker p.
func (c *cell) handle(p *proc, line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	if f[0] == "ABOUT_TO_WRITE" && len(f) == 3 {
		c.aboutToWrite(p, etcdlock.Token(parseInt(f[1])), parseInt(f[2]))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	bad := func() { c.errorfLocked("worker %d: malformed line %q", p.id, line) }
	switch f[0] {
	case "SESSION":
		if len(f) != 2 {
			bad()
			return
		}
		v, _ := strconv.ParseUint(f[1], 16, 64)
		p.lease = int64(v)
	case "SESSION_LOST":
		c.n.sessionsLost++
	case "UNLOCK":
		if len(f) != 3 {
			bad()
			return
		}
		tok := etcdlock.Token(parseInt(f[1]))
		for i := len(c.grants) - 1; i >= 0; i-- {
			if g := &c.grants[i]; g.Client == p.id && g.Token == tok {
				if g.Released == 0 {
					g.Released = parseInt(f[2])
				}
				break
			}
		}
	case "SESSIONERR", "ENQ", "UNLOCKED":
	case "LOCKERR":
		c.n.lockErrors++
	case "LOCKLOST":
		if len(f) != 3 {
			bad()
			return
		}
		v, _ := strconv.ParseUint(f[1], 16, 64)
		c.lostWaits = append(c.lostWaits, LostWait{Client: p.id, Lease: int64(v), At: parseInt(f[2])})
	case "GRANT":
		if len(f) != 4 {
			bad()
			return
		}
		g := Grant{Client: p.id, Token: etcdlock.Token(parseInt(f[1])), Key: f[2], At: parseInt(f[3])}
		c.grants = append(c.grants, g)
		c.n.grants++
		p.lease = leaseOfKey(g.Key)
	case "READ":
		if len(f) < 5 {
			bad()
			return
		}
		switch f[4] {
		case "ok":
			if len(f) != 6 {
				bad()
				return
			}
			p.pend = &pending{token: etcdlock.Token(parseInt(f[1])), readCall: parseInt(f[2]), readRet: parseInt(f[3]), value: parseInt(f[5])}
		case "stale":
			c.n.staleReads++
			c.n.failed++
		default:
			c.n.readErrs++
			c.n.failed++
		}
	case "WROTE":
		if len(f) != 5 {
			bad()
			return
		}
		pd := p.pend
		p.pend = nil
		if pd == nil || pd.token != etcdlock.Token(parseInt(f[1])) {
			c.errorfLocked("worker %d: WROTE without its read: %q", p.id, line)
			return
		}
		op := Op{Client: p.id, Token: pd.token, ReadCall: pd.readCall, ReadReturn: pd.readRet, Value: pd.value,
			WriteCall: parseInt(f[2]), WriteReturn: parseInt(f[3])}
		switch f[4] {
		case "ok":
			op.Outcome = Acked
			c.n.acked++
		case "stale":
			op.Outcome = Rejected
			c.n.failed++
			c.n.staleWrites++
		case "unknown":
			op.Outcome = Unknown
			c.n.unknown++
		default: // skipped
			op.Outcome = NotSent
			c.n.failed++
		}
		c.ops = append(c.ops, op)
		if s := c.scen; s != nil && s.victim == p && s.victimOutcome == "" {
			s.victimOutcome = f[4]
			close(s.victimDone)
		}
	default:
		bad()
	}
}

// aboutToWrite decides what happens between p's read and its write: a
// targeted scenario (p is the victim, or p is the next holder to hold), a
// pause in the critical section, or nothing; then p gets its GO.
func (c *cell) aboutToWrite(p *proc, tok etcdlock.Token, v int64) {
	c.mu.Lock()
	pd := p.pend
	if pd == nil || pd.token != tok || pd.value != v {
		c.errorfLocked("worker %d: ABOUT_TO_WRITE %d %d without its read", p.id, tok, v)
		c.mu.Unlock()
		return
	}
	s := c.scen
	switch {
	case s != nil && s.held == nil && !s.released && s.victim != p && tok > s.token:
		// The next holder has read while the victim is stopped: hold it
		// until the victim has written.
		s.held, s.heldToken, s.heldRead = p, tok, v
		p.busy = true
		c.mu.Unlock()
		return
	case !c.noFaults && c.armTargeted && s == nil && !p.paused && c.pausedLocked() == 0:
		c.armTargeted = false
		s = &scenario{victim: p, token: tok, value: v, lease: p.lease, start: monoNow(), victimDone: make(chan struct{})}
		c.scen = s
		p.busy, p.paused, pd.goSent = true, true, true
		c.n.pauses++
		c.n.targeted++
		c.faultWG.Add(1)
		c.mu.Unlock()
		c.stop(p)
		c.sendGo(p) // read by p only once it runs again
		go func() {
			defer c.faultWG.Done()
			c.runScenario(s)
		}()
		return
	case !c.noFaults && c.armCS && s == nil && !c.armTargeted && !p.paused && !p.busy:
		c.armCS = false
		p.paused, pd.goSent = true, true
		c.n.pauses++
		c.n.csPauses++
		lease := p.lease
		c.faultWG.Add(1)
		c.mu.Unlock()
		d := c.randDur(c.cfg.ttl/2, 3*c.cfg.ttl)
		c.stop(p)
		c.sendGo(p)
		go func() {
			defer c.faultWG.Done()
			c.pauseFor(p, lease, d)
		}()
		return
	}
	pd.goSent = true
	c.mu.Unlock()
	c.sendGo(p)
}

func (c *cell) pausedLocked() int {
	n := 0
	for _, p := range c.procs {
		if p.paused && !p.exited {
			n++
		}
	}
	return n
}

// runScenario ends a targeted pause: once 2×TTL have passed, the victim's
// lease is gone and the next holder is held after its read, the victim runs
// again and writes; then the next holder writes.
func (c *cell) runScenario(s *scenario) {
	ttl := int64(c.cfg.ttl)
	minEnd, deadline := s.start+2*ttl, s.start+int64(scenarioCap)
	expired := false
	for {
		now := monoNow()
		if !expired && now >= s.start+ttl {
			expired = c.leaseGone(s.lease)
		}
		c.mu.Lock()
		held := s.held != nil
		c.mu.Unlock()
		if (now >= minEnd && expired && held) || now >= deadline {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.cont(s.victim)
	c.mu.Lock()
	s.victim.paused = false
	if expired {
		c.n.pauseExpiries++
		c.n.targetedExpiries++
	}
	c.mu.Unlock()
	select {
	case <-s.victimDone:
	case <-time.After(scenarioCap):
		c.errorf("targeted pause: worker %d did not report its write %v after it was resumed", s.victim.id, scenarioCap)
	}
	c.mu.Lock()
	s.released = true
	c.scen = nil
	c.lastScenEnd = monoNow()
	s.victim.busy = false
	held := s.held
	r := scenarioResult{victimToken: s.token, heldToken: s.heldToken, value: s.value, heldRead: s.heldRead,
		expired: expired, held: held != nil, victimOutcome: s.victimOutcome}
	if held != nil {
		held.busy = false
		if held.pend != nil {
			held.pend.goSent = true
		}
	}
	c.results = append(c.results, r)
	c.n.scenarios++
	if r.clean() {
		c.n.clean++
	}
	c.mu.Unlock()
	if held != nil {
		c.sendGo(held)
	}
}

// pauseFor keeps the stopped p stopped for d (less when the cell ends),
// then counts whether its lease expired meanwhile and resumes it.
func (c *cell) pauseFor(p *proc, lease int64, d time.Duration) {
	sleepCtx(c.pauseCtx, d)
	expired := c.leaseGone(lease)
	c.cont(p)
	c.mu.Lock()
	p.paused = false
	if expired {
		c.n.pauseExpiries++
	}
	c.mu.Unlock()
}

// leaseGone reports whether etcd no longer knows lease (false when it
// cannot tell).
func (c *cell) leaseGone(lease int64) bool {
	if lease == 0 {
		return false
	}
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.Background()), time.Second)
		resp, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		cancel()
		switch {
		case err == nil:
			return resp.TTL <= 0
		case strings.Contains(err.Error(), "requested lease not found"):
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// stop sends SIGSTOP to p and waits until every thread of it has stopped,
// so that nothing it does afterwards can come before the pause.
func (c *cell) stop(p *proc) {
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		return // gone
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if allStopped(p.pid) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	c.errorf("worker %d: not stopped 5s after SIGSTOP", p.id)
}

// allStopped reports whether every thread of pid is stopped (or pid is gone).
func allStopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
			return false
		}
	}
	return true
}

func (c *cell) cont(p *proc) { _ = syscall.Kill(p.pid, syscall.SIGCONT) }

// exited records the end of p's process. A write that was let go and not
// reported has an unknown outcome; one that was never let go was not sent.
func (c *cell) exited(p *proc, waitErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.exited = true
	if pd := p.pend; pd != nil {
		p.pend = nil
		op := Op{Client: p.id, Token: pd.token, ReadCall: pd.readCall, ReadReturn: pd.readRet, Value: pd.value}
		if pd.goSent {
			op.Outcome = Unknown
			c.n.unknown++
		} else {
			op.Outcome = NotSent
			c.n.failed++
		}
		c.ops = append(c.ops, op)
	}
	if s := c.scen; s != nil {
		if s.victim == p && s.victimOutcome == "" {
			s.victimOutcome = "exited"
			close(s.victimDone)
		}
		if s.held == p {
			s.held = nil
		}
	}
	out := p.stderr.String()
	switch {
	case !p.killed && !p.stopping:
		c.errorfLocked("worker %d exited on its own (%v); stderr:\n%s", p.id, waitErr, out)
	case !p.killed && waitErr != nil:
		c.errorfLocked("worker %d failed (%v); stderr:\n%s", p.id, waitErr, out)
	case strings.Contains(out, "DATA RACE") || strings.Contains(out, "panic:"):
		c.errorfLocked("worker %d; stderr:\n%s", p.id, out)
	}
}

// kill SIGKILLs p (stopped or not).
func (c *cell) kill(p *proc) {
	c.mu.Lock()
	p.killed = true
	c.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
}

// killAll kills every worker still running (the cell failed half way).
func (c *cell) killAll() {
	c.mu.Lock()
	c.stopping = true
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			c.kill(p)
		}
	}
	c.procWG.Wait()
}

// stopWorkers lets every pending write go, closes every worker's stdin and
// waits for them to exit (SIGKILL after 40 s).
func (c *cell) stopWorkers() {
	c.mu.Lock()
	c.stopping = true
	procs := append([]*proc(nil), c.procs...)
	var toGo []*proc
	for _, p := range procs {
		p.stopping = true
		if p.pend != nil && !p.pend.goSent {
			p.pend.goSent = true
			toGo = append(toGo, p)
		}
	}
	c.mu.Unlock()
	for _, p := range toGo {
		c.sendGo(p)
	}
	for _, p := range procs {
		c.closeStdin(p)
	}
	deadline := time.After(40 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			c.mu.Lock()
			c.n.forcedKills++
			c.errorfLocked("worker %d did not exit within 40s of the end; killed", p.id)
			c.mu.Unlock()
			c.kill(p)
			<-p.done
		}
	}
}

// workerEndpoints are the members' endpoints, each through its link.
func (c *cell) workerEndpoints() []string {
	eps := c.c.Endpoints()
	for i, l := range c.links {
		eps[i] = l.Endpoints()[i]
	}
	return eps
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

// waitQueueEmpty waits until the lock has neither holder nor waiter (the
// leases of killed workers run out).
func (c *cell) waitQueueEmpty(ctx context.Context) {
	for {
		st, err := etcdlock.Describe(ctx, c.cli, c.name)
		if err == nil && st.Holder == nil && len(st.Waiters) == 0 {
			return
		}
		if ctx.Err() != nil {
			c.errorf("the queue of %q did not drain after the workers stopped: %+v %v", c.name, st, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// history builds the History from what the workers reported and the final
// value; fillFromEtcd adds etcd's record.
func (c *cell) history() *History {
	c.mu.Lock()
	h := &History{Ops: append([]Op(nil), c.ops...), Grants: append([]Grant(nil), c.grants...), QueueDir: c.dir,
		LostWaits: append([]LostWait(nil), c.lostWaits...)}
	c.mu.Unlock()
	if c.reg != nil {
		h.Final = c.reg.Value()
		h.Admissions = c.reg.Admissions()
	} else {
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.cli.Get(ctx, c.counterKey)
			cancel()
			if err != nil {
				if attempt == 10 {
					c.t.Fatalf("final counter: %v", err)
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if len(resp.Kvs) > 0 {
				v, _, err := parseCounter(resp.Kvs[0].Value)
				if err != nil {
					c.errorf("final counter: %v", err)
				}
				h.Final = v
			}
			break
		}
	}
	h.FinalAt = monoNow()
	return h
}

func (c *cell) fillFromEtcd(h *History, events []recorded) {
	var prev int64
	for _, ev := range events {
		switch {
		case strings.HasPrefix(ev.key, c.dir):
			h.Queue = append(h.Queue, QueueEvent{Revision: ev.rev, Delete: ev.delete, Key: ev.key,
				CreateRevision: ev.create, Lease: ev.lease, Arrived: ev.arrived})
		case ev.key == c.counterKey && !ev.delete:
			v, tok, err := parseCounter(ev.value)
			if err != nil {
				c.errorf("counter at revision %d: %v", ev.rev, err)
				continue
			}
			h.Admissions = append(h.Admissions, Admission{Seq: ev.rev, Write: true, Token: tok, Admitted: true, Prev: prev, Value: v})
			prev = v
		}
	}
	if c.reg == nil {
		h.AdmissionsAtRevisions = true
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
