package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock/shard"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// moveLong is move's help text.
const moveLong = `Move slot S (or the slot of NAME) of the sharded deployment whose root
--endpoints reaches to cluster CLUSTER, printing each phase: the slot is frozen
on its source (new acquisitions wait for the move; no write sent before can
create a key there), the source's queues of the slot drain in FIFO order (the
count of keys left is printed as it falls), the completion records (run --once)
are copied, the target's generation is raised above every other cluster's (so
every token it grants is above every token the source granted), the slot is
stamped active on the target, and the map is switched.

A holder that never lets go keeps the move in its drain. --force-after D breaks
what is left on the source D after the drain began (each key deleted guarded,
as 'etcdlock break' does). The broken holders may still be running and believe
they hold: it is safe only for resources that check fencing tokens.

A move interrupted (a signal, a crash) leaves the slot frozen: its names wait.
Run the same move again with --resume to finish it, or give it up with
--abort: the move's record goes and the slot stays on its source, where its
names are granted again.`

func (a *app) moveCmd() *cobra.Command {
	var slot int
	var name, to string
	var forceAfter time.Duration
	var resume, abort bool
	cmd := &cobra.Command{
		Use:   "move (--slot S | --name NAME) (--to CLUSTER [--force-after D] [--resume] | --abort)",
		Short: "Move a slot (and every name in it) to another cluster",
		Long:  moveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			slotSet, nameSet := cmd.Flags().Changed("slot"), cmd.Flags().Changed("name")
			switch {
			case slotSet == nameSet:
				return usagef(cmd, "give one of --slot and --name")
			case abort && (to != "" || forceAfter != 0 || resume):
				return usagef(cmd, "--abort takes no --to, --force-after or --resume")
			case to == "" && !abort:
				return usagef(cmd, "--to is required")
			case forceAfter < 0:
				return usagef(cmd, "--force-after must not be negative, not %v", forceAfter)
			case nameSet:
				if err := checkName(cmd, name); err != nil {
					return err
				}
				slot = shard.SlotOf(name)
			}
			if abort {
				return a.abortMove(slot)
			}
			if forceAfter > 0 {
				a.logf("--force-after %v: holders still on the source then are broken while they may still run; safe only for resources that check fencing tokens", forceAfter)
			}
			return a.move(slot, to, shard.MoveOptions{ForceAfter: forceAfter, Resume: resume})
		},
	}
	cmd.Flags().IntVar(&slot, "slot", 0, "the slot to move (0-4095)")
	cmd.Flags().StringVar(&name, "name", "", "move the slot of this name")
	cmd.Flags().StringVar(&to, "to", "", "the cluster to move it to")
	cmd.Flags().DurationVar(&forceAfter, "force-after", 0, "break what is left on the source this long after the drain began (0: never)")
	cmd.Flags().BoolVar(&resume, "resume", false, "finish a move of the slot to the same cluster that was interrupted")
	cmd.Flags().BoolVar(&abort, "abort", false, "give up the move of the slot in progress: the slot stays on its source")
	return cmd
}

// abortMove gives up the move of slot in progress.
func (a *app) abortMove(slot int) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		r, err := a.mustShards(ctx, cli)
		if err != nil {
			return err
		}
		defer r.Close()
		what := "the move"
		if mi, ok := r.Moving(slot); ok {
			what = fmt.Sprintf("the move from %s to %s", mi.From, mi.To)
		}
		if err := r.AbortMove(ctx, slot); err != nil {
			return exitf(exitUsage, "%s", libErr(err))
		}
		fmt.Fprintf(a.stdout, "slot %d: %s aborted\n", slot, what)
		return nil
	})
}

// move runs the move until it is done or a signal stops it.
func (a *app) move(slot int, to string, o shard.MoveOptions) error {
	cli, err := a.connect(context.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := a.mustShards(ctx, cli)
	if err != nil {
		return err
	}
	defer r.Close()
	last, recorded := "", false
	o.Progress = func(p shard.MoveProgress) {
		recorded = true // every phase reported comes after the record
		line := progressLine(p)
		if line != last {
			fmt.Fprintln(a.stdout, line)
			last = line
		}
	}
	err = r.MoveSlot(ctx, slot, to, o)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return exitf(exitUsage, "%s (interrupted: the slot stays frozen; finish with --resume, or give up with --abort)", libErr(err))
	case recorded && !errors.Is(err, shard.ErrMoveAborted):
		return exitf(exitUsage, "%s (the move stays recorded and the slot frozen: finish it with --resume, or give it up with --abort)", libErr(err))
	}
	return exitf(exitUsage, "%s", libErr(err))
}

// progressLine is one line of move's output.
func progressLine(p shard.MoveProgress) string {
	head := fmt.Sprintf("slot %d:", p.Slot)
	switch p.Phase {
	case "started":
		return fmt.Sprintf("%s moving from %s to %s", head, p.From, p.To)
	case "frozen":
		return fmt.Sprintf("%s frozen on %s: new acquisitions wait for the move", head, p.From)
	case "draining":
		return fmt.Sprintf("%s draining on %s: %d keys of %d names left", head, p.From, p.Keys, p.Names)
	case "forced":
		return fmt.Sprintf("%s breaking the %d keys of %d names left on %s", head, p.Keys, p.Names, p.From)
	case "drained":
		return fmt.Sprintf("%s drained on %s", head, p.From)
	case "raised":
		return fmt.Sprintf("%s generation of %s raised to %d", head, p.To, p.Generation)
	case "activated":
		return fmt.Sprintf("%s active on %s", head, p.To)
	case "done":
		return fmt.Sprintf("%s moved from %s to %s", head, p.From, p.To)
	}
	return fmt.Sprintf("%s %s", head, p.Phase)
}
