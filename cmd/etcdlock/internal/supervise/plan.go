package supervise

import "time"

// trigger is what woke the supervisor up.
type trigger int

const (
	tick     trigger = iota // the start, or the timer fired
	signaled                // a forwarded signal arrived
	lost                    // the grant was lost
	exited                  // the child exited
)

// situation is all killPlan decides on. The supervisor fills in trigger,
// now, validUntil (and cause, on a loss) and keeps the rest from the last
// plan.
type situation struct {
	trigger    trigger
	now        time.Time
	validUntil time.Time // the session's conservative estimate of the lease's end
	grace      time.Duration
	deadline   time.Time // the cap on the run time; zero for none
	stopSig    bool      // with trigger signaled: the signal was SIGTERM or SIGINT
	stoppedAt  time.Time // zero until the first SIGTERM or SIGINT was forwarded
	cause      error     // the loss cause, set with trigger lost
	lostAt     time.Time // zero until the grant is lost
	capped     bool      // the deadline passed: reported, and escalating as a loss
	termSent   bool
	killSent   bool
}

// action is one kind of step.
type action int

const (
	forward action = iota + 1 // pass the received signal on to the child's group
	report                    // tell the caller about step.event
	term                      // send SIGTERM to the child's group
	kill                      // send SIGKILL to the child's group
	finish                    // the child is gone: stop supervising
)

// step is one thing to do; event is set for report.
type step struct {
	act   action
	event Event
}

// plan is killPlan's answer: the steps, in order; the situation once they
// are done; and when to wake up for the next step (negative: only on an
// event).
type plan struct {
	steps []step
	after situation
	wake  time.Duration
}

// killPlan decides what to do about s. While the grant is held, SIGTERM is
// due at validUntil-grace and SIGKILL at validUntil. Once it is lost,
// SIGTERM is due at once and SIGKILL grace later, or at validUntil if that
// comes first. A deadline (the cap on the run time) is a loss at that time:
// SIGTERM then, SIGKILL grace later, whichever comes first. A forwarded
// SIGTERM or SIGINT is a request to stop: SIGKILL follows grace later if the
// child is still there, and at once on a second one. Each of SIGTERM and
// SIGKILL is sent once. It is pure: it reads nothing but s.
func killPlan(s situation) plan {
	p := plan{after: s, wake: -1}
	switch s.trigger {
	case exited:
		p.steps = []step{{act: finish}}
		return p
	case signaled:
		p.add(step{act: forward})
		if s.stopSig && !s.stoppedAt.IsZero() && !s.killSent {
			// A second stop: SIGKILL at once.
			p.after.killSent = true
			p.add(step{act: report, event: Event{Kind: Killing}}, step{act: kill})
		}
		if s.stopSig && s.stoppedAt.IsZero() {
			p.after.stoppedAt = s.now
			p.add(step{act: report, event: Event{Kind: Stopping}})
		}
	case lost:
		if s.lostAt.IsZero() {
			p.after.lostAt = s.now
			p.add(step{act: report, event: Event{Kind: Lost, Cause: s.cause, Terminating: s.termSent}})
		}
	}
	if !s.deadline.IsZero() && !s.capped && !s.now.Before(s.deadline) {
		p.after.capped = true
		p.add(step{act: report, event: Event{Kind: Capped, Terminating: s.termSent}})
	}
	p.escalate()
	return p
}

// escalate adds the signals that are due and sets the wake-up for the next.
func (p *plan) escalate() {
	s := &p.after
	termAt, killAt := s.dueTimes()
	if !s.termSent && !s.now.Before(termAt) {
		s.termSent = true
		if s.lostAt.IsZero() && !s.capped {
			p.add(step{act: report, event: Event{Kind: LeaseRunningOut, Left: s.validUntil.Sub(s.now)}})
		}
		p.add(step{act: term})
	}
	if !s.killSent && !s.now.Before(killAt) {
		s.killSent = true
		p.add(step{act: report, event: Event{Kind: Killing}}, step{act: kill})
	}
	if s.killSent {
		return // nothing is left to send
	}
	if !s.termSent {
		p.wake = termAt.Sub(s.now)
	}
	if d := killAt.Sub(s.now); p.wake < 0 || d < p.wake {
		p.wake = d
	}
}

// dueTimes returns when SIGTERM and SIGKILL are due in s: at validUntil-grace
// and validUntil while the grant is held; from a loss, SIGTERM at once and
// SIGKILL grace later; a stop request or a deadline brings SIGKILL (and a
// deadline SIGTERM) forward, never back.
func (s *situation) dueTimes() (termAt, killAt time.Time) {
	termAt, killAt = s.validUntil.Add(-s.grace), s.validUntil
	earlier := func(t *time.Time, than time.Time) {
		if than.Before(*t) {
			*t = than
		}
	}
	if !s.lostAt.IsZero() {
		termAt = s.lostAt
		earlier(&killAt, s.lostAt.Add(s.grace))
	}
	if !s.stoppedAt.IsZero() {
		earlier(&killAt, s.stoppedAt.Add(s.grace))
	}
	if !s.deadline.IsZero() {
		earlier(&termAt, s.deadline)
		earlier(&killAt, s.deadline.Add(s.grace))
	}
	return termAt, killAt
}

func (p *plan) add(steps ...step) { p.steps = append(p.steps, steps...) }
