//go:build linux

package safety

// The fault schedule: three lanes run at once until the cell's time is up.
// The member lane crashes and restarts a member, crashes the leader,
// isolates a member, takes 2 of 5 members down, or compacts, one episode at
// a time (at least 3 of 5 members up and connected throughout), healing each
// before the next. The worker lane pauses workers (SIGSTOP) at random points
// or inside the critical section, SIGKILLs them (a new worker replaces each),
// and arms targeted pauses (see scenario) until the cell's minimums hold.
// The link lane holds the workers' way to one to three members, the leader
// among them half of the time (Link.Hold): what they send meanwhile reaches
// the member 12-30 s later, after they gave up on it, longer than the 10 s
// after which an earlier design of the library took a write of unknown
// outcome for dead; its late-write holds (see lateHold) stop the member
// lane while they last.

import (
	"context"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// bag deals kinds in random order, each once per round.
type bag struct {
	c     *cell
	kinds []string
	left  []string
}

func (c *cell) newBag(kinds ...string) *bag { return &bag{c: c, kinds: kinds} }

func (b *bag) next() string {
	if len(b.left) == 0 {
		b.left = append([]string(nil), b.kinds...)
	}
	i := b.c.randN(len(b.left))
	k := b.left[i]
	b.left = append(b.left[:i], b.left[i+1:]...)
	return k
}

func (c *cell) memberLane(ctx context.Context) {
	b := c.newBag("crash", "leader-crash", "isolate", "two-down", "compact")
	rest := time.Duration(0)
	for sleepCtx(ctx, rest+c.randDur(500*time.Millisecond, 1500*time.Millisecond)) {
		// Every new etcd leader re-arms every lease for TTL + an election
		// timeout: with leader changes every few seconds no lease would
		// ever expire (and a dead holder would keep its lock). After a
		// leader change, give leases time to run out: the leases of the
		// workers that faults stop and kill, which have the cell's TTL.
		// A steady worker is never stopped or killed, and the library
		// revokes a session it lost (retrying until etcd answers), so no
		// steady lease needs to run out for the queue to move.
		c.members.RLock()
		before := c.c.Leader()
		switch b.next() {
		case "crash":
			c.crash(ctx, 1, false)
		case "leader-crash":
			c.crash(ctx, 1, true)
		case "two-down":
			c.crash(ctx, 2, false)
		case "isolate":
			c.isolate(ctx)
		case "compact":
			c.compact()
		}
		after := c.c.Leader()
		c.members.RUnlock()
		rest = 0
		if after != before {
			rest = 2 * c.cfg.ttl
		}
	}
}

// crash kills n members (the leader when leader is set, else followers for
// n == 1, any members for n == 2), keeps them down 1-3 s, restarts them and
// waits until the cluster is whole again.
func (c *cell) crash(ctx context.Context, n int, leader bool) {
	victims := c.victims(n, leader)
	if leader && len(victims) == 0 {
		return // no leader to crash
	}
	for _, m := range victims {
		if err := m.Kill(); err != nil {
			c.errorf("kill %s: %v", m.Name(), err)
		}
	}
	c.mu.Lock()
	c.n.memberCrashes += len(victims)
	if leader {
		c.n.leaderCrashes++
	}
	if n == 2 {
		c.n.twoDown++
	}
	c.mu.Unlock()
	sleepCtx(ctx, c.randDur(time.Second, 3*time.Second))
	for _, m := range victims {
		if err := m.Restart(); err != nil {
			c.errorf("restart %s: %v", m.Name(), err)
		}
	}
	c.waitHealthy()
}

// victims picks the members a crash kills: the leader, or n running members
// at random (the leader only when n > 1).
func (c *cell) victims(n int, leader bool) []*embedtest.Member {
	cur := c.c.Leader()
	if leader {
		if cur == nil {
			return nil
		}
		return []*embedtest.Member{cur}
	}
	var cands, victims []*embedtest.Member
	for _, m := range c.c.Members() {
		if m.Running() && !m.Isolated() && (n > 1 || m != cur) {
			cands = append(cands, m)
		}
	}
	for len(victims) < n && len(cands) > 0 {
		i := c.randN(len(cands))
		victims = append(victims, cands[i])
		cands = append(cands[:i], cands[i+1:]...)
	}
	return victims
}

// isolate cuts a member (the leader half of the time) from its peers for
// 1-3 s.
func (c *cell) isolate(ctx context.Context) {
	ms := c.c.Members()
	m := ms[c.randN(len(ms))]
	if l := c.c.Leader(); l != nil && c.randN(2) == 0 {
		m = l
	}
	if err := m.Isolate(); err != nil {
		c.errorf("isolate %s: %v", m.Name(), err)
		return
	}
	c.mu.Lock()
	c.n.isolations++
	c.mu.Unlock()
	sleepCtx(ctx, c.randDur(time.Second, 3*time.Second))
	if err := m.Heal(); err != nil {
		c.errorf("heal %s: %v", m.Name(), err)
	}
	c.waitHealthy()
}

// compact compacts etcd's history up to the last revision the recorder has
// seen: the workers' watches must cope with it, the recorder loses nothing.
func (c *cell) compact() {
	rev := c.rec.safeCompactRev()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.cli.Compact(ctx, rev); err != nil {
		if !strings.Contains(err.Error(), "compacted") {
			c.t.Logf("compact at %d: %v", rev, err)
		}
		return
	}
	c.mu.Lock()
	c.n.compactions++
	c.mu.Unlock()
}

// openingPlan is the worker faults every workload cell opens with, one of
// each kind, so that even a short run has them all (the cell runs until
// they are done). A self-test needs its targeted pauses one after the
// other and has none.
func openingPlan(cfg cellConfig) []string {
	if cfg.minClean > 0 {
		return nil
	}
	return []string{"targeted", "pause", "cs-pause", "kill", "targeted"}
}

// workerLane runs plan, then worker faults of random kinds. Whenever the
// cell still lacks targeted pauses, one is armed as soon as it can be.
func (c *cell) workerLane(ctx context.Context, plan []string) {
	b := c.newBag("pause", "pause", "kill", "cs-pause", "targeted")
	if c.cfg.minClean > 0 {
		// Other pauses would only hold a self-test's targeted pauses up (a
		// targeted pause starts when no worker is stopped): it only kills
		// in between, now and then.
		b = c.newBag("kill", "idle", "idle", "idle")
	}
	for sleepCtx(ctx, c.randDur(700*time.Millisecond, 2*time.Second)) {
		c.mu.Lock()
		need := c.n.targetedExpiries < c.cfg.minExpiries || c.n.clean < c.cfg.minClean
		c.mu.Unlock()
		switch {
		case len(plan) > 0:
			if c.workerFault(plan[0]) {
				plan = plan[1:]
				c.mu.Lock()
				c.planLeft = len(plan)
				c.mu.Unlock()
			}
		case need && c.workerFault("targeted"):
		default:
			c.workerFault(b.next())
		}
	}
}

// workerFault starts a worker fault of the given kind and reports whether it
// could (a targeted pause waits for the last one to be over, pauses wait
// while a targeted pause is armed or running).
func (c *cell) workerFault(kind string) bool {
	switch kind {
	case "pause":
		return c.randomPause()
	case "kill":
		return c.randomKill()
	case "idle":
		return true
	}
	// Between two targeted pauses the other worker faults get some time; a
	// self-test, which needs three clean ones, waits less.
	gap := int64(2500 * time.Millisecond)
	if c.cfg.minClean > 0 {
		gap = int64(500 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.noFaults || c.scen != nil || c.armTargeted || c.armCS {
		return false
	}
	switch kind {
	case "cs-pause":
		c.armCS = true
	case "targeted":
		if monoNow()-c.lastScenEnd < gap {
			return false
		}
		c.armTargeted = true
	}
	return true
}

// pickLocked returns a random worker, not a steady one, that no other
// fault or scenario is using, or nil.
func (c *cell) pickLocked(allowPaused bool) *proc {
	var cands []*proc
	for _, p := range c.procs {
		if !p.exited && !p.killed && !p.busy && !p.steady && (allowPaused || !p.paused) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[c.randN(len(cands))]
}

// randomPause stops a worker wherever it is for 0.5-3 TTL (at most two
// workers paused at once). It does not start while a targeted pause is
// armed or running: a stopped waiter that reaches the front of the queue
// holds the lock until its lease expires, and would stretch the scenario.
func (c *cell) randomPause() bool {
	c.mu.Lock()
	if c.noFaults || c.pausedLocked() >= 2 || c.scen != nil || c.armTargeted {
		c.mu.Unlock()
		return false
	}
	p := c.pickLocked(false)
	if p == nil {
		c.mu.Unlock()
		return false
	}
	p.paused = true
	lease := p.lease
	c.n.pauses++
	c.n.random++
	c.faultWG.Add(1)
	c.mu.Unlock()
	c.stop(p)
	go func() {
		defer c.faultWG.Done()
		c.pauseFor(p, lease, c.randDur(c.cfg.ttl/2, 3*c.cfg.ttl))
	}()
	return true
}

// randomKill SIGKILLs a worker (paused or not) and starts a new one.
func (c *cell) randomKill() bool {
	c.mu.Lock()
	if c.noFaults {
		c.mu.Unlock()
		return false
	}
	p := c.pickLocked(true)
	if p == nil {
		c.mu.Unlock()
		return false
	}
	c.n.kills++
	c.faultWG.Add(1)
	c.mu.Unlock()
	c.kill(p)
	go func() {
		defer c.faultWG.Done()
		<-p.done
		time.Sleep(c.randDur(100*time.Millisecond, 500*time.Millisecond))
		if err := c.spawn(); err != nil {
			c.errorf("respawn: %v", err)
		}
	}()
	return true
}
