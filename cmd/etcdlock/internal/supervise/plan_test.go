package supervise

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// Fixtures of the killPlan cases.
var (
	t0        = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec       = time.Second
	errBroken = errors.New("key deleted")
	killEv    = step{act: report, event: Event{Kind: Killing}}
)

func lostEv(terminating bool) step {
	return step{act: report, event: Event{Kind: Lost, Cause: errBroken, Terminating: terminating}}
}

func capEv(terminating bool) step {
	return step{act: report, event: Event{Kind: Capped, Terminating: terminating}}
}

func leaseEv(left time.Duration) step {
	return step{act: report, event: Event{Kind: LeaseRunningOut, Left: left}}
}

// killPlanCases are situations and what killPlan must make of them.
var killPlanCases = []struct {
	name   string
	in     situation
	steps  []step
	wake   time.Duration
	term   bool // termSent after the plan
	kill   bool // killSent after the plan
	capped bool // capped after the plan
}{
	{
		name: "held, lease fresh: sleep until SIGTERM is due",
		in:   situation{trigger: tick, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec},
		wake: 7 * sec,
	},
	{
		name:  "held, grace reached: SIGTERM, wake for SIGKILL at the lease's end",
		in:    situation{trigger: tick, now: t0, validUntil: t0.Add(2 * sec), grace: 3 * sec},
		steps: []step{leaseEv(2 * sec), {act: term}},
		wake:  2 * sec, term: true,
	},
	{
		name:  "held, lease ran out after SIGTERM: SIGKILL, nothing left to wait for",
		in:    situation{trigger: tick, now: t0, validUntil: t0, grace: 3 * sec, termSent: true},
		steps: []step{killEv, {act: kill}},
		wake:  -1, term: true, kill: true,
	},
	{
		name:  "held, lease ran out unseen: SIGTERM and SIGKILL at once",
		in:    situation{trigger: tick, now: t0, validUntil: t0.Add(-sec), grace: 3 * sec},
		steps: []step{leaseEv(-sec), {act: term}, killEv, {act: kill}},
		wake:  -1, term: true, kill: true,
	},
	{
		name: "grace 0: SIGTERM and SIGKILL both at the lease's end",
		in:   situation{trigger: tick, now: t0, validUntil: t0.Add(sec)},
		wake: sec,
	},
	{
		name:  "signal received: forwarded, then sleep on",
		in:    situation{trigger: signaled, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec},
		steps: []step{{act: forward}},
		wake:  7 * sec,
	},
	{
		name:  "signal received while the lease runs out: forwarded first",
		in:    situation{trigger: signaled, now: t0, validUntil: t0.Add(sec), grace: 3 * sec},
		steps: []step{{act: forward}, leaseEv(sec), {act: term}},
		wake:  sec, term: true,
	},
	{
		name:  "lost: report, SIGTERM at once, SIGKILL grace later",
		in:    situation{trigger: lost, cause: errBroken, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec},
		steps: []step{lostEv(false), {act: term}},
		wake:  3 * sec, term: true,
	},
	{
		name:  "lost with the lease ending before the grace: SIGKILL at the lease's end",
		in:    situation{trigger: lost, cause: errBroken, now: t0, validUntil: t0.Add(sec), grace: 3 * sec},
		steps: []step{lostEv(false), {act: term}},
		wake:  sec, term: true,
	},
	{
		name:  "lost with grace 0: SIGTERM and SIGKILL at once",
		in:    situation{trigger: lost, cause: errBroken, now: t0, validUntil: t0.Add(10 * sec)},
		steps: []step{lostEv(false), {act: term}, killEv, {act: kill}},
		wake:  -1, term: true, kill: true,
	},
	{
		name:  "lost after SIGTERM for the lease: report only, SIGKILL as before",
		in:    situation{trigger: lost, cause: errBroken, now: t0, validUntil: t0.Add(2 * sec), grace: 3 * sec, termSent: true},
		steps: []step{lostEv(true)},
		wake:  2 * sec, term: true,
	},
	{
		name: "grace elapsed after a loss: SIGKILL",
		in: situation{trigger: tick, cause: errBroken, now: t0.Add(3 * sec), validUntil: t0.Add(10 * sec), grace: 3 * sec,
			lostAt: t0, termSent: true},
		steps: []step{killEv, {act: kill}},
		wake:  -1, term: true, kill: true,
	},
	{
		name: "a second loss is no news",
		in: situation{trigger: lost, cause: errBroken, now: t0.Add(sec), validUntil: t0.Add(10 * sec), grace: 3 * sec,
			lostAt: t0, termSent: true},
		wake: 2 * sec, term: true,
	},
	{
		name: "everything sent: wait for the exit only",
		in: situation{trigger: tick, now: t0, validUntil: t0.Add(-sec), grace: 3 * sec,
			lostAt: t0.Add(-2 * sec), termSent: true, killSent: true},
		wake: -1, term: true, kill: true,
	},
	{
		name: "deadline ahead of the lease: sleep until it",
		in:   situation{trigger: tick, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec, deadline: t0.Add(2 * sec)},
		wake: 2 * sec,
	},
	{
		name:  "deadline reached: report, SIGTERM, SIGKILL grace later",
		in:    situation{trigger: tick, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec, deadline: t0},
		steps: []step{capEv(false), {act: term}},
		wake:  3 * sec, term: true, capped: true,
	},
	{
		name: "deadline's grace elapsed: SIGKILL",
		in: situation{trigger: tick, now: t0.Add(3 * sec), validUntil: t0.Add(10 * sec), grace: 3 * sec, deadline: t0,
			capped: true, termSent: true},
		steps: []step{killEv, {act: kill}},
		wake:  -1, term: true, kill: true, capped: true,
	},
	{
		name:  "deadline with the lease ending first: SIGKILL at the lease's end",
		in:    situation{trigger: tick, now: t0, validUntil: t0.Add(sec), grace: 3 * sec, deadline: t0},
		steps: []step{capEv(false), {act: term}},
		wake:  sec, term: true, capped: true,
	},
	{
		name:  "deadline after SIGTERM for the lease: report only",
		in:    situation{trigger: tick, now: t0, validUntil: t0.Add(2 * sec), grace: 3 * sec, deadline: t0, termSent: true},
		steps: []step{capEv(true)},
		wake:  2 * sec, term: true, capped: true,
	},
	{
		name:  "SIGTERM forwarded: a stop, SIGKILL grace later",
		in:    situation{trigger: signaled, stopSig: true, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec},
		steps: []step{{act: forward}, {act: report, event: Event{Kind: Stopping}}},
		wake:  3 * sec,
	},
	{
		name:  "grace after a stop: SIGKILL",
		in:    situation{trigger: tick, now: t0.Add(3 * sec), validUntil: t0.Add(10 * sec), grace: 3 * sec, stoppedAt: t0},
		steps: []step{killEv, {act: kill}},
		wake:  -1, kill: true,
	},
	{
		name:  "a second stop: SIGKILL at once",
		in:    situation{trigger: signaled, stopSig: true, now: t0.Add(sec), validUntil: t0.Add(10 * sec), grace: 3 * sec, stoppedAt: t0},
		steps: []step{{act: forward}, killEv, {act: kill}},
		wake:  -1, kill: true,
	},
	{
		name:  "SIGHUP forwarded: nothing more",
		in:    situation{trigger: signaled, now: t0, validUntil: t0.Add(10 * sec), grace: 3 * sec},
		steps: []step{{act: forward}},
		wake:  7 * sec,
	},
	{
		name:  "child exited: finish, whatever else is due",
		in:    situation{trigger: exited, now: t0, validUntil: t0.Add(-sec), grace: 3 * sec},
		steps: []step{{act: finish}},
		wake:  -1,
	},
}

