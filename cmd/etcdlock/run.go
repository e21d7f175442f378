package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	defaultTTL   = 10 * time.Second
	defaultGrace = 5 * time.Second
	maxTTL       = 24 * time.Hour
	maxRelease   = 5 * time.Second
)

func (a *app) runCmd() *cobra.Command {
	var o holdOpts
	var rk recipe
	cmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Wait for the lock NAME in first-come order (forever, or up to --wait), then
run CMD (directly, no shell) in its own process group with ETCDLOCK_NAME,
ETCDLOCK_KEY and ETCDLOCK_TOKEN set, forward SIGINT, SIGTERM, SIGHUP and SIGQUIT
to it, and release the lock when it exits.

If the session cannot renew its lease, CMD's group gets SIGTERM at
ValidUntil - grace and SIGKILL at ValidUntil, so CMD is dead before the lock
can pass on. If the lock is lost without notice (lease revoked, key broken),
CMD gets SIGTERM at once and SIGKILL grace later. A CMD that writes shared
state must pass $ETCDLOCK_TOKEN with its writes, and the resource must reject
tokens lower than the highest it has seen.

Exit codes: CMD's own (128+N if it died of signal N); 1 usage or connection
error (etcdlock's stderr line says which, as a CMD's own 1 looks the same);
124 --wait ran out; 125 lock lost (or its lease not renewed in time, so
etcdlock terminated CMD) while CMD ran; 126 CMD not runnable; 127 CMD not
found; 128+N interrupted by signal N while waiting (no key left).`,
		Example: `  etcdlock run billing/nightly --wait 1h -- /opt/billing/run --date today
  etcdlock run deploy --wait 0 -- ./deploy.sh    # only if nobody holds or waits
  etcdlock run encoders --semaphore 4 -- ./encode.sh   # at most 4 at once
  etcdlock run db/schema --read -- ./report.sh    # readers share; "--write" excludes them
  etcdlock run billing/nightly --metrics-addr 127.0.0.1:9310 -- ./job   # /metrics and /healthz`,
		Args: func(cmd *cobra.Command, args []string) error {
			_, _, err := splitAtDash(cmd, args, []string{"NAME"}, true)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			before, argv, _ := splitAtDash(cmd, args, []string{"NAME"}, true)
			name := before[0]
			if err := checkName(cmd, name); err != nil {
				return err
			}
			if err := o.check(cmd, true); err != nil {
				return err
			}
			path, err := lookCommand(argv[0])
			if err != nil {
				return err
			}
			if err := rk.check(cmd); err != nil {
				return err
			}
			return a.holdAndRun(&o, "lock", name, path, argv, func(ctx context.Context, s *etcdlock.Session) (*grant, error) {
				l, err := rk.take(ctx, s, name, o.waitSet && o.wait == 0)
				if err != nil {
					return nil, err
				}
				return &grant{what: "lock", name: name, key: l.Key(), token: l.Token(), ctx: l.Context(), release: l.Unlock}, nil
			})
		},
	}
	o.register(cmd.Flags(), true)
	rk.register(cmd.Flags())
	return cmd
}

// recipe is the kind of grant run takes: a Mutex (default), a Semaphore of
// --semaphore N, or an RWMutex's shared (--read) or exclusive (--write)
// grant. Every user of a name must use the same kind (and N).
type recipe struct {
	semaphore   int
	read, write bool
}

func (r *recipe) register(f *pflag.FlagSet) {
	f.IntVar(&r.semaphore, "semaphore", 0, "take one of N grants of a semaphore (at most N holders at once) instead of a mutex")
	f.BoolVar(&r.read, "read", false, "take a shared (reader) grant of a read-write lock")
	f.BoolVar(&r.write, "write", false, "take an exclusive (writer) grant of a read-write lock, the counterpart of --read")
}

func (r *recipe) check(cmd *cobra.Command) error {
	n := 0
	for _, on := range []bool{cmd.Flags().Changed("semaphore"), r.read, r.write} {
		if on {
			n++
		}
	}
	switch {
	case n > 1:
		return usagef(cmd, "--semaphore, --read and --write exclude each other")
	case cmd.Flags().Changed("semaphore") && r.semaphore < 1:
		return usagef(cmd, "--semaphore must be at least 1, not %d", r.semaphore)
	}
	return nil
}

