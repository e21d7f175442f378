package main

import (
	"context"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
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
		RunE: func(cmd *cobra.Command, args []string) error { return a.run(cmd, args, &o, &rk) },
	}
	o.register(cmd.Flags(), true)
	rk.register(cmd.Flags())
	return cmd
}

// run checks run's arguments and flags, then holds the lock and runs CMD.
func (a *app) run(cmd *cobra.Command, args []string, o *holdOpts, rk *recipe) error {
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
	return a.holdAndRun(o, "lock", name, path, argv, func(ctx context.Context, s *etcdlock.Session) (*grant, error) {
		l, err := rk.take(ctx, s, name, o.waitSet && o.wait == 0)
		if err != nil {
			return nil, err
		}
		return &grant{what: "lock", name: name, key: l.Key(), token: l.Token(), ctx: l.Context(), release: l.Unlock}, nil
	})
}
