package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/shard"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (a *app) statusCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show the holder and the waiters of a lock",
		Long: `Show the holder(s) and the waiters of the lock (or election) NAME, in grant
order, with their fencing token, lease, identity and the time left on their
lease, read in one linearizable request (plus one TimeToLive per lease).

HELD is how long a holder has held the lock, IN QUEUE how long its key has
been in the queue (both by the clock of the client that wrote the key). TTL
LEFT is etcd's count: a healthy session renews every TTL/3 (etcdlock run:
TTL/10), so a holder's dips to about two thirds of the TTL between renewals.
A name used with run --once also shows its last completed run. LOCK-DELAY
(shown when a key has one) is the session's lock-delay (run --lock-delay): if
it is lost while holding, the lock passes on only that long after.

At the root of a sharded deployment, status reads NAME on the cluster its
slot is on and says which (with the slot and its generation), and whether a
move holds the slot: while the slot's stamp there is frozen, acquisitions
wait until the move ends (-o json: "moving").`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNameAndOutput(cmd, args[0], output, "table", "json"); err != nil {
				return err
			}
			return a.status(args[0], output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// status prints the holders and waiters of name.
func (a *app) status(name, output string) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		out, err := a.routedStatus(ctx, cli, name)
		if err != nil {
			return err
		}
		if output == "json" {
			return a.printJSON(out)
		}
		return a.printStatus(name, out)
	})
}

// routedStatus is statusOf on the cluster that holds name: cli's, or in a
// sharded deployment whose root is cli, the one its slot is on (and then
// it says where).
func (a *app) routedStatus(ctx context.Context, root *clientv3.Client, name string) (statusJSON, error) {
	r, ok, err := a.openShards(ctx, root)
	if err != nil || !ok {
		if err != nil {
			return statusJSON{}, err
		}
		// At a member, "free" may only mean that the map puts the name
		// elsewhere: refused, as run is.
		if err := a.refuseMember(ctx, root, "status"); err != nil {
			return statusJSON{}, err
		}
		return statusOf(ctx, root, name)
	}
	defer r.Close()
	return shardedStatus(ctx, r, name)
}

// shardedStatus is statusOf on the cluster of r that name's slot is on,
// saying where, and whether a move holds the slot (status, and serve's
// /v1/state).
func shardedStatus(ctx context.Context, r *shard.Shards, name string) (statusJSON, error) {
	where, cli, err := r.Where(ctx, name)
	if err != nil {
		return statusJSON{}, exitf(exitUsage, "%s", libErr(err))
	}
	out, err := statusOf(ctx, cli, name)
	out.Cluster, out.Slot, out.Generation = where.Cluster, &where.Slot, where.Generation
	out.Moving = movingOf(r, where)
	return out, err
}

// movingOf is the slot's move as r's map watch last saw it, with the
// slot's stamp on where's cluster; nil when no move is recorded and the
// stamp is active.
func movingOf(r *shard.Shards, where shard.Placement) *lockjson.Moving {
	mi, moving := r.Moving(where.Slot)
	if !moving && where.Stamp == "active" {
		return nil
	}
	m := &lockjson.Moving{Stamp: where.Stamp, AcquisitionsWait: where.Stamp != "active"}
	if m.Stamp == "" {
		m.Stamp = "none"
	}
	if moving {
		m.From, m.To, m.Owner = mi.From, mi.To, mi.Owner
		m.Started = mi.Started.UTC().Format(time.RFC3339)
	}
	return m
}

// printMoving says what a move does to the name's slot (status).
func (a *app) printMoving(out statusJSON) {
	m := out.Moving
	if m == nil {
		return
	}
	if m.From != "" {
		fmt.Fprintf(a.stdout, "slot %d is moving from %s to %s (started %s by %s)\n", *out.Slot, m.From, m.To, m.Started, m.Owner)
	}
	if m.AcquisitionsWait {
		fmt.Fprintf(a.stdout, "slot %d's stamp on %s is %s: acquisitions wait until the move ends\n", *out.Slot, out.Cluster, m.Stamp)
	} else {
		fmt.Fprintf(a.stdout, "slot %d's stamp on %s is still active: the move has not frozen it yet\n", *out.Slot, out.Cluster)
	}
}

