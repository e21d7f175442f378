package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (a *app) breakCmd() *cobra.Command {
	var force bool
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "break NAME (--force | --older-than D)",
		Short: "Delete the key of a lock's holder (an operator's last resort)",
		Long: `Delete the key of the current holder of the lock (or the leader of the
election) NAME, so that the next waiter gets it, and print what was deleted.
With several holders (a semaphore, readers of a read-write lock), every
current holder's key is deleted. The holder's lease is left alone, so its
other locks stay held.

The holder's process may still be running and believe it holds the lock: its
Lock.Context ends (and etcdlock run sends SIGTERM to its command) only once it
sees the deletion, and until then two processes may work at once. Only fencing
tokens at the resource protect against that. Check 'etcdlock status NAME'
first; break refuses to run without --force or --older-than.

With --older-than D, only a holder whose key entered the queue at least D
ago (by the clock of the client that wrote it, as status shows it) is
broken; a younger one, or one whose key does not say, is left alone.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName(cmd, name); err != nil {
				return err
			}
			switch {
			case cmd.Flags().Changed("older-than") && olderThan <= 0:
				return usagef(cmd, "--older-than must be positive, not %v", olderThan)
			case !force && olderThan == 0:
				return exitf(exitUsage, "refusing to break %q without --force or --older-than: its holder may still be running and believe it holds the lock (check with 'etcdlock status %s')", name, name)
			}
			return a.brk(name, olderThan)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really delete the holder's key")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "break only a holder that has been in the queue at least this long (no --force needed)")
	return cmd
}

// brk deletes the keys of name's current holders (with olderThan > 0,
// of those that entered the queue at least olderThan ago).
func (a *app) brk(name string, olderThan time.Duration) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		st, err := describeLock(ctx, cli, name)
		if err != nil {
			return err
		}
		if st.Holder == nil {
			return exitf(exitUsage, "%q has no holder: nothing to break", name)
		}
		broke := 0
		for _, h := range st.Holders {
			if olderThan > 0 && (h.Enqueued.IsZero() || time.Since(h.Enqueued) < olderThan) {
				a.logf("the holder of %q with token %d has been in the queue %s, less than --older-than %v: left alone",
					name, h.Token, inQueueText(toEntryJSON(h, nil)), olderThan)
				continue
			}
			ok, err := a.breakHolder(ctx, cli, name, h)
			if err != nil {
				return err
			}
			if ok {
				broke++
			}
		}
		if broke == 0 {
			return exitf(exitUsage, "%q: nothing was broken", name)
		}
		return nil
	})
}

// breakHolder deletes h's grant (etcdlock.Break: guarded by its token, so
// a later grant under the same key name is never touched) and says so; ok
// is false if h released it meanwhile.
func (a *app) breakHolder(ctx context.Context, cli *clientv3.Client, name string, h etcdlock.Entry) (ok bool, err error) {
	err = etcdlock.Break(ctx, cli, name, h.Token)
	switch {
	case errors.Is(err, etcdlock.ErrNotHeld):
		a.logf("the holder of %q with token %d released it meanwhile: nothing to break there", name, h.Token)
		return false, nil
	case err != nil:
		return false, exitf(exitUsage, "break %q: delete %s: %s", name, h.Key, errText(err))
	}
	fmt.Fprintf(a.stdout, "broke %q: deleted key %s (token %d, lease %s, identity %q); the lease was left alone\n",
		name, h.Key, h.Token, leaseHex(h.Lease), h.Identity)
	return true, nil
}
