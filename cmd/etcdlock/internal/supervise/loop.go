// Package supervise runs a command under a grant that can run out or be
// lost: it forwards signals to the command's process group and, when the
// session's lease runs out or the grant is lost, terminates the command's
// whole tree with SIGTERM and then SIGKILL, so the command is dead before
// the grant can pass to someone else.
//
// On Linux the tree is every process the command starts, however it
// detaches (see Start); elsewhere it is the command's process group.
//
// The decision of what to send when is killPlan, a pure function of the
// situation; Loop only feeds it events and carries out its steps.
package supervise

import (
	"context"
	"os"
	"syscall"
	"time"
)

// Config says how Loop watches a child. Loop only reads it.
type Config struct {
	// Grace is the time between SIGTERM and SIGKILL.
	Grace time.Duration
	// ValidUntil returns the session's conservative estimate of the
	// lease's end; it is called from Loop's goroutine.
	ValidUntil func() time.Time
	// Grant ends when the grant is lost; its cause is the loss cause.
	Grant context.Context
	// Signals are forwarded to the child's process group.
	Signals <-chan os.Signal
	// Notify, if not nil, is told about each escalation before it is
	// carried out, from Loop's goroutine.
	Notify func(Event)
	// Deadline, if not zero, caps the run: SIGTERM at Deadline and SIGKILL
	// Grace later (earlier if the lease or the grant ends first).
	Deadline time.Time
}

// EventKind says what an Event reports; it is a plain value, safe to copy
// and compare.
type EventKind int

const (
	// LeaseRunningOut: the session could not renew its lease, which runs
	// out in Event.Left; SIGTERM goes to the child now, SIGKILL then.
	LeaseRunningOut EventKind = iota + 1
	// Lost: the grant was lost (Event.Cause); SIGTERM goes to the child now
	// unless Event.Terminating says it already went, and SIGKILL grace
	// later.
	Lost
	// Killing: SIGKILL goes to the child now.
	Killing
	// Capped: Config.Deadline passed; SIGTERM goes to the child now unless
	// Event.Terminating says it already went, and SIGKILL grace later.
	Capped
	// Stopping: a SIGTERM or SIGINT was forwarded; SIGKILL follows grace
	// later if the child is still there (at once on a second one).
	Stopping
)

// Event is one escalation step Loop reports to Config.Notify; it is a
// plain value, safe to copy.
type Event struct {
	Kind        EventKind
	Left        time.Duration // LeaseRunningOut: time until ValidUntil
	Cause       error         // Lost: the grant's loss cause
	Terminating bool          // Lost, Capped: SIGTERM was already sent
}

// Result is how a supervised child ended; it is a plain value, safe to
// copy.
type Result struct {
	// Err is set when the command's wait failed; then Code, How and
	// Success are not.
	Err error
	// Code is the exit code to pass on: the command's exit status, or
	// 128+N when it died of signal N.
	Code int
	// How says how the command ended, in words: "exited with status 3",
	// "was killed by SIGKILL".
	How string
	// Success says the command exited with status 0.
	Success bool
	// Leftovers is how many processes of the command's tree were still
	// running when it exited, and were terminated (Linux only).
	Leftovers int
	// LossCause is the grant's loss cause if it was lost while the child
	// ran, else nil.
	LossCause error
	// Terminated says Loop sent SIGTERM or SIGKILL.
	Terminated bool
	// Capped says Config.Deadline passed while the child ran.
	Capped bool
	// Stopped says a SIGTERM or SIGINT was forwarded to the child (any
	// SIGKILL that followed was for it, unless Capped or lost).
	Stopped bool
}

// Loop waits for the child to exit and returns how it ended. Meanwhile
// it forwards cfg.Signals to the child's group and escalates: while the
// grant is held, SIGTERM at ValidUntil-Grace and SIGKILL at ValidUntil;
// once it is lost, SIGTERM at once and SIGKILL Grace later (or at
// ValidUntil, if that comes first); at cfg.Deadline, as for a loss. It always succeeds: the child's own
// failure is in Result.Err. It must be called at most once per Child.
func (c *Child) Loop(cfg Config) Result {
	lostCh := cfg.Grant.Done()
	s := situation{trigger: tick, grace: cfg.Grace, deadline: cfg.Deadline}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		ex  exitState
		sig os.Signal
	)
	for {
		s.now, s.validUntil = time.Now(), cfg.ValidUntil()
		p := killPlan(s)
		s = p.after
		if c.carryOut(p.steps, sig, cfg.Notify) {
			return Result{Err: ex.err, Code: ex.code, How: ex.how, Success: ex.success, Leftovers: ex.leftovers,
				LossCause: s.cause, Terminated: s.termSent || s.killSent, Capped: s.capped,
				Stopped: !s.stoppedAt.IsZero()}
		}
		if p.wake >= 0 {
			timer.Reset(p.wake)
		} else {
			timer.Stop()
		}
		select {
		case ex = <-c.done:
			s.trigger = exited
		case sig = <-cfg.Signals:
			s.trigger = signaled
			s.stopSig = sig == syscall.SIGTERM || sig == os.Interrupt
		case <-lostCh:
			lostCh = nil
			s.trigger, s.cause = lost, context.Cause(cfg.Grant)
		case <-timer.C:
			s.trigger = tick
		}
	}
}

// carryOut does steps, with sig the signal to forward, and reports whether
// one of them was finish. Failures to signal are not errors here: they mean
// the group is gone, and the child's exit is on its way to Loop.
func (c *Child) carryOut(steps []step, sig os.Signal, notify func(Event)) (finished bool) {
	for _, st := range steps {
		switch st.act {
		case forward:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = c.Signal(ss) // the group may be gone: see above
			}
		case report:
			if notify != nil {
				notify(st.event)
			}
		case term:
			_ = c.SignalTree(syscall.SIGTERM) // the tree may be gone: see above
		case kill:
			_ = c.SignalTree(syscall.SIGKILL) // the tree may be gone: see above
		case finish:
			return true
		}
	}
	return false
}