func TestKillPlan(t *testing.T) {
	for _, tc := range killPlanCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := killPlan(tc.in)
			if !reflect.DeepEqual(p.steps, tc.steps) {
				t.Errorf("steps:\n got %+v\nwant %+v", p.steps, tc.steps)
			}
			if p.wake != tc.wake {
				t.Errorf("wake %v, want %v", p.wake, tc.wake)
			}
			if p.after.termSent != tc.term || p.after.killSent != tc.kill || p.after.capped != tc.capped {
				t.Errorf("after: termSent %v killSent %v capped %v, want %v %v %v",
					p.after.termSent, p.after.killSent, p.after.capped, tc.term, tc.kill, tc.capped)
			}
		})
	}
}

func TestKillPlanRecordsTheLoss(t *testing.T) {
	p := killPlan(situation{trigger: lost, now: t0, validUntil: t0.Add(time.Minute), grace: time.Second})
	if !p.after.lostAt.Equal(t0) {
		t.Errorf("lostAt %v, want %v", p.after.lostAt, t0)
	}
	// The next tick, before the grace is over, sends nothing more.
	next := p.after
	next.trigger, next.now = tick, t0.Add(time.Second/2)
	if q := killPlan(next); len(q.steps) != 0 || q.wake != time.Second/2 {
		t.Errorf("tick within the grace: steps %+v wake %v", q.steps, q.wake)
	}
}