// take waits for the grant (or, with try, takes it only if free).
func (r *recipe) take(ctx context.Context, s *etcdlock.Session, name string, try bool) (*etcdlock.Lock, error) {
	switch {
	case r.semaphore > 0 && try:
		return etcdlock.NewSemaphore(s, name, r.semaphore).TryAcquire(ctx)
	case r.semaphore > 0:
		return etcdlock.NewSemaphore(s, name, r.semaphore).Acquire(ctx)
	case r.read && try:
		return etcdlock.NewRWMutex(s, name).TryRLock(ctx)
	case r.read:
		return etcdlock.NewRWMutex(s, name).RLock(ctx)
	case r.write && try:
		return etcdlock.NewRWMutex(s, name).TryLock(ctx)
	case r.write:
		return etcdlock.NewRWMutex(s, name).Lock(ctx)
	case try:
		return etcdlock.NewMutex(s, name).TryLock(ctx)
	}
	return etcdlock.NewMutex(s, name).Lock(ctx)
}

// splitAtDash splits the arguments of a command line "NAMES... -- CMD...":
// exactly len(names) arguments before "--" and at least one after it. With
// optional, "-- CMD" may be left out altogether (argv is nil then).
func splitAtDash(cmd *cobra.Command, args []string, names []string, required bool) (before, argv []string, err error) {
	want := strings.Join(names, " ")
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		switch {
		case required && len(args) > len(names):
			return nil, nil, usagef(cmd, `missing "--" between %s and the command`, want)
		case required && len(args) == len(names):
			return nil, nil, usagef(cmd, `missing "-- CMD" after %s`, want)
		case required:
			return nil, nil, usagef(cmd, `missing %s -- CMD`, strings.Join(names[len(args):], " "))
		case len(args) != len(names):
			if len(args) > len(names) {
				return nil, nil, usagef(cmd, `want %s, got %d arguments (put "--" before a command)`, want, len(args))
			}
			return nil, nil, usagef(cmd, `missing %s`, strings.Join(names[len(args):], " "))
		}
		return args, nil, nil
	}
	if dash != len(names) {
		if dash < len(names) {
			return nil, nil, usagef(cmd, `missing %s before "--"`, strings.Join(names[dash:], " "))
		}
		return nil, nil, usagef(cmd, `want only %s before "--", got %d arguments`, want, dash)
	}
	if len(args) == dash {
		return nil, nil, usagef(cmd, `missing the command after "--"`)
	}
	return args[:dash], args[dash:], nil
}

// checkName checks NAME before etcdlock connects, with the library's rule
// (etcdlock.KeyPrefix validates it).
func checkName(cmd *cobra.Command, name string) error {
	if name == "" {
		return usagef(cmd, "NAME must not be empty")
	}
	if _, err := etcdlock.KeyPrefix(name); err != nil {
		return usagef(cmd, "%s", libErr(err))
	}
	return nil
}

// holdOpts are the flags of run and elect.
type holdOpts struct {
	ttl         time.Duration
	wait        time.Duration
	waitSet     bool
	grace       time.Duration
	identity    string
	metricsAddr string
}

func (o *holdOpts) register(f *pflag.FlagSet, forLock bool) {
	f.DurationVar(&o.ttl, "ttl", defaultTTL, "session lease TTL (whole seconds, rounded up)")
	waitHelp := "give up (exit 124) if not leading after this long (default: wait forever)"
	if forLock {
		waitHelp = "give up (exit 124) if the lock is not granted after this long; 0: only if free and nobody waits (default: wait forever)"
	}
	f.DurationVar(&o.wait, "wait", 0, waitHelp)
	f.DurationVar(&o.grace, "grace", defaultGrace, "time between SIGTERM and SIGKILL when the lease is running out or lost; at most TTL/2")
	f.Lookup("grace").DefValue = "5s or TTL/2, whichever is smaller"
	f.StringVar(&o.identity, "identity", "", `identity stored with the key, shown by status (default "hostname/pid")`)
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on /metrics and the session's health on /healthz at this address (host:port)")
}

