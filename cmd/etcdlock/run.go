package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
)

// runLong is run's help text.
const runLong = `Wait for the lock NAME in first-come order (forever, or up to --wait), then
run CMD (directly, no shell) in its own process group with ETCDLOCK_NAME,
ETCDLOCK_KEY and ETCDLOCK_TOKEN set, forward SIGINT, SIGTERM, SIGHUP and SIGQUIT
to it (after a SIGTERM or SIGINT, SIGKILL follows --grace later if CMD is
still running, at once on a second one), and release the lock when it exits.

If the session cannot renew its lease, CMD's tree gets SIGTERM at
ValidUntil - grace and SIGKILL at ValidUntil, so CMD is dead before the lock
can pass on. If the lock is lost without notice (lease revoked, key broken),
CMD's tree gets SIGTERM at once and SIGKILL grace later. On Linux the tree
is every process CMD started, however it detached (setsid, double fork):
what is left of it when CMD exits is terminated before the release, and it
all dies within 0.5 s if etcdlock dies. Elsewhere it is CMD's process group. A CMD that writes shared
state must pass $ETCDLOCK_TOKEN with its writes, and the resource must reject
tokens lower than the highest it has seen.

With --once ID, CMD runs at most once per ID among the runs that complete:
under the lock, etcdlock reads the name's completion record; if it holds ID
or an ID that sorts after it (byte order: use ISO dates or zero-padded
counters), etcdlock releases, says so on stderr and exits 0 without running
CMD. Otherwise CMD runs, and if it exits 0 (and the lock was held
throughout), ID is recorded, guarded by the grant, before the release. A CMD
that fails, crashes or loses the lock records nothing, so the next run of ID
runs it again (at least once after a crash).

With --names a,b,c instead of NAME, etcdlock takes all of those locks
together (etcdlock.LockAll: one etcd transaction enqueues a key in each, so
two runs that name the same locks in any order never deadlock), runs CMD
once all are granted, and releases all after. ETCDLOCK_NAME is the list,
ETCDLOCK_KEY the keys (comma separated) and ETCDLOCK_TOKEN the one token
they share. --wait 0 takes them only if every one is free.

With --lock-delay D, if etcdlock's session is lost while it holds (etcdlock
killed, or its host cut off until the lease ran out), the next waiter is
granted only D after the lease ended (Chubby's lock-delay). A release, and
etcdlock's own exit, pass the lock at once. It is for resources that cannot
check $ETCDLOCK_TOKEN; it makes a stalled holder's late writes less likely,
not impossible.

At the root of a sharded deployment (see 'etcdlock clusters'), each name is
taken on the cluster its slot is on, with a sharded session (a lease on each
cluster it uses; --names must then share one cluster); while the slot is
moving the wait lasts until the move ends. A member cluster that is not the
root is refused.

Without CMD, hold the lock interactively (as "etcdctl lock NAME" does): print
the grant (name, token, key) on stdout and hold it until SIGINT or SIGTERM
(release, exit 0) or its loss (exit 125).

Exit codes: see docs/cli.md#exit-codes`

func (a *app) runCmd() *cobra.Command {
	var o holdOpts
	var rk recipe
	var once string
	cmd := &cobra.Command{
		Use:   "run NAME [flags] [-- CMD [ARGS...]]",
		Short: "Run a command while holding a lock",
		Long:  runLong,
		Example: `  etcdlock run billing/nightly --once "$(date -u +%F)" --wait 1h -- /opt/billing/run   # in every machine's crontab: once a day
  etcdlock run billing/nightly --wait 1h -- /opt/billing/run --date today
  etcdlock run deploy --wait 0 -- ./deploy.sh    # only if nobody holds or waits
  etcdlock run encoders --semaphore 4 -- ./encode.sh   # at most 4 at once
  etcdlock run db/schema --read -- ./report.sh    # readers share; "--write" excludes them
  etcdlock run billing/nightly --metrics-addr 127.0.0.1:9310 -- ./job   # /metrics and /healthz
  etcdlock run --names db/orders,db/billing -- ./migrate.sh   # both locks, deadlock-free
  etcdlock run billing/nightly --lock-delay 30s -- ./job   # a lost holder's lock waits 30s
  etcdlock run maintenance/db    # hold it by hand until Ctrl-C`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); cmd.Flags().Changed("names") && (dash > 0 || dash < 0 && len(args) > 0) {
				return usagef(cmd, "--names replaces NAME: give no NAME with it")
			}
			_, _, err := splitAtDash(cmd, args, runNames(cmd), false)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error { return a.run(cmd, args, &o, &rk, once) },
	}
	o.register(cmd.Flags(), true)
	rk.register(cmd.Flags())
	cmd.Flags().StringVar(&once, "once", "", "run CMD at most once per this run id among the runs that complete (exit 0 without running it if done)")
	cmd.Flags().StringSlice("names", nil, "take these locks together instead of NAME (comma separated; at most 42), deadlock-free")
	return cmd
}

