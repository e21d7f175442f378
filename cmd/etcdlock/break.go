package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (a *app) breakCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "break NAME --force",
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
first; break refuses to run without --force.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName(cmd, name); err != nil {
				return err
			}
			if !force {
				return exitf(exitUsage, "refusing to break %q without --force: its holder may still be running and believe it holds the lock (check with 'etcdlock status %s')", name, name)
			}
			return a.brk(name)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really delete the holder's key")
	return cmd
}

// brk deletes the keys of name's current holders.
func (a *app) brk(name string) error {
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