// check validates the flags; zeroWait says whether --wait 0 is allowed.
func (o *holdOpts) check(cmd *cobra.Command, zeroWait bool) error {
	f := cmd.Flags()
	o.waitSet = f.Changed("wait")
	if !f.Changed("grace") {
		o.grace = min(defaultGrace, o.ttl/2)
	}
	switch {
	case o.ttl <= 0 || o.ttl > maxTTL:
		return usagef(cmd, "--ttl must be > 0 and at most %v, not %v", maxTTL, o.ttl)
	case o.grace < 0:
		return usagef(cmd, "--grace must not be negative, not %v", o.grace)
	case o.grace > o.ttl/2:
		return usagef(cmd, "--grace %v must be at most half the TTL (%v)", o.grace, o.ttl/2)
	case o.waitSet && o.wait < 0:
		return usagef(cmd, "--wait must not be negative, not %v", o.wait)
	case o.waitSet && o.wait == 0 && !zeroWait:
		return usagef(cmd, "--wait must be positive, not %v", o.wait)
	case f.Changed("identity") && o.identity == "":
		return usagef(cmd, "--identity must not be empty")
	}
	return nil
}

// grant is a held lock or leadership, as the supervisor sees it.
type grant struct {
	what    string // "lock" or "leadership"
	name    string
	key     string
	token   etcdlock.Token
	ctx     context.Context // canceled on loss (and release)
	release func(context.Context) error
	env     []string // more variables for the command
}

// interrupted is the cause of a wait ended by a signal.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return "interrupted by " + signalName(e.sig) }

// signalCatcher turns the first signal on sigs into the cancellation of its
// context (cause *interrupted), until stop.
type signalCatcher struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func catchSignals(sigs <-chan os.Signal) *signalCatcher {
	c := &signalCatcher{quit: make(chan struct{}), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	go func() {
		defer close(c.done)
		select {
		case sig := <-sigs:
			c.cancel(&interrupted{sig})
		case <-c.quit:
		}
	}()
	return c
}

// stop ends the catching; later signals stay on the channel.
func (c *signalCatcher) stop() {
	c.once.Do(func() {
		close(c.quit)
		<-c.done
	})
}

// signal returns the signal that ended the context, or nil.
func (c *signalCatcher) signal() os.Signal {
	var ie *interrupted
	if errors.As(context.Cause(c.ctx), &ie) {
		return ie.sig
	}
	return nil
}

// notifySignals starts delivering the forwarded signals to a channel.
func notifySignals() (chan os.Signal, func()) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	return sigs, func() { signal.Stop(sigs) }
}

