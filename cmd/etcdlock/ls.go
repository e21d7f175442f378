package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lsJSON is one element of ls's JSON output.
type lsJSON struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	Size        int        `json:"size,omitempty"` // a semaphore's size
	Holder      *entryJSON `json:"holder"`
	Cluster     string     `json:"cluster,omitempty"` // in a sharded deployment
	HolderCount int        `json:"holder_count"`
	WaiterCount int        `json:"waiter_count"`
}

// lsCmd is "etcdlock ls": every lock with a holder, one line each.
func (a *app) lsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List the locks that have a holder, with their waiter counts",
		Long: `List every lock (and election) whose name starts with PREFIX and that has a
holder, sorted by name, with its holder and its number of waiters.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef(cmd, "too many arguments: want at most PREFIX, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(cmd, output, "table", "json"); err != nil {
				return err
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := a.checkPrefix(cmd, "PREFIX", prefix); err != nil {
				return err
			}
			return a.ls(prefix, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// ls prints the locks under prefix that have a holder.
func (a *app) ls(prefix, output string) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		list := func(ctx context.Context, prefix string) ([]etcdlock.LockState, error) {
			return etcdlock.List(ctx, cli, prefix)
		}
		r, sharded, err := a.openShards(ctx, cli)
		if err != nil {
			return err
		}
		if sharded { // every member cluster's names
			defer r.Close()
			list = r.List
		}
		out, err := listHeld(ctx, list, prefix)
		switch {
		case err != nil:
			return err
		case output == "json":
			return a.printJSON(out)
		}
		if len(out) == 0 {
			fmt.Fprintf(a.stdout, "no lock under %q has a holder\n", prefix)
			return nil
		}
		return a.printLs(out)
	})
}

// printLs prints out as a table.
func (a *app) printLs(out []lsJSON) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tHOLDER\tTOKEN\tHELD\tIN QUEUE\tHOLDERS\tWAITERS")
	for _, l := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\n", l.Name, kindText(*l.Holder), l.Holder.Identity, l.Holder.Token,
			heldText(*l.Holder), inQueueText(*l.Holder), l.HolderCount, l.WaiterCount)
	}
	return tw.Flush()
}

// listHeld lists the locks under prefix that have a holder, read by list.
func listHeld(ctx context.Context, list func(context.Context, string) ([]etcdlock.LockState, error), prefix string) ([]lsJSON, error) {
	states, err := list(ctx, prefix)
	if err != nil {
		return nil, exitf(exitUsage, "%s", libErr(err))
	}
	out := []lsJSON{}
	for _, st := range states {
		if st.Holder == nil {
			continue
		}
		h := toEntryJSON(*st.Holder, nil)
		out = append(out, lsJSON{Name: st.Name, Kind: st.Holder.Kind, Size: st.Holder.Size, Holder: &h,
			HolderCount: len(st.Holders), WaiterCount: len(st.Waiters), Cluster: st.Cluster})
	}
	return out, nil
}
