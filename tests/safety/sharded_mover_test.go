//go:build linux

package safety

// The mover nemesis of the sharded cell: it moves the names' slots back and
// forth between the clusters (sometimes with ForceAfter), resumes a move
// beside a call still running it, stalls a mover at a phase and wakes it
// late after other moves of its slot, aborts moves (beside a running call,
// or after the call gave up at a phase), and raises generations (refused
// during a move from the cluster). Every action is counted by its outcome.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
)

// moverKinds are the nemesis's actions; the cell runs until it has done
// each once.
func moverKinds() []string { return []string{"stall", "abort", "resume", "force", "raise", "move"} }

// moverLane runs plan, then actions of random kinds, one at a time.
func (sc *shardCell) moverLane(ctx context.Context, plan []string) {
	kinds := moverKinds()
	for sleepCtx(ctx, sc.randDur(300*time.Millisecond, 1500*time.Millisecond)) {
		kind := kinds[sc.randN(len(kinds))]
		if len(plan) > 0 {
			kind = plan[0]
		}
		name := shardNames[sc.randN(len(shardNames))]
		sc.settle(shard.SlotOf(name), 30*time.Second)
		switch kind {
		case "move", "force":
			sc.moveOnce(name, kind)
		case "resume":
			sc.resumeBeside(name)
		case "stall":
			sc.stall(name)
		case "abort":
			sc.abortBeside(name)
		case "raise":
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := sc.admin.RaiseGeneration(ctx, sc.ids[sc.randN(len(sc.ids))])
			cancel()
			sc.record("raise", err)
		}
		if len(plan) > 0 {
			plan = plan[1:]
			sc.mu.Lock()
			sc.planLeft = len(plan)
			sc.mu.Unlock()
		}
	}
}

// record counts an action's outcome.
func (sc *shardCell) record(action string, err error) {
	outcome := "error"
	switch {
	case err == nil:
		outcome = "ok"
	case errors.Is(err, shard.ErrMoveInProgress):
		outcome = "in-progress"
	case errors.Is(err, shard.ErrMoveAborted):
		outcome = "aborted"
	case errors.Is(err, etcdlock.ErrInvalidArgument):
		outcome = "invalid"
	case errors.Is(err, shard.ErrUnavailable):
		outcome = "unavailable"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		outcome = "ctx"
	default:
		sc.t.Logf("mover: %s: %v", action, err)
	}
	sc.mu.Lock()
	sc.n.moves[action+" "+outcome]++
	sc.mu.Unlock()
}

// progress counts the phases a mover reports, then calls f (if any).
func (sc *shardCell) progress(f func(shard.MoveProgress)) func(shard.MoveProgress) {
	return func(p shard.MoveProgress) {
		sc.mu.Lock()
		sc.n.phases[p.Phase]++
		sc.mu.Unlock()
		if f != nil {
			f(p)
		}
	}
}

// route returns name's slot, the cluster that owns it now and the other.
func (sc *shardCell) route(name string) (slot int, from, to string) {
	from, _ = sc.admin.ClusterOf(name)
	to = sc.ids[0]
	if from == to {
		to = sc.ids[1]
	}
	return shard.SlotOf(name), from, to
}