// openSession opens the session of run, elect and observe; the grant is
// bounded by --command-timeout.
func (a *app) openSession(ctx context.Context, cli *clientv3.Client, o *holdOpts) (*etcdlock.Session, error) {
	opts := []etcdlock.SessionOption{etcdlock.WithTTL(o.ttl), etcdlock.WithLogger(a.logger())}
	if o.identity != "" {
		opts = append(opts, etcdlock.WithIdentity(o.identity))
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
	s, err := etcdlock.NewSession(gctx, cli, opts...)
	if err != nil {
		if ms != nil {
			ms.stop()
		}
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		return nil, exitf(exitUsage, "cannot open a session: %s", libErr(err))
	}
	if ms != nil {
		ms.serve(s, a.logf)
		a.stopMetrics = ms.stop
	}
	return s, nil
}

// closeSession closes s (revoking its lease, which deletes every key it
// still has) and says so if that failed.
func (a *app) closeSession(s *etcdlock.Session) {
	if err := s.Close(); err != nil {
		a.logf("warning: could not revoke the session's lease %x (its keys expire within %v): %s", int64(s.Lease()), s.TTL(), libErr(err))
	}
	if a.stopMetrics != nil {
		a.stopMetrics()
		a.stopMetrics = nil
	}
}

// errWaitTimeout is the cause of a wait ended by --wait.
var errWaitTimeout = errors.New("--wait ran out")

// holdAndRun connects, opens a session, takes a grant with take (bounded by
// --wait), runs argv under it and returns etcdlock's exit.
func (a *app) holdAndRun(o *holdOpts, what, name, path string, argv []string, take func(context.Context, *etcdlock.Session) (*grant, error)) error {
	sigs, stopNotify := notifySignals()
	defer stopNotify()
	sc := catchSignals(sigs)
	defer sc.stop()
	interruptedWhile := func(doing string) error {
		sig := sc.signal()
		return exitf(signalCode(sig), "interrupted by %s while %s", signalName(sig), doing)
	}

	cli, err := a.connect(sc.ctx)
	if err != nil {
		if sc.signal() != nil {
			return interruptedWhile("connecting to etcd")
		}
		return err
	}
	defer cli.Close()
	s, err := a.openSession(sc.ctx, cli, o)
	if err != nil {
		if sc.signal() != nil {
			return interruptedWhile("opening a session")
		}
		return err
	}
	defer a.closeSession(s) // after every return below: revokes the lease, so no key is left

	if err := a.precheck(sc.ctx, cli, name); err != nil {
		if sc.signal() != nil {
			return interruptedWhile("checking access to " + fmt.Sprintf("%q", name))
		}
		return err
	}
	wctx, cancel := sc.ctx, context.CancelFunc(func() {})
	if o.waitSet && o.wait > 0 {
		wctx, cancel = context.WithTimeoutCause(sc.ctx, o.wait, errWaitTimeout)
	}
	g, err := take(wctx, s)
	cancel()
	sc.stop() // from now on, signals are forwarded to the command
	if sc.signal() != nil {
		if g != nil {
			a.release(s, g)
		}
		return interruptedWhile(fmt.Sprintf("waiting for %s %q", what, name))
	}
	if err != nil {
		if errors.Is(context.Cause(wctx), errWaitTimeout) || errors.Is(err, etcdlock.ErrLocked) {
			if o.waitSet && o.wait == 0 {
				return exitf(exitWaitTimeout, "%s %q is held or waited for (--wait 0)", what, name)
			}
			return exitf(exitWaitTimeout, "timed out after %v (--wait) waiting for %s %q", o.wait, what, name)
		}
		return exitf(exitUsage, "%s", libErr(err))
	}
	g.env = append(g.env, "ETCDLOCK_NAME="+name, "ETCDLOCK_KEY="+g.key, "ETCDLOCK_TOKEN="+g.token.String())
	return a.supervise(s, g, path, argv, o.grace, sigs)
}

// release releases g, bounded by min(TTL, 5s); the error is ErrNotHeld (with
// the loss cause) if g had been lost before.
func (a *app) release(s *etcdlock.Session, g *grant) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(s.TTL(), maxRelease))
	defer cancel()
	return g.release(ctx)
}

// lossText explains why a grant was lost.
func lossText(cause error) string {
	switch {
	case errors.Is(cause, etcdlock.ErrLockLost):
		return "its key was deleted by someone else, e.g. etcdlock break"
	case errors.Is(cause, etcdlock.ErrSessionClosed):
		return "the session was closed"
	case errors.Is(cause, etcdlock.ErrSessionExpired):
		return "the session's lease expired or was revoked"
	case cause == nil:
		return "unknown cause"
	}
	return libErr(cause)
}

