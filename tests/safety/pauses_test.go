package safety

// This file holds the pauses of workers between their read and their
// write: the targeted scenario and the pauses in the critical section.

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
)

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
	case c.targetNow(p):
		c.startTargeted(p, pd, tok, v) // unlocks c.mu
		return
	case c.csPauseNow(p):
		c.startCSPause(p, pd) // unlocks c.mu
		return
	}
	pd.goSent = true
	c.mu.Unlock()
	c.sendGo(p)
}

// targetNow reports whether p, about to write, becomes the victim of a
// targeted pause. c.mu is held.
func (c *cell) targetNow(p *proc) bool {
	return !c.noFaults && c.armTargeted && c.scen == nil && !p.paused && !p.steady && c.pausedLocked() == 0
}

// csPauseNow reports whether p, about to write, is paused in its critical
// section. c.mu is held.
func (c *cell) csPauseNow(p *proc) bool {
	return !c.noFaults && c.armCS && c.scen == nil && !c.armTargeted && !p.paused && !p.busy && !p.steady
}

// startTargeted stops p, the victim, between its read and its write and
// runs the scenario. c.mu is held; it unlocks it.
func (c *cell) startTargeted(p *proc, pd *pending, tok etcdlock.Token, v int64) {
	c.armTargeted = false
	s := &scenario{victim: p, token: tok, value: v, lease: p.lease, start: monoNow(), victimDone: make(chan struct{})}
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
}

// startCSPause stops p in its critical section for a while. c.mu is held;
// it unlocks it.
func (c *cell) startCSPause(p *proc, pd *pending) {
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