// runNames is what run wants before "--": NAME, or nothing with --names.
func runNames(cmd *cobra.Command) []string {
	if cmd.Flags().Changed("names") {
		return nil
	}
	return []string{"NAME"}
}

// lockNames returns the names run takes: NAME, or those of --names, checked.
func lockNames(cmd *cobra.Command, before []string, rk *recipe, onceSet bool) ([]string, error) {
	if !cmd.Flags().Changed("names") {
		return before, checkName(cmd, before[0])
	}
	names, _ := cmd.Flags().GetStringSlice("names")
	switch {
	case len(names) == 0:
		return nil, usagef(cmd, "--names must name at least one lock")
	case len(names) > etcdlock.MaxLockAllNames:
		return nil, usagef(cmd, "--names takes at most %d locks, not %d", etcdlock.MaxLockAllNames, len(names))
	case rk.semaphore > 0 || rk.read || rk.write || onceSet:
		return nil, usagef(cmd, "--names takes mutexes: not with --semaphore, --read, --write or --once")
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := checkName(cmd, n); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, usagef(cmd, "--names has %q twice", n)
		}
		seen[n] = true
	}
	return names, nil
}

// run checks run's arguments and flags, then holds the lock and runs CMD.
func (a *app) run(cmd *cobra.Command, args []string, o *holdOpts, rk *recipe, once string) error {
	before, argv, _ := splitAtDash(cmd, args, runNames(cmd), false)
	if err := o.check(cmd, true); err != nil {
		return err
	}
	path := ""
	if argv != nil {
		var err error
		if path, err = lookCommand(argv[0]); err != nil {
			return err
		}
	}
	if err := rk.check(cmd); err != nil {
		return err
	}
	onceSet := cmd.Flags().Changed("once")
	if err := checkOnce(cmd, onceSet, argv, o, rk, once); err != nil {
		return err
	}
	names, err := lockNames(cmd, before, rk, onceSet)
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("names") {
		return a.holdAndRun(o, "locks", names, path, argv, takeAll(names))
	}
	name := names[0]
	return a.holdAndRun(o, "lock", names, path, argv, func(ctx context.Context, h *held, try bool) (*grant, error) {
		l, err := rk.take(ctx, h.s, name, try)
		if err != nil {
			return nil, err
		}
		g := &grant{what: "lock", name: name, key: l.Key(), token: l.Token(), ctx: l.Context(), release: l.Unlock}
		if onceSet {
			return onceGrant(ctx, h, g, l, once)
		}
		return g, nil
	})
}

// takeAll takes names together (LockAll; TryLockAll with try).
func takeAll(names []string) taker {
	return func(ctx context.Context, h *held, try bool) (*grant, error) {
		take := h.s.LockAll
		if try {
			take = h.s.TryLockAll
		}
		ls, err := take(ctx, names...)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(names))
		for _, l := range ls.All() {
			keys = append(keys, l.Key())
		}
		return &grant{what: "locks", name: strings.Join(names, ","), key: strings.Join(keys, ","),
			token: ls.All()[0].Token(), ctx: ls.Context(), release: ls.Unlock}, nil
	}
}

// checkOnce validates --once (onceSet: given) and --max-runtime against the
// rest.
func checkOnce(cmd *cobra.Command, onceSet bool, argv []string, o *holdOpts, rk *recipe, once string) error {
	switch {
	case argv == nil && (onceSet || o.maxRuntime > 0):
		return usagef(cmd, "--once and --max-runtime need a command (-- CMD)")
	case onceSet && once == "":
		return usagef(cmd, "--once must not be empty")
	case onceSet && (rk.semaphore > 0 || rk.read):
		return usagef(cmd, "--once needs an exclusive lock: not with --semaphore or --read")
	}
	return nil
}

// onceGrant makes g a --once grant: it fails with errOnceDone (g released)
// when id is already done, and records id on the command's success.
func onceGrant(ctx context.Context, h *held, g *grant, l *etcdlock.Lock, id string) (*grant, error) {
	done, err := l.Completed(ctx, id)
	if err == nil && done {
		err = fmt.Errorf("%w: run %q of %q", errOnceDone, id, g.name)
		if cli, cerr := h.clientOf(ctx, g.name); cerr == nil {
			if c, ok, lerr := etcdlock.LastCompletion(ctx, cli, g.name); lerr == nil && ok {
				err = fmt.Errorf("%w (%s)", err, c)
			}
		}
	}
	if err != nil {
		_ = bounded(h.s, l.Unlock) // if it does not finish, closing the session revokes the lease
		return nil, err
	}
	g.complete = func(ctx context.Context) error { return l.MarkCompleted(ctx, id) }
	return g, nil
}

// errOnceDone: the --once run id is already done.
var errOnceDone = errors.New("already done")
