package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxRelease bounds a release or a resign.
const maxRelease = 5 * time.Second

// grant is a held lock or leadership, as the supervisor sees it.
type grant struct {
	what    string // "lock", "locks" (run --names) or "leadership"
	name    string
	key     string
	token   etcdlock.Token
	ctx     context.Context // canceled on loss (and release)
	release func(context.Context) error
	// complete, when set (--once), records the run before the release once
	// the command exited 0 with the grant held throughout.
	complete func(context.Context) error
	env      []string // more variables for the command
}

// held is what withSession hands its body.
type held struct {
	cli  *clientv3.Client
	r    *shard.Shards   // the deployment whose root cli reaches; nil on a plain cluster
	s    acquire.Session // a *shard.Session when r is set
	sc   *signalCatcher  // still catching: a signal cancels sc.ctx until sc.stop
	sigs <-chan os.Signal
	// until is when --wait runs out, counted from etcdlock's start (zero
	// without a positive --wait): reaching etcd is part of the wait.
	until time.Time
}

// withSession is the frame of run, elect and observe: it catches signals,
// connects, opens a session with o and runs body; it closes the session
// (deleting its keys and revoking its lease) and the client after body. A
// signal that interrupts the connection or the session's opening ends it
// with on's error. With a positive --wait, an etcd that cannot be reached
// or has no leader is waited for (see reachEtcd).
func (a *app) withSession(o *holdOpts, on onSignal, body func(h *held) error) error {
	sigs, stopNotify := notifySignals()
	defer stopNotify()
	sc := catchSignals(sigs)
	defer sc.stop()
	h := &held{sc: sc, sigs: sigs}
	if o.waitSet && o.wait > 0 {
		h.until = time.Now().Add(o.wait)
	}
	cli, r, s, err := a.reachEtcd(sc.ctx, o, h.until)
	if err != nil {
		return sc.failure(err, "connecting to etcd", on)
	}
	defer cli.Close()
	if r != nil {
		defer r.Close() // after the session: its cluster sessions are on r's clients
	}
	h.cli, h.r, h.s = cli, r, s
	defer func() { a.closeSession(h.s) }() // the last session: requeue may replace it
	return body(h)
}

// clientOf returns the client of the cluster name lives on: h.cli, or in a
// sharded deployment that of the cluster its slot is on now.
func (h *held) clientOf(ctx context.Context, name string) (*clientv3.Client, error) {
	if h.r == nil {
		return h.cli, nil
	}
	id, err := h.r.ClusterOf(name)
	if err != nil {
		return nil, err
	}
	return h.r.Client(ctx, id)
}

// etcdBackoff bounds the pause between reachEtcd's attempts.
const (
	etcdBackoffFloor = 250 * time.Millisecond
	etcdBackoffCeil  = 5 * time.Second
)

// reachEtcd connects, finds how names are taken (routing: r is set at the
// root of a sharded deployment) and opens the session. Until until (zero: not at all)
// it waits out an etcd that is unavailable (see unavailable: no member
// accepts a connection or answers in time, or those that answer have no
// leader), retrying with backoff and saying once on stderr what it waits
// for (again when that changes); when until passes it fails with exit 124,
// as a --wait that runs out in the queue does. Any other failure (an
// unknown host, TLS, credentials, a server that is not etcd) ends it at
// once, as does ctx (a signal).
func (a *app) reachEtcd(ctx context.Context, o *holdOpts, until time.Time) (*clientv3.Client, *shard.Shards, acquire.Session, error) {
	said := ""
	pause := etcdBackoffFloor
	for {
		cli, r, s, err := a.reachOnce(ctx, o)
		if err == nil {
			return cli, r, s, nil
		}
		var u *unavailable
		if until.IsZero() || !errors.As(err, &u) || ctx.Err() != nil {
			return nil, nil, nil, err
		}
		left := time.Until(until)
		if left <= 0 {
			return nil, nil, nil, exitf(exitWaitTimeout, "timed out after %v (--wait) waiting for etcd: %s", o.wait, u.reason)
		}
		if u.reason != said {
			a.logf("%s; waiting for it (--wait %v, %v left)", u.reason, o.wait, left.Round(time.Second))
			said = u.reason
		}
		t := time.NewTimer(min(jitter(pause), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, nil, context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, etcdBackoffCeil)
	}
}

// reachOnce is one attempt of reachEtcd; on an error nothing is left open.
func (a *app) reachOnce(ctx context.Context, o *holdOpts) (*clientv3.Client, *shard.Shards, acquire.Session, error) {
	cli, err := a.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := a.routing(ctx, cli, "this command")
	if err == nil {
		var s acquire.Session
		if s, err = a.openSession(ctx, cli, r, o); err == nil {
			return cli, r, s, nil
		}
		if r != nil {
			_ = r.Close()
		}
	}
	_ = cli.Close()
	return nil, nil, nil, err
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2) }

