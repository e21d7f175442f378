package main

import (
	"context"
	"errors"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/supervise"
)

// This file maps how a command ended, and what became of its grant, to
// etcdlock's exit (run and elect -- CMD).

// finish releases g after the command ended and returns etcdlock's exit
// (exitFor). With --once, a command that exited 0 with g held throughout has
// its run recorded first (grant.complete).
func (a *app) finish(s acquire.Session, g *grant, argv0 string, r supervise.Result) error {
	o := a.settle(s, g, r)
	if r.Err != nil {
		return exitf(exitUsage, "waiting for command %q: %v", argv0, r.Err)
	}
	if r.Leftovers > 0 {
		a.logf("the command left %s running when it exited; terminated before the release", plural(r.Leftovers, "process"))
	}
	return a.exitFor(g, argv0, r, o)
}

// outcome is what became of a grant once its command ended.
type outcome struct {
	lost     error // why g was lost while the command ran; nil if held throughout
	record   error // the --once record's failure
	released error // the release's failure
}

// settle finds out whether g was held throughout the command's run (a loss
// the grant's context or the validity clock tells, or an ErrNotHeld from the
// record or the release), records the run (--once) and releases g when it
// was.
func (a *app) settle(s acquire.Session, g *grant, r supervise.Result) (o outcome) {
	o.lost = r.LossCause
	if o.lost == nil && g.ctx.Err() != nil {
		o.lost = context.Cause(g.ctx)
	}
	if o.lost == nil && !time.Now().Before(s.ValidUntil()) {
		o.lost = errLeaseRanOut // no release: the lease may be gone, and etcd unreachable
	}
	if o.lost == nil && !r.Terminated && g.complete != nil && r.Success {
		if o.record = a.complete(s, g); errors.Is(o.record, etcdlock.ErrNotHeld) {
			o.lost, o.record = o.record, nil // lost before the record: not recorded
		}
	}
	if o.lost == nil {
		// An ErrNotHeld here: lost before the release, maybe before the
		// command ended, so its work was not certainly exclusive.
		if o.released = a.release(s, g); errors.Is(o.released, etcdlock.ErrNotHeld) {
			o.lost, o.released = o.released, nil
		}
	}
	return o
}

// exitFor maps the command's result and the grant's outcome to etcdlock's
// exit: 125 if g was lost while the command ran or etcdlock had to terminate
// the command because the lease was running out, 124 past --max-runtime,
// else the command's status.
func (a *app) exitFor(g *grant, argv0 string, r supervise.Result, o outcome) error {
	releaseWarning := func() {
		if o.released != nil {
			a.logf("warning: could not release %s %q (%s); revoking the session's lease frees it", g.what, g.name, libErr(o.released))
		}
	}
	switch {
	case o.lost != nil:
		return exitf(exitLost, "%s %q was lost while the command ran (%s); %s; exiting %d",
			g.what, g.name, lossText(o.lost), describeExit(argv0, r.How), exitLost)
	case r.Capped:
		releaseWarning()
		return exitf(exitTimeLimit, "the command ran past --max-runtime and was terminated; %s; exiting %d",
			describeExit(argv0, r.How), exitTimeLimit)
	case r.Terminated && !r.Stopped:
		return exitf(exitLost, "the session could not renew the lease of %s %q in time, so etcdlock terminated the command; %s; exiting %d",
			g.what, g.name, describeExit(argv0, r.How), exitLost)
	case o.record != nil:
		return exitf(exitUsage, "the command succeeded, but etcdlock could not record the run, so it may run again: %s", libErr(o.record))
	}
	releaseWarning()
	if r.Code != 0 {
		return exitf(r.Code, "%s", describeExit(argv0, r.How))
	}
	return nil
}
