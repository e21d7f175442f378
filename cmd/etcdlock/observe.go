package main

import (
	"context"
	"errors"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/spf13/cobra"
)

// observeCmd is "etcdlock observe": every leader change of an election.
func (a *app) observeCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "observe NAME",
		Short: "Print every leader change of an election until interrupted",
		Long: `Print the current leader of the election NAME, then every change (a new
leader, a proclaimed value, "no leader"), one line each, until interrupted.
A slow reader may skip intermediate states but always sees the latest.
At the root of a sharded deployment it observes the election on its slot's
cluster, across moves; a member cluster that is not the root is refused.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNameAndOutput(cmd, args[0], output, "text", "json"); err != nil {
				return err
			}
			return a.observe(args[0], output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json (one object per line)")
	return cmd
}

// checkElection fails if name is used by another kind of recipe (Observe
// would retry that forever).
func (a *app) checkElection(e *etcdlock.Election) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
	defer cancel()
	if _, err := e.Leader(ctx); err != nil && !errors.Is(err, etcdlock.ErrNoLeader) {
		return exitf(exitUsage, "%s", libErr(err))
	}
	return nil
}

// watch checks that name is an election and starts observing it; stop ends
// the observation.
func (a *app) watch(s acquire.Session, name string) (e *etcdlock.Election, infos <-chan etcdlock.LeaderInfo, stop context.CancelFunc, err error) {
	e = s.NewElection(name)
	if err := a.checkElection(e); err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return e, e.Observe(ctx), stop, nil
}

// observe prints every leader change of name until interrupted.
func (a *app) observe(name, output string) error {
	// Observe needs a Session although it writes nothing: its lease holds
	// no key and is revoked on exit.
	return a.withSession(&holdOpts{ttl: defaultTTL}, quietOnSignal, func(h *held) error {
		h.sc.stop()
		_, infos, stop, err := a.watch(h.s, name)
		if err != nil {
			return err
		}
		defer stop()
		for {
			select {
			case info, ok := <-infos:
				if !ok {
					return errObserveEnded(name)
				}
				a.printLeader(info, false, output)
			case <-h.sigs:
				return nil
			}
		}
	})
}

// errObserveEnded is the error of an Observe channel closed under etcdlock.
func errObserveEnded(name string) error {
	return exitf(exitUsage, "observing election %q ended: the client was closed", name)
}
