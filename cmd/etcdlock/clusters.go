package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/shard"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (a *app) clustersCmd() *cobra.Command {
	var output string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "Show the clusters of a sharded deployment (--endpoints: its root)",
		Long: `Show each member cluster of the sharded deployment whose root cluster
--endpoints reaches: its endpoints, leader, generation, the slots the map gives
it, the names held there, its waiters, its leases, its raft commits per second
(the leader's applied index, read twice --interval apart) and the moves in
progress from or to it.

'clusters init' makes a deployment, 'clusters add' records a new cluster
(with no slots: give it some with 'etcdlock move'; its endpoints must answer
unless --force), 'clusters set-endpoints' changes a cluster's endpoints,
'clusters remove' removes one that has no slots and no move, 'clusters raise'
raises a cluster's generation (after restoring it from a snapshot).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, output, "table", "json"); err != nil {
				return err
			}
			if interval <= 0 {
				return usagef(cmd, "--interval must be positive, not %v", interval)
			}
			return a.clusters(output, interval)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how far apart the two reads of each leader's applied index are")
	cmd.AddCommand(a.clustersInitCmd(), a.clustersAddCmd(), a.clustersSetEndpointsCmd(), a.clustersRemoveCmd(), a.clustersRaiseCmd())
	return cmd
}

func (a *app) clusters(output string, interval time.Duration) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		r, err := a.mustShards(ctx, cli)
		if err != nil {
			return err
		}
		defer r.Close()
		states, err := r.ClusterStates(ctx)
		if err != nil {
			return exitf(exitUsage, "%s", libErr(err))
		}
		time.Sleep(interval) // the rate's window
		later := make([]uint64, len(states))
		for i, c := range states {
			if c.Err == nil {
				later[i] = leaderIndex(ctx, r, c.ID) // 0: no rate shown
			}
		}
		out := toClustersJSON(states, later, interval)
		if output == "json" {
			return a.printJSON(out)
		}
		return a.printClusters(out)
	})
}

// leaderIndex returns the applied raft index of cluster id's leader, 0
// when it is not known.
func leaderIndex(ctx context.Context, r *shard.Shards, id string) uint64 {
	cli, err := r.Client(ctx, id)
	if err != nil {
		return 0
	}
	_, index, _, _ := etcdx.LeaderStatus(ctx, cli)
	return index
}

// toClustersJSON is states with the commits per second from each leader's
// applied index then and later, interval apart.
func toClustersJSON(states []shard.ClusterState, later []uint64, interval time.Duration) []clusterJSON {
	out := make([]clusterJSON, 0, len(states))
	for i, c := range states {
		j := clusterJSON{ID: c.ID, Endpoints: c.Endpoints, Leader: c.Leader, Generation: c.Generation, Slots: c.Slots,
			Held: c.Held, Waiters: c.Waiters, Leases: c.Leases, Moving: c.Moving}
		if c.Err != nil {
			j.Error = errText(c.Err)
		} else if later[i] >= c.RaftIndex && c.RaftIndex > 0 {
			j.CommitsPerS = float64(later[i]-c.RaftIndex) / interval.Seconds()
		}
		out = append(out, j)
	}
	return out
}

func (a *app) printClusters(out []clusterJSON) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tENDPOINTS\tLEADER\tGENERATION\tSLOTS\tHELD\tWAITERS\tLEASES\tCOMMITS/S\tMOVING")
	for _, c := range out {
		moving := strings.Join(c.Moving, "; ")
		if c.Error != "" {
			moving = "error: " + c.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.0f\t%s\n", c.ID, strings.Join(c.Endpoints, ","), dash(c.Leader),
			c.Generation, c.Slots, c.Held, c.Waiters, c.Leases, c.CommitsPerS, dash(moving))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) clustersInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "init ID=ENDPOINT[,ENDPOINT...]...",
		Short: "Make the cluster at --endpoints the root of a sharded deployment",
		Long: `Record each cluster ID with its endpoints in the root cluster (the one
--endpoints reaches; it may be one of them), spread the 4096 slots over them in
equal runs, and write the slot map. It refuses a root that holds a map already.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			clusters := map[string][]string{}
			for _, arg := range args {
				id, eps, ok := strings.Cut(arg, "=")
				if !ok || id == "" || eps == "" {
					return usagef(cmd, "%q: want ID=ENDPOINT[,ENDPOINT...]", arg)
				}
				if _, dup := clusters[id]; dup {
					return usagef(cmd, "cluster id %q is given twice", id)
				}
				clusters[id] = strings.Split(eps, ",")
			}
			return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
				if err := shard.Create(ctx, cli, clusters, shard.WithDialer(a.dialMember)); err != nil {
					return exitf(exitUsage, "%s", libErr(err))
				}
				fmt.Fprintf(a.stdout, "created a sharded deployment of %d clusters\n", len(clusters))
				return nil
			})
		},
	}
}