// openSession opens the session of run, elect and observe: on cli's
// cluster, or with r a sharded session over r's clusters (it opens a lease
// on a cluster at its first acquisition there); the grant is bounded by
// --command-timeout.
func (a *app) openSession(ctx context.Context, cli *clientv3.Client, r *shard.Shards, o *holdOpts) (acquire.Session, error) {
	opts := []etcdlock.SessionOption{etcdlock.WithTTL(o.ttl), etcdlock.WithRenewEvery(o.ttl / renewDivisor),
		etcdlock.WithLogger(a.logger())}
	if o.identity != "" {
		opts = append(opts, etcdlock.WithIdentity(o.identity))
	}
	if o.lockDelay > 0 {
		opts = append(opts, etcdlock.WithLockDelay(o.lockDelay))
	}
	var ms *metricsServer
	if o.metricsAddr != "" {
		var err error
		if ms, err = a.listenMetrics(o.metricsAddr); err != nil {
			return nil, err
		}
		opts = append(opts, etcdlock.WithObserver(ms.metrics))
	}
	gctx, cancel := context.WithTimeout(ctx, a.conn.commandTimeout)
	defer cancel()
	var s acquire.Session
	var err error
	if r != nil {
		var ss *shard.Session
		if ss, err = shard.NewSession(gctx, r, opts...); err == nil {
			s = ss
		}
	} else {
		var ps *etcdlock.Session
		if ps, err = etcdlock.NewSession(gctx, cli, opts...); err == nil {
			s = acquire.Plain(ps)
		}
	}
	if err != nil {
		if ms != nil {
			ms.stop()
		}
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		if isTimeout(err) && errors.Is(probe(ctx, cli, cli.Endpoints(), a.conn.dialTimeout), errNoLeader) {
			err = errNoLeader // the grant waited for a leader that never came
		}
		return nil, a.conn.unavailable(err, exitf(exitUsage, "cannot open a session: %s", libErr(err)))
	}
	if ms != nil {
		ms.serve(s, a.logf)
		a.stopMetrics = ms.stop
	}
	if s.TTL() > o.ttl {
		a.logf("warning: etcd granted a TTL of %v, more than --ttl %v (its minimum): a dead holder's lock is free only after %v", s.TTL(), o.ttl, s.TTL())
	}
	return s, nil
}

// closeSession closes s (revoking its lease, which deletes every key it
// still has) and says so if that failed; a nil s (requeue found none yet)
// is nothing to close.
func (a *app) closeSession(s acquire.Session) {
	if s == nil {
		return
	}
	if err := s.Close(); err != nil {
		lease := fmt.Sprintf("lease %x", int64(acquire.Lease(s)))
		if _, plain := acquire.Unwrap(s); !plain {
			lease = "leases (one per cluster it used)"
		}
		a.logf("warning: could not revoke the session's %s (its keys expire within %v): %s", lease, s.TTL(), libErr(err))
	}
	if a.stopMetrics != nil {
		a.stopMetrics()
		a.stopMetrics = nil
	}
}

// taker takes the grant of run or elect with h's session within ctx; with
// try (run only), only if it is free, at once (ErrLocked otherwise, nothing
// written).
type taker func(ctx context.Context, h *held, try bool) (*grant, error)

// freeGrant bounds the first look of a --wait shorter than it: a free lock
// is granted in one round trip, however short --wait is.
const freeGrant = 5 * time.Second

// errWaitTimeout is the cause of a wait ended by --wait.
var errWaitTimeout = errors.New("--wait ran out")

