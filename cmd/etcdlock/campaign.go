package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
)

// electPrint is elect without a command: campaign, print every leadership
// change, resign when interrupted.
func (a *app) electPrint(o *holdOpts, name, value, output string) error {
	return a.withSession(o, quietOnSignal, func(h *held) error {
		h.sc.stop()
		if err := a.precheckHeld(context.Background(), h, name); err != nil {
			return err
		}
		e, infos, stopObserve, err := a.watch(h.s, name)
		if err != nil {
			return err
		}
		defer stopObserve()
		c := a.campaign(h.s, e, name, value, output)
		defer c.stop()
		if o.waitSet {
			t := time.NewTimer(max(0, time.Until(h.until)))
			defer t.Stop()
			c.timeout = t.C
		}
		return c.loop(infos, h.sigs, o.wait)
	})
}

// campaignResult is what Campaign returned.
type campaignResult struct {
	l   *etcdlock.Leadership
	err error
}

// campaigner is the state of electPrint's campaign, owned by the goroutine
// that runs its loop.
type campaigner struct {
	a       *app
	s       acquire.Session
	name    string
	output  string
	stop    context.CancelFunc   // ends the campaign
	won     chan campaignResult  // nil once Campaign's result is in
	lead    *etcdlock.Leadership // set once leading
	lost    <-chan struct{}      // closed when leadership is lost
	timeout <-chan time.Time     // --wait, until leading
}

// campaign starts campaigning for e with value.
func (a *app) campaign(s acquire.Session, e *etcdlock.Election, name, value, output string) *campaigner {
	ctx, stop := context.WithCancel(context.Background())
	c := &campaigner{a: a, s: s, name: name, output: output, stop: stop, won: make(chan campaignResult, 1)}
	won := c.won // the loop sets c.won to nil only after this send
	go func() {
		l, err := e.Campaign(ctx, value)
		won <- campaignResult{l, err}
	}()
	return c
}

// loop prints leadership changes until a signal (then it resigns and
// returns nil), a loss, or a failure.
func (c *campaigner) loop(infos <-chan etcdlock.LeaderInfo, sigs <-chan os.Signal, wait time.Duration) error {
	for {
		select {
		case info, ok := <-infos:
			if !ok {
				c.resign()
				return errObserveEnded(c.name)
			}
			c.a.printLeader(info, c.self(info), c.output)
		case r := <-c.won:
			c.won = nil
			if r.err != nil {
				return exitf(exitUsage, "%s", libErr(r.err))
			}
			c.leading(r.l)
		case <-c.lost:
			return exitf(exitLost, "leadership %q was lost: %s", c.name, lossText(context.Cause(c.lead.Context())))
		case <-c.timeout:
			c.stop()
			r := <-c.won // a Campaign that won before it was canceled still leads
			c.won = nil
			if r.err != nil {
				return exitf(exitWaitTimeout, "timed out after %v (--wait) waiting for leadership %q", wait, c.name)
			}
			c.leading(r.l)
		case sig := <-sigs:
			if c.resign() {
				c.a.logf("resigned leadership %q (%s)", c.name, sig)
			} else {
				c.a.logf("left the election %q without leading (%s)", c.name, sig)
			}
			return nil
		}
	}
}

// self reports whether info is this process's term: by its session's
// lease; on a *shard.Session (a lease per cluster, none of its own) by its
// leadership's key once Campaign returned, by its identity before.
func (c *campaigner) self(info etcdlock.LeaderInfo) bool {
	switch {
	case info.Key == "":
		return false
	case acquire.Lease(c.s) != 0:
		return info.Lease == acquire.Lease(c.s)
	case c.lead != nil:
		return info.Key == c.lead.Key()
	}
	return info.Identity == c.s.Identity()
}

// leading records that l leads: from now on, its loss ends the loop, and
// --wait no longer applies.
func (c *campaigner) leading(l *etcdlock.Leadership) {
	c.lead, c.lost, c.timeout = l, l.Context().Done(), nil
}

// resign ends the campaign and resigns if it led, which it reports; a
// failure to resign is only a warning, as closing the session deletes the
// key anyway.
func (c *campaigner) resign() (led bool) {
	c.stop()
	if c.won != nil {
		if r := <-c.won; r.err == nil {
			c.lead = r.l
		}
	}
	if c.lead == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.s.TTL(), maxRelease))
	defer cancel()
	if err := c.lead.Resign(ctx); err != nil && !errors.Is(err, etcdlock.ErrNotHeld) {
		c.a.logf("warning: resign: %s", libErr(err))
	}
	return true
}
