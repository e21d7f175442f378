package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// onceCmd is "once show" and "once clear": a name's completion record
// (run --once, Mutex.RunOnce), for operators.
func (a *app) onceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "once (show | clear) NAME",
		Short: "Show or clear the completion record of run --once",
		Long: `A name used with "run --once ID" (or Mutex.RunOnce in Go) has a completion
record: the last run id that completed, when and by whom. A run of that id,
or of an id that sorts before it, is "already done".

"once show NAME" prints it. "once clear NAME" deletes it, so that every id
runs again: it shows the record and asks you to type its id to confirm
(--force skips the question), and it deletes only the record it showed: if a
later run completed meanwhile, nothing is deleted and it exits 1.`,
	}
	var output string
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Print the last completed run of NAME",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNameAndOutput(cmd, args[0], output, "text", "json"); err != nil {
				return err
			}
			return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
				c, ok, err := lastCompletion(ctx, cli, args[0])
				switch {
				case err != nil:
					return err
				case output == "json" && !ok:
					return a.printJSON(nil)
				case output == "json":
					return a.printJSON(lockjson.FromCompletion(c))
				case !ok:
					fmt.Fprintf(a.stdout, "%q has no completion record: no run --once of it completed (or it was cleared)\n", args[0])
					return nil
				}
				fmt.Fprintf(a.stdout, "%q: %s\n", args[0], c)
				return nil
			})
		},
	}
	show.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	var force bool
	clear := &cobra.Command{
		Use:   "clear NAME",
		Short: "Delete the completion record of NAME, so that every run id runs again",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName(cmd, args[0]); err != nil {
				return err
			}
			return a.clearOnce(args[0], force)
		},
	}
	clear.Flags().BoolVar(&force, "force", false, "do not ask for confirmation")
	cmd.AddCommand(show, clear)
	return cmd
}

// clearOnce shows name's record, asks for its id unless force, and deletes
// exactly that record.
func (a *app) clearOnce(name string, force bool) error {
	cli, err := a.connect(context.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	read := func() (etcdlock.Completion, bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
		defer cancel()
		return lastCompletion(ctx, cli, name)
	}
	c, ok, err := read()
	switch {
	case err != nil:
		return err
	case !ok:
		return exitf(exitUsage, "%q has no completion record: nothing to clear", name)
	}
	fmt.Fprintf(a.stdout, "%q: %s\n", name, c)
	if !force {
		fmt.Fprintf(a.stderr, "Clear it, so that every run id of %q runs again? Type the id %q to confirm: ", name, c.ID)
		line, _ := bufio.NewReader(a.stdin).ReadString('\n')
		if strings.TrimSpace(line) != c.ID {
			return exitf(exitUsage, "not confirmed: the record of %q was left alone", name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
	defer cancel()
	err = etcdlock.ClearCompletion(ctx, cli, name, c)
	switch {
	case errors.Is(err, etcdlock.ErrChanged):
		return exitf(exitUsage, "%s: a later run completed after it was shown; nothing was cleared", libErr(err))
	case err != nil:
		return exitf(exitUsage, "%s", libErr(err))
	}
	fmt.Fprintf(a.stdout, "cleared the completion record of %q (run %q)\n", name, c.ID)
	return nil
}

// lastCompletion is etcdlock.LastCompletion with etcdlock's error.
func lastCompletion(ctx context.Context, cli *clientv3.Client, name string) (etcdlock.Completion, bool, error) {
	c, ok, err := etcdlock.LastCompletion(ctx, cli, name)
	if err != nil {
		return etcdlock.Completion{}, false, exitf(exitUsage, "%s", libErr(err))
	}
	return c, ok, nil
}