// holdAndRun connects, opens a session, takes a grant with take (bounded by
// --wait), runs argv under it and returns etcdlock's exit.
func (a *app) holdAndRun(o *holdOpts, what string, names []string, path string, argv []string, take taker) error {
	name := strings.Join(names, ",")
	return a.withSession(o, interruptedWhile, func(h *held) error {
		for _, n := range names {
			if err := a.precheckHeld(h.sc.ctx, h, n); err != nil {
				return h.sc.failure(err, fmt.Sprintf("checking access to %q", n), interruptedWhile)
			}
		}
		g, timedOut, err := a.waitFor(h, o, what != "leadership", take)
		if sig := h.sc.signal(); sig != nil {
			if g != nil {
				_ = a.release(h.s, g) // closing the session revokes the lease anyway
			}
			return interruptedWhile(sig, fmt.Sprintf("waiting for %s %q", what, name))
		}
		if errors.Is(err, errOnceDone) {
			a.logf("%s: not running the command", err)
			return nil
		}
		if err != nil {
			return waitError(o, what, name, timedOut, err)
		}
		if argv == nil {
			return a.holdUntilSignal(h, g)
		}
		g.env = append(g.env, "ETCDLOCK_NAME="+name, "ETCDLOCK_KEY="+g.key, "ETCDLOCK_TOKEN="+g.token.String())
		return a.runCommand(h.s, g, path, argv, o, h.sigs)
	})
}

// holdUntilSignal is run without a command: it prints g and holds it until
// a signal (SIGINT, SIGTERM, SIGHUP when the terminal goes, SIGQUIT: then
// it releases g and returns nil) or g's loss (exit 125).
func (a *app) holdUntilSignal(h *held, g *grant) error {
	fmt.Fprintf(a.stdout, "holding %q: token %s, key %s (Ctrl-C releases it)\n", g.name, g.token, g.key)
	select {
	case sig := <-h.sigs:
		if err := a.release(h.s, g); err != nil {
			return exitf(exitLost, "%s %q was lost before the release: %s", g.what, g.name, libErr(err))
		}
		a.logf("released %s %q (%s)", g.what, g.name, sig)
		return nil
	case <-g.ctx.Done():
		return exitf(exitLost, "lost %s %q: %s", g.what, g.name, libErr(context.Cause(g.ctx)))
	}
}

// waitFor takes the grant, bounded by --wait; timedOut says --wait ran out.
// With canTry (run), a lock that is free is granted even when --wait is
// shorter than the round trip: a positive --wait first tries (bounded by
// freeGrant), then waits in the queue. With --wait 0 it only tries. A
// session that expires while it waits (etcd unreachable past the TTL) is
// replaced, and the wait goes on at the end of the queue (requeue). It
// stops catching signals: from then on they are for the command.
func (a *app) waitFor(h *held, o *holdOpts, canTry bool, take taker) (g *grant, timedOut bool, err error) {
	defer h.sc.stop()
	if canTry && o.waitSet && o.wait > 0 && time.Until(h.until) < freeGrant {
		tctx, cancel := context.WithTimeoutCause(h.sc.ctx, freeGrant, errWaitTimeout)
		g, err = take(tctx, h, true)
		cancel()
		if !errors.Is(err, etcdlock.ErrLocked) {
			return g, errors.Is(context.Cause(tctx), errWaitTimeout), err
		}
	}
	wctx, cancel := h.sc.ctx, context.CancelFunc(func() {})
	if !h.until.IsZero() {
		wctx, cancel = context.WithDeadlineCause(h.sc.ctx, h.until, errWaitTimeout)
	}
	defer cancel()
	for {
		g, err = take(wctx, h, canTry && o.waitSet && o.wait == 0)
		if !errors.Is(err, etcdlock.ErrSessionExpired) || wctx.Err() != nil || a.requeue(wctx, h, o) != nil {
			return g, errors.Is(context.Cause(wctx), errWaitTimeout), err
		}
	}
}

// waitError is etcdlock's exit for a grant not taken: 124 if --wait ran
// out (or, with --wait 0, the name was taken), else 1.
func waitError(o *holdOpts, what, name string, timedOut bool, err error) error {
	if !timedOut && !errors.Is(err, etcdlock.ErrLocked) {
		return exitf(exitUsage, "%s", libErr(err))
	}
	if o.waitSet && o.wait == 0 {
		return exitf(exitWaitTimeout, "%s %q is held or waited for (--wait 0)", what, name)
	}
	return exitf(exitWaitTimeout, "timed out after %v (--wait) waiting for %s %q", o.wait, what, name)
}

// release releases g, bounded by min(TTL, 5s); the error is ErrNotHeld (with
// the loss cause) if g had been lost before.
func (a *app) release(s acquire.Session, g *grant) error { return bounded(s, g.release) }

// bounded runs a release-like request of s's grant, bounded by min(TTL, 5s)
// and detached from any caller's context: a canceled wait must not keep a
// lock held.
func bounded(s acquire.Session, req func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(s.TTL(), maxRelease))
	defer cancel()
	return req(ctx)
}