// moveOnce moves name's slot to the other cluster; "force" with a
// ForceAfter of 0.1-1 s.
func (sc *shardCell) moveOnce(name, kind string) {
	slot, _, to := sc.route(name)
	o := shard.MoveOptions{Progress: sc.progress(nil)}
	if kind == "force" {
		o.ForceAfter = sc.randDur(100*time.Millisecond, time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := sc.admin.MoveSlot(ctx, slot, to, o)
	sc.record(kind, err)
	if err == nil {
		sc.awaitOwner(name, to)
	}
}

// resumeBeside starts a move of name's slot and, once it reached a phase,
// runs a second call with Resume beside it.
func (sc *shardCell) resumeBeside(name string) {
	slot, _, to := sc.route(name)
	phases := []string{"started", "prepared", "frozen", "draining"}
	phase := phases[sc.randN(len(phases))]
	reached := make(chan struct{})
	var once sync.Once
	o := shard.MoveOptions{Progress: sc.progress(func(p shard.MoveProgress) {
		if p.Phase == phase {
			once.Do(func() { close(reached) })
		}
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sc.admin.MoveSlot(ctx, slot, to, o) }()
	select {
	case <-reached:
	case err := <-done:
		done <- err
	}
	err := sc.admin.MoveSlot(ctx, slot, to, shard.MoveOptions{Resume: true, Progress: sc.progress(nil)})
	sc.record("resume beside", err)
	sc.record("resume first", <-done)
	sc.awaitOwner(name, to)
}

// stall starts a move of name's slot whose Progress blocks at a random
// phase; meanwhile the move is aborted (or, past its drain, resumed by
// another call) and the slot moved twice more; then the stalled call is
// woken.
func (sc *shardCell) stall(name string) {
	slot, _, to := sc.route(name)
	// Phases every move reports ("draining" only when keys are left).
	phases := []string{"prepared", "frozen", "drained", "raised", "activated"}
	phase := phases[sc.randN(len(phases))]
	reached, wake := make(chan struct{}), make(chan struct{})
	var once sync.Once
	o := shard.MoveOptions{Progress: sc.progress(func(p shard.MoveProgress) {
		if p.Phase == phase {
			once.Do(func() { close(reached); <-wake })
		}
	})}
	if sc.randN(2) == 0 {
		o.ForceAfter = sc.randDur(200*time.Millisecond, 2*time.Second)
	}
	mctx, mcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer mcancel()
	done := make(chan error, 1)
	go func() { done <- sc.admin.MoveSlot(mctx, slot, to, o) }()
	select {
	case <-reached:
	case err := <-done:
		sc.record("stall not reached", err)
		return
	}
	sc.mu.Lock()
	sc.n.moves["stalled at "+phase]++
	sc.mu.Unlock()
	sc.whileStalled(name, to)
	close(wake)
	sc.record("stalled woken", <-done)
}

// whileStalled undoes or finishes the stalled move of name's slot to to,
// then moves the slot twice.
func (sc *shardCell) whileStalled(name, to string) {
	slot := shard.SlotOf(name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := sc.admin.AbortMove(ctx, slot)
	sc.record("abort stalled", err)
	if errors.Is(err, shard.ErrMoveInProgress) {
		err = sc.admin.MoveSlot(ctx, slot, to, shard.MoveOptions{Resume: true, ForceAfter: time.Second, Progress: sc.progress(nil)})
		sc.record("resume stalled", err)
		if err == nil {
			sc.awaitOwner(name, to)
		}
	}
	for i := 0; i < 2; i++ {
		_, _, other := sc.route(name)
		err := sc.admin.MoveSlot(ctx, slot, other, shard.MoveOptions{ForceAfter: sc.randDur(200*time.Millisecond, 2*time.Second),
			Progress: sc.progress(nil)})
		sc.record("move while stalled", err)
		if err == nil {
			sc.awaitOwner(name, other)
		}
	}
}

// abortBeside starts a move of name's slot and, at its freeze or drain,
// aborts it beside the running call, or after the call gave up there (its
// ctx canceled: then a raise of the source, before the abort, must be
// refused).
func (sc *shardCell) abortBeside(name string) {
	slot, from, to := sc.route(name)
	phase := []string{"frozen", "draining"}[sc.randN(2)]
	giveUp := sc.randN(2) == 0
	mctx, mcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer mcancel()
	reached := make(chan struct{})
	var once sync.Once
	o := shard.MoveOptions{Progress: sc.progress(func(p shard.MoveProgress) {
		if p.Phase == phase {
			once.Do(func() {
				if giveUp {
					mcancel()
				}
				close(reached)
			})
		}
	})}
	done := make(chan error, 1)
	go func() { done <- sc.admin.MoveSlot(mctx, slot, to, o) }()
	select {
	case <-reached:
	case err := <-done:
		sc.record("abort: move ended first", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if giveUp {
		_, err := sc.admin.RaiseGeneration(ctx, from)
		sc.record("raise during move", err)
		if err == nil {
			sc.errorf("RaiseGeneration(%s) succeeded while a move of slot %d from it was recorded and frozen", from, slot)
		}
	}
	sc.record("abort", sc.admin.AbortMove(ctx, slot))
	sc.record("aborted mover", <-done)
}

// awaitOwner waits until the nemesis's Shards routes name to id (its map
// watch follows the root: there is no event to wait for from here).
func (sc *shardCell) awaitOwner(name, id string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got, _ := sc.admin.ClusterOf(name); got == id {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle finishes (Resume) or undoes (AbortMove) a move of slot that is
// still recorded, as read from the root, until none is; it reports whether
// it got there within d.
func (sc *shardCell) settle(slot int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		to, recorded, err := sc.recordedMove(ctx, slot)
		if err == nil && !recorded {
			cancel()
			return true
		}
		if err == nil {
			err = sc.admin.MoveSlot(ctx, slot, to, shard.MoveOptions{Resume: true, ForceAfter: time.Second, Progress: sc.progress(nil)})
			sc.record("settle resume", err)
			if err != nil {
				sc.record("settle abort", sc.admin.AbortMove(ctx, slot))
			}
		}
		cancel()
		sleepCtx(context.Background(), 200*time.Millisecond) // a retry's backoff
	}
	return false
}

// recordedMove reads the root's record of a move of slot (the layout is
// DESIGN.md's: etcdlock-shards/moves/<slot>, JSON with "to").
func (sc *shardCell) recordedMove(ctx context.Context, slot int) (to string, ok bool, err error) {
	resp, err := sc.clis[sc.ids[0]].Get(ctx, fmt.Sprintf("etcdlock-shards/moves/%04d", slot))
	if err != nil || len(resp.Kvs) == 0 {
		return "", false, err
	}
	var rec struct {
		To string `json:"to"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return "", false, err
	}
	return rec.To, true, nil
}