// supervise runs argv while g is held, as the package documentation says:
// it forwards signals, terminates the command when the lease runs out or g
// is lost, and releases g when the command exits.
func (a *app) supervise(s *etcdlock.Session, g *grant, path string, argv []string, grace time.Duration, sigs <-chan os.Signal) error {
	lost := g.ctx.Done()
	lostBeforeStart := func() error {
		a.release(s, g)
		return exitf(exitLost, "%s %q was lost before the command started: %s", g.what, g.name, lossText(context.Cause(g.ctx)))
	}
	// Do not start the command on a lease that is about to run out: wait
	// for the next keepalive first.
	for time.Until(s.ValidUntil()) <= grace {
		select {
		case <-lost:
			return lostBeforeStart()
		case sig := <-sigs:
			a.release(s, g)
			return exitf(signalCode(sig), "interrupted by %s before the command started; released %s %q", signalName(sig), g.what, g.name)
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Nor on a grant already lost (a break, a lost session) while the lease
	// looked valid: check the grant's context last thing before the start.
	// A loss after this check closes lost, which the loop below sees first
	// thing and terminates the command for.
	beforeStart(g)
	if g.ctx.Err() != nil {
		return lostBeforeStart()
	}
	c := &exec.Cmd{Path: path, Args: argv, Env: append(os.Environ(), g.env...), Stdout: a.stdout, Stderr: a.stderr}
	if a.stdin != nil {
		c.Stdin = a.stdin
	}
	done, err := startChild(c)
	if err != nil {
		a.release(s, g)
		return startError(argv[0], err)
	}
	pid := c.Process.Pid

	var (
		termSent, killSent bool
		lossCause          error
		lostAt             time.Time
		timer              = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		now := time.Now()
		valid := s.ValidUntil()
		termAt, killAt := valid.Add(-grace), valid
		if lossCause != nil {
			termAt = lostAt
			killAt = minTime(killAt, lostAt.Add(grace))
		}
		if !termSent && !now.Before(termAt) {
			termSent = true
			if lossCause == nil {
				a.logf("the session could not renew its lease, which runs out in %v: sending SIGTERM to the command, SIGKILL when it runs out",
					valid.Sub(now).Round(time.Millisecond))
			}
			_ = signalGroup(pid, syscall.SIGTERM)
		}
		if !killSent && !now.Before(killAt) {
			killSent = true
			a.logf("sending SIGKILL to the command")
			_ = signalGroup(pid, syscall.SIGKILL)
		}
		next := time.Duration(-1)
		if !termSent {
			next = termAt.Sub(now)
		}
		if d := killAt.Sub(now); !killSent && (next < 0 || d < next) {
			next = d
		}
		if next >= 0 {
			timer.Reset(next)
		} else {
			timer.Stop()
		}

		select {
		case werr := <-done:
			return a.finish(s, g, c, argv[0], werr, lossCause, termSent || killSent)
		case sig := <-sigs:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = signalGroup(pid, ss)
			}
		case <-lost:
			lost = nil
			lossCause, lostAt = context.Cause(g.ctx), time.Now()
			switch {
			case termSent:
				a.logf("%s %q lost (%s)", g.what, g.name, lossText(lossCause))
			case grace > 0:
				a.logf("%s %q lost (%s): sending SIGTERM to the command, SIGKILL in %v", g.what, g.name, lossText(lossCause), grace)
			default:
				a.logf("%s %q lost (%s): terminating the command at once (--grace 0)", g.what, g.name, lossText(lossCause))
			}
		case <-timer.C:
		}
	}
}

// beforeStart is called by supervise right before its last check of g and
// the command's start; tests set it to break the grant there.
var beforeStart = func(g *grant) {}

// errLeaseRanOut is the loss cause when the session's validity clock ran
// out before the session itself noticed.
var errLeaseRanOut = errors.New("the session could not renew its lease before it ran out")

// finish releases g after the command ended and returns etcdlock's exit:
// 125 if g was lost while the command ran or etcdlock had to terminate the
// command because the lease was running out (terminated), else the
// command's status.
func (a *app) finish(s *etcdlock.Session, g *grant, c *exec.Cmd, argv0 string, werr, lossCause error, terminated bool) error {
	if lossCause == nil && g.ctx.Err() != nil {
		lossCause = context.Cause(g.ctx)
	}
	if lossCause == nil && !time.Now().Before(s.ValidUntil()) {
		lossCause = errLeaseRanOut // no release: the lease may be gone, and etcd unreachable
	}
	var rerr error
	if lossCause == nil {
		rerr = a.release(s, g)
		if errors.Is(rerr, etcdlock.ErrNotHeld) {
			// Lost before the release, maybe before the command ended: its
			// work was not certainly exclusive.
			lossCause = rerr
		}
	}
	if c.ProcessState == nil {
		return exitf(exitUsage, "waiting for command %q: %v", argv0, werr)
	}
	code, how := exitStatus(c.ProcessState)
	switch {
	case lossCause != nil:
		return exitf(exitLost, "%s %q was lost while the command ran (%s); %s; exiting %d",
			g.what, g.name, lossText(lossCause), describeExit(argv0, how), exitLost)
	case terminated:
		return exitf(exitLost, "the session could not renew the lease of %s %q in time, so etcdlock terminated the command; %s; exiting %d",
			g.what, g.name, describeExit(argv0, how), exitLost)
	case rerr != nil:
		a.logf("warning: could not release %s %q (%s); revoking the session's lease frees it", g.what, g.name, libErr(rerr))
	}
	if code != 0 {
		return exitf(code, "%s", describeExit(argv0, how))
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
