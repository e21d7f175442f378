//go:build linux

package safety

// The link lane: holds of the workers' links to members, and the
// late-write holds of the fenced-register cells (see lateHold).

import (
	"context"
	"slices"
	"time"
)

// Bounds of a hold of the workers' links: past the 10 s after which an
// earlier design stopped expecting a write of unknown outcome, plus the time
// to give up on a write (2 s), to wait in the queue (seconds, behind paused
// holders) and to reuse a freed name, so that such a write is delivered
// after the library gave it up and while the name is in use again. (A run
// of that design showed a held delete that would have removed a reused
// name's grant delivered 11 ms before the name was reused, 20.4 s into its
// hold.)
const (
	holdMin = 12 * time.Second
	holdMax = 30 * time.Second
	// lateHoldMin and lateHoldMax bound a late-write hold: long enough for
	// a reaper that waits "long enough" (the old code waited 10 s after its
	// last delete of unknown outcome) to free a name given up early in the
	// hold, and for the worker to lock it again while the hold lasts.
	lateHoldMin = 40 * time.Second
	lateHoldMax = 60 * time.Second
	// lateQuiet is the end of a late-write hold without cancels: the
	// steady worker's last Lock is in the queue when the hold ends.
	lateQuiet = 4 * time.Second
)

// linkLane holds the workers' links to one to three members (see
// holdTargets) for holdMin-holdMax, then restores them (what was held is
// delivered, see Link.Hold), and again 1-4 s later. The workers keep
// running and reach the other members through their links. Half of the
// holds include the leader's link (if there is a leader): the library
// sends its first attempts to the leader, so those are the holds that
// leave writes of unknown outcome behind; the workers' balanced requests
// (retries, the reaper's deletes) take any member's, so more held links
// delay more of them. Not in the guarded-etcd cell, whose resource is etcd
// itself: holding the leader's path (or several paths) there starves its
// increments below the cell's minimums. In the fenced-register cells half
// of the holds are late-write holds (see lateHold), until lateUntil, each
// followed by 3-8 s without a hold.
func (c *cell) linkLane(ctx context.Context, lateUntil time.Time) {
	for sleepCtx(ctx, c.randDur(time.Second, 4*time.Second)) {
		if c.cfg.role == roleRegister && c.randN(2) == 0 && time.Now().Before(lateUntil) {
			c.lateHold(ctx)
			// Everyone gets a stretch without the leader's link held.
			sleepCtx(ctx, c.randDur(3*time.Second, 8*time.Second))
			continue
		}
		held := c.holdTargets()
		for _, i := range held {
			c.links[i].Hold()
		}
		c.mu.Lock()
		c.n.holds++
		c.mu.Unlock()
		sleepCtx(ctx, c.randDur(holdMin, holdMax))
		for _, i := range held {
			c.links[i].Restore()
		}
	}
}

// lateHold is the late-write scenario: it holds the leader's link and one
// or two others for lateHoldMin-lateHoldMax, and until lateQuiet before
// its end, every 2-4 s, has a steady worker cancel its Lock in progress (or
// its next) 0.1-1 s later (see lockCanceler). A Lock's enqueue, sent to the
// leader or on a held path, is held: its outcome unknown, the library gives
// its key name up, and whatever the library sends to make that name safe
// again may be held too (two or three of the five paths of the workers'
// balanced requests are). The steady worker goes on locking the same names
// on the links that answer, and everything held is delivered when the hold
// ends, long after the cancel. An unguarded delete or create in that path
// (a reaper that frees a name after "enough time") shows as two holders or
// a phantom holder to the checkers.
//
// No member fault runs during the hold (it waits for the member lane's
// episode to end, and the lane waits for it): a crashed or isolated member
// drops the connections that hold the late bytes, which makes the hold a
// loss, not a late delivery, and a leader change moves the library's first
// attempts off the held link.
func (c *cell) lateHold(ctx context.Context) {
	c.members.Lock()
	defer c.members.Unlock()
	ms := c.c.Members()
	held := []int{c.randN(len(ms))}
	for j, m := range ms {
		if m == c.c.Leader() {
			held[0] = j
		}
	}
	for n := 2 + c.randN(2); len(held) < n; {
		if j := c.randN(len(ms)); !slices.Contains(held, j) {
			held = append(held, j)
		}
	}
	for _, i := range held {
		c.links[i].Hold()
	}
	c.mu.Lock()
	c.n.holds++
	c.n.lateHolds++
	c.mu.Unlock()
	start, d := time.Now(), c.randDur(lateHoldMin, lateHoldMax)
	// Cancels, each on a steady worker, leave names of unknown outcome
	// whose second chances (a reaper's pass 10 s later, in the old code)
	// fall inside the hold; and they free steady workers from Locks that
	// the held paths stall, so that the next Lock takes the lowest free
	// name, which may be one given up earlier in the hold.
	for next := c.randDur(200*time.Millisecond, 2*time.Second); next < d-lateQuiet; next += c.randDur(2*time.Second, 4*time.Second) {
		if !sleepCtx(ctx, time.Until(start.Add(next))) {
			break
		}
		c.mu.Lock()
		steady := c.steadyLocked()
		c.mu.Unlock()
		if steady != nil {
			c.sendLine(steady, "CANCEL "+c.randDur(100*time.Millisecond, time.Second).String())
		}
	}
	sleepCtx(ctx, time.Until(start.Add(d)))
	for _, i := range held {
		c.links[i].Restore()
	}
}

// steadyLocked returns a random steady worker that is running, or nil.
// c.mu is held.
func (c *cell) steadyLocked() *proc {
	var cands []*proc
	for _, p := range c.procs {
		if p.steady && !p.exited {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[c.randN(len(cands))]
}

// holdTargets picks the members whose links the next hold holds: one
// (the leader's half of the time), and in all but the guarded-etcd cell
// 0-2 more at random, so that a worker's balanced requests meet a held link
// often, while at least two members stay reachable.
func (c *cell) holdTargets() []int {
	ms := c.c.Members()
	held := []int{c.randN(len(ms))}
	if l := c.c.Leader(); l != nil && c.cfg.role != roleEtcd && c.randN(2) == 0 {
		for j, m := range ms {
			if m == l {
				held[0] = j
			}
		}
	}
	if c.cfg.role == roleEtcd {
		return held
	}
	for extra := c.randN(3); extra > 0; extra-- {
		j := c.randN(len(ms))
		for slices.Contains(held, j) {
			j = (j + 1) % len(ms)
		}
		held = append(held, j)
	}
	return held
}