func (a *app) clustersAddCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "add ID ENDPOINT[,ENDPOINT...]...",
		Short: "Record a new member cluster, with no slots",
		Long: `Record cluster ID with its endpoints in the root cluster, with no slots (give
it some with 'etcdlock move --to ID'). The endpoints must answer first (with
this command's TLS and credentials, within 5 s): a typo is refused, not
recorded. --force records endpoints that do not answer (a cluster still being
set up); the command then only warns.`,
		Args: endpointArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, eps := args[0], splitEndpoints(args[1:])
			return a.withShards(func(ctx context.Context, r *shard.Shards) error {
				if err := r.CheckEndpoints(ctx, eps); err != nil {
					if !force {
						return exitf(exitUsage, "%s (--force records them anyway)", plainErr(err))
					}
					a.logf("warning: %s; recording them anyway (--force)", plainErr(err))
				}
				if err := r.AddCluster(ctx, id, eps); err != nil {
					return exitf(exitUsage, "%s", libErr(err))
				}
				fmt.Fprintf(a.stdout, "added cluster %s (no slots yet: etcdlock move --slot S --to %s)\n", id, id)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "record the endpoints even if they do not answer")
	return cmd
}

func (a *app) clustersSetEndpointsCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "set-endpoints ID ENDPOINT[,ENDPOINT...]...",
		Short: "Change the endpoints the root records for a member cluster",
		Long: `Replace the endpoints the root records for cluster ID (its generation and
slots stay). Every client of the deployment follows the record: it moves its
connection to the new endpoints, and its sessions on that cluster live on
when they are the same cluster's. The endpoints must answer first (with this
command's TLS and credentials, within 5 s); --force records endpoints that do
not answer. Give endpoints of the same cluster: another cluster holds none of
its sessions' leases, so their grants would be lost as in an outage.`,
		Args: endpointArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, eps := args[0], splitEndpoints(args[1:])
			return a.withShards(func(ctx context.Context, r *shard.Shards) error {
				if err := r.CheckEndpoints(ctx, eps); err != nil {
					if !force {
						return exitf(exitUsage, "%s (--force records them anyway)", plainErr(err))
					}
					a.logf("warning: %s; recording them anyway (--force)", plainErr(err))
				}
				if err := r.SetEndpoints(ctx, id, eps); err != nil {
					return exitf(exitUsage, "%s", libErr(err))
				}
				fmt.Fprintf(a.stdout, "cluster %s: endpoints %s\n", id, strings.Join(eps, ","))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "record the endpoints even if they do not answer")
	return cmd
}

func (a *app) clustersRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member cluster that has no slots and no move",
		Long: `Delete the root's record of cluster ID. It is refused while the map gives the
cluster slots (move them away first with 'etcdlock move') or a move from or
to it is recorded (finish it with --resume, or --abort it). The cluster's own
data is not touched.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withShards(func(ctx context.Context, r *shard.Shards) error {
				if err := r.RemoveCluster(ctx, args[0]); err != nil {
					return exitf(exitUsage, "%s", libErr(err))
				}
				fmt.Fprintf(a.stdout, "removed cluster %s\n", args[0])
				return nil
			})
		},
	}
}

// endpointArgs wants ID and at least one ENDPOINT.
func endpointArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usagef(cmd, "missing ID")
	case len(args) == 1:
		return usagef(cmd, "missing ENDPOINT")
	}
	for _, ep := range splitEndpoints(args[1:]) {
		if ep == "" {
			return usagef(cmd, "an empty endpoint in %q", strings.Join(args[1:], " "))
		}
	}
	return nil
}

// splitEndpoints is the endpoints of args, each comma separated.
func splitEndpoints(args []string) []string {
	var eps []string
	for _, arg := range args {
		eps = append(eps, strings.Split(arg, ",")...)
	}
	return eps
}

// plainErr is a library error's text with its causes (errText would give
// only "no answer in time" for one that wraps a deadline).
func plainErr(err error) string {
	return strings.ReplaceAll(err.Error(), "etcdlock: ", "")
}

func (a *app) clustersRaiseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "raise ID",
		Short: "Raise a cluster's generation (after restoring it from a snapshot)",
		Long: `Raise the generation of cluster ID above every generation any cluster has
had, and re-stamp its slots with it, so its tokens are above every token it
granted before. Run it after restoring the cluster from a snapshot, before
clients use it again: its revisions start again below tokens it had granted.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
				r, err := a.mustShards(ctx, cli)
				if err != nil {
					return err
				}
				defer r.Close()
				g, err := r.RaiseGeneration(ctx, args[0])
				if err != nil {
					return exitf(exitUsage, "%s", libErr(err))
				}
				fmt.Fprintf(a.stdout, "cluster %s: generation %d\n", args[0], g)
				return nil
			})
		},
	}
}