// statusOf reads the status of name (status, and serve's /v1/state).
func statusOf(ctx context.Context, cli *clientv3.Client, name string) (statusJSON, error) {
	st, err := describeLock(ctx, cli, name)
	if err != nil {
		return statusJSON{}, err
	}
	ttls, err := leaseTTLs(ctx, cli, name, st)
	if err != nil {
		return statusJSON{}, err
	}
	out := toStatusJSON(st, ttls)
	switch c, ok, err := etcdlock.LastCompletion(ctx, cli, name); {
	case ok:
		out.LastRun = lockjson.FromCompletion(c)
	case err != nil && !strings.Contains(errText(err), "permission denied"):
		// (A role may cover the name's queue and not its record.)
		return statusJSON{}, exitf(exitUsage, "%s", libErr(err))
	}
	return out, nil
}

// describeLock is etcdlock.Describe with etcdlock's error.
func describeLock(ctx context.Context, cli *clientv3.Client, name string) (*etcdlock.LockState, error) {
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil {
		return nil, exitf(exitUsage, "%s", libErr(err))
	}
	return st, nil
}

// leaseTTLs returns the time left on the lease of every holder and waiter
// of st, in seconds, -1 for a lease that is gone.
func leaseTTLs(ctx context.Context, cli *clientv3.Client, name string, st *etcdlock.LockState) (map[clientv3.LeaseID]int64, error) {
	ttls := map[clientv3.LeaseID]int64{}
	for _, e := range append(append([]etcdlock.Entry(nil), st.Holders...), st.Waiters...) {
		if _, ok := ttls[e.Lease]; ok {
			continue
		}
		resp, err := cli.TimeToLive(ctx, e.Lease)
		switch {
		case err != nil && etcdx.IsLeaseNotFound(err):
			ttls[e.Lease] = -1
		case err != nil:
			return nil, exitf(exitUsage, "lease %s of %q: %s", leaseHex(e.Lease), name, errText(err))
		default:
			ttls[e.Lease] = resp.TTL
		}
	}
	return ttls, nil
}

// printStatus prints the status of name as a heading and a table, with
// MODE, LOCK-DELAY and VALUE columns only if some entry has one.
func (a *app) printStatus(name string, out statusJSON) error {
	if r := out.LastRun; r != nil {
		defer fmt.Fprintf(a.stdout, "last completed run (--once): %q, recorded %s by %q with token %d\n", r.ID, r.At, r.Identity, r.Token)
	}
	if out.Cluster != "" {
		fmt.Fprintf(a.stdout, "%q lives on cluster %s (slot %d, generation %d)\n", name, out.Cluster, *out.Slot, out.Generation)
		a.printMoving(out)
	}
	if out.Holder == nil {
		fmt.Fprintf(a.stdout, "%q is free (revision %d)\n", name, out.Revision)
		return nil
	}
	fmt.Fprintf(a.stdout, "%q (%s) at revision %d: %s, %s\n", name, kindText(*out.Holder), out.Revision,
		plural(len(out.Holders), "holder"), plural(len(out.Waiters), "waiter"))
	all := append(append([]entryJSON(nil), out.Holders...), out.Waiters...)
	var with columns
	for _, e := range all {
		with.mode = with.mode || e.Mode != ""
		with.value = with.value || e.Value != ""
		with.delay = with.delay || e.LockDelay != nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	cols := []string{"ROLE", "TOKEN", "LEASE", "TTL LEFT", "HELD", "IN QUEUE", "IDENTITY"}
	if with.mode {
		cols = append(cols, "MODE")
	}
	if with.delay {
		cols = append(cols, "LOCK-DELAY")
	}
	if with.value {
		cols = append(cols, "VALUE")
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for i, e := range all {
		fmt.Fprintln(tw, strings.Join(statusRow(e, i < len(out.Holders), with), "\t"))
	}
	return tw.Flush()
}

// columns says which optional columns status's table has.
type columns struct{ mode, delay, value bool }

// statusRow is e's row of status's table.
func statusRow(e entryJSON, holder bool, with columns) []string {
	role := "waiter"
	if holder {
		role = "holder"
	}
	ttl := "gone"
	if e.LeaseTTLLeft != nil && *e.LeaseTTLLeft >= 0 {
		ttl = fmt.Sprintf("%ds", *e.LeaseTTLLeft)
	}
	row := []string{role, fmt.Sprint(e.Token), e.Lease, ttl, heldText(e), inQueueText(e), e.Identity}
	if with.mode {
		row = append(row, e.Mode)
	}
	if with.delay {
		row = append(row, secondsText(e.LockDelay))
	}
	if with.value {
		row = append(row, fmt.Sprintf("%q", e.Value))
	}
	return row
}
