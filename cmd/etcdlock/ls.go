package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lsCmd is "etcdlock ls": every lock with a holder, one line each.
func (a *app) lsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List the locks that have a holder, with their waiter counts",
		Long: `List every lock (and election) whose name starts with PREFIX and that has a
holder, sorted by name, with its holder and its number of waiters.

At the root of a sharded deployment, the names of every member cluster are
listed, each with its cluster (-o json). A member cluster that does not
answer is named on stderr and its names are left out; ls fails only when
none answers.`,
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

// ls prints the locks under prefix that have a holder. In a sharded
// deployment it lists every member cluster that answers and names, on
// stderr, those that do not; it fails only when none answers.
func (a *app) ls(prefix, output string) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		r, sharded, err := a.openShards(ctx, cli)
		if err != nil {
			return err
		}
		var states []shard.State
		if !sharded {
			a.warnMember(ctx, cli)
		}
		if sharded { // every member cluster's names
			defer r.Close()
			states, err = a.listClusters(ctx, r, prefix)
		} else {
			states, err = listPlain(ctx, cli, prefix)
		}
		if err != nil {
			return err
		}
		out := heldOf(states)
		if output == "json" {
			return a.printJSON(out)
		}
		if len(out) == 0 {
			fmt.Fprintf(a.stdout, "no lock under %q has a holder\n", prefix)
			return nil
		}
		return a.printLs(out)
	})
}

// listClusters is Shards.List over the member clusters that answer, read
// at once: a cluster that does not answer (within the command's timeout)
// is named on stderr and left out. It fails only when none answers.
func (a *app) listClusters(ctx context.Context, r *shard.Shards, prefix string) ([]shard.State, error) {
	clusters := r.Clusters()
	states := make([][]shard.State, len(clusters))
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = listOn(ctx, r, c.ID, prefix)
		}()
	}
	wg.Wait()
	var out []shard.State
	failed := 0
	for i, c := range clusters {
		if errs[i] != nil {
			failed++
			a.logf("cluster %s (%s) did not answer, its names are not listed: %s", c.ID, strings.Join(c.Endpoints, ","), libErr(errs[i]))
		}
		out = append(out, states[i]...)
	}
	if failed == len(clusters) {
		return nil, exitf(exitUsage, "no member cluster of the deployment answered")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// listPlain lists the names under prefix on cli's cluster alone.
func listPlain(ctx context.Context, cli *clientv3.Client, prefix string) ([]shard.State, error) {
	all, err := etcdlock.List(ctx, cli, prefix)
	if err != nil {
		return nil, exitf(exitUsage, "%s", libErr(err))
	}
	out := make([]shard.State, len(all))
	for i, st := range all {
		out[i] = shard.State{LockState: st}
	}
	return out, nil
}

// listOn lists the names under prefix on cluster id whose slot the map
// gives id (a name seen on another, the source of a move that just
// switched, is left out), as Shards.List does.
func listOn(ctx context.Context, r *shard.Shards, id, prefix string) ([]shard.State, error) {
	cli, err := r.Client(ctx, id)
	if err != nil {
		return nil, err
	}
	all, err := etcdlock.List(ctx, cli, prefix)
	if err != nil {
		return nil, err
	}
	var out []shard.State
	for _, ls := range all {
		if owner, _ := r.ClusterOf(ls.Name); owner != id {
			continue
		}
		st := shard.State{LockState: ls, Cluster: id, Slot: shard.SlotOf(ls.Name)}
		if len(st.Holders) > 0 {
			st.Generation = st.Holders[0].Token.Generation()
		}
		out = append(out, st)
	}
	return out, nil
}

// printLs prints out as a table.
func (a *app) printLs(out []lsJSON) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	sharded := out[0].Cluster != ""
	head := "NAME\tKIND\tHOLDER\tTOKEN\tHELD\tIN QUEUE\tHOLDERS\tWAITERS"
	if sharded {
		head += "\tCLUSTER"
	}
	fmt.Fprintln(tw, head)
	for _, l := range out {
		row := fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d", l.Name, kindText(*l.Holder), l.Holder.Identity, l.Holder.Token,
			heldText(*l.Holder), inQueueText(*l.Holder), l.HolderCount, l.WaiterCount)
		if sharded {
			row += "\t" + l.Cluster
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

// heldOf is the locks of states that have a holder.
func heldOf(states []shard.State) []lsJSON {
	out := []lsJSON{}
	for _, st := range states {
		if st.Holder == nil {
			continue
		}
		h := toEntryJSON(*st.Holder, nil)
		out = append(out, lsJSON{Name: st.Name, Kind: st.Holder.Kind, Size: st.Holder.Size, Holder: &h,
			HolderCount: len(st.Holders), WaiterCount: len(st.Waiters), Cluster: st.Cluster})
	}
	return out
}
