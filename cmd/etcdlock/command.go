package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/supervise"
)

// runCommand runs argv while g is held, as the package documentation says:
// it forwards signals, terminates the command when the lease runs out or g
// is lost, and releases g when the command exits.
func (a *app) runCommand(s acquire.Session, g *grant, path string, argv []string, o *holdOpts, sigs <-chan os.Signal) error {
	grace := o.grace
	if err := a.awaitFreshLease(s, g, grace, sigs); err != nil {
		return err
	}
	// Do not start on a grant already lost either (a break, a lost session) while the
	// lease looked valid: check the grant's context last thing before the
	// start. A loss after this check ends g.ctx, which Supervise sees first
	// thing and terminates the command for.
	beforeStart(g)
	if g.ctx.Err() != nil {
		return a.lostBeforeStart(s, g)
	}
	c := &exec.Cmd{Path: path, Args: argv, Env: append(os.Environ(), g.env...), Stdout: a.stdout, Stderr: a.stderr}
	if a.stdin != nil {
		c.Stdin = a.stdin
	}
	child, err := supervise.Start(c, grace)
	if err != nil {
		_ = a.release(s, g) // closing the session revokes the lease anyway
		return startError(argv[0], err)
	}
	cfg := supervise.Config{
		Grace:      grace,
		ValidUntil: s.ValidUntil,
		Grant:      g.ctx,
		Signals:    sigs,
		Notify:     func(ev supervise.Event) { a.logEscalation(g, o, ev) },
	}
	if o.maxRuntime > 0 {
		cfg.Deadline = time.Now().Add(o.maxRuntime)
	}
	r := child.Loop(cfg)
	return a.finish(s, g, argv[0], r)
}

// awaitFreshLease keeps the command from starting on a lease that is about
// to run out: it waits for the next keepalive first. Its error is
// etcdlock's exit if g is lost or a signal comes meanwhile.
func (a *app) awaitFreshLease(s acquire.Session, g *grant, grace time.Duration, sigs <-chan os.Signal) error {
	for time.Until(s.ValidUntil()) <= grace {
		select {
		case <-g.ctx.Done():
			return a.lostBeforeStart(s, g)
		case sig := <-sigs:
			_ = a.release(s, g) // closing the session revokes the lease anyway
			return exitf(supervise.SignalCode(sig), "interrupted by %s before the command started; released %s %q",
				supervise.SignalName(sig), g.what, g.name)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// lostBeforeStart is etcdlock's exit for a grant lost before the command
// started.
func (a *app) lostBeforeStart(s acquire.Session, g *grant) error {
	_ = a.release(s, g) // ErrNotHeld, as it was lost
	return exitf(exitLost, "%s %q was lost before the command started: %s", g.what, g.name, lossText(context.Cause(g.ctx)))
}

// beforeStart is called by runCommand right before its last check of g and
// the command's start; tests set it to break the grant there.
var beforeStart = func(g *grant) {}

// logEscalation says why the command is being terminated.
func (a *app) logEscalation(g *grant, o *holdOpts, ev supervise.Event) {
	grace := o.grace
	switch {
	case ev.Kind == supervise.Stopping:
		a.logf("forwarded the signal to the command: SIGKILL in %v if it is still running (at once on a second signal)", grace)
	case ev.Kind == supervise.Capped && ev.Terminating:
		a.logf("the command ran past --max-runtime %v", o.maxRuntime)
	case ev.Kind == supervise.Capped:
		a.logf("the command ran past --max-runtime %v: sending SIGTERM to it, SIGKILL in %v", o.maxRuntime, grace)
	case ev.Kind == supervise.LeaseRunningOut:
		a.logf("the session could not renew its lease, which runs out in %v: sending SIGTERM to the command, SIGKILL when it runs out",
			ev.Left.Round(time.Millisecond))
	case ev.Kind == supervise.Killing:
		a.logf("sending SIGKILL to the command")
	case ev.Terminating:
		a.logf("%s %q lost (%s)", g.what, g.name, lossText(ev.Cause))
	case grace > 0:
		a.logf("%s %q lost (%s): sending SIGTERM to the command, SIGKILL in %v", g.what, g.name, lossText(ev.Cause), grace)
	default:
		a.logf("%s %q lost (%s): terminating the command at once (--grace 0)", g.what, g.name, lossText(ev.Cause))
	}
}

// lossTexts explain the library's loss causes, in the order they are
// tried.
var lossTexts = []struct {
	cause error
	text  string
}{
	{etcdlock.ErrLockLost, "its key was deleted by someone else, e.g. etcdlock break"},
	{etcdlock.ErrSessionClosed, "the session was closed"},
	{etcdlock.ErrSessionExpired, "the session's lease expired or was revoked"},
}

// lossText explains why a grant was lost.
func lossText(cause error) string {
	if cause == nil {
		return "unknown cause"
	}
	for _, l := range lossTexts {
		if errors.Is(cause, l.cause) {
			return l.text
		}
	}
	return libErr(cause)
}

// errLeaseRanOut is the loss cause when the session's validity clock ran
// out before the session itself noticed.
var errLeaseRanOut = errors.New("the session could not renew its lease before it ran out")

// complete records g's run (--once), bounded as a release is.
func (a *app) complete(s acquire.Session, g *grant) error { return bounded(s, g.complete) }
