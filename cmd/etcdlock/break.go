package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
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

With --older-than D, only a holder that has held the lock at least D (as
status shows it in HELD: since its grant, by the clock of its client, not
since it entered the queue) is broken; one granted more recently, or one
whose key does not say when, is left alone.`,
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
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "break only a holder that has held the lock at least this long (no --force needed)")
	return cmd
}

// brk deletes the keys of name's current holders (with olderThan > 0,
// of those that have held at least olderThan).
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
			if olderThan > 0 {
				held, why := heldFor(ctx, cli, name, h)
				if why != "" || held < olderThan {
					if why == "" {
						why = fmt.Sprintf("has held it %s, less than --older-than %v", held.Round(100*time.Millisecond), olderThan)
					}
					a.logf("the holder of %q with token %d %s: left alone", name, h.Token, why)
					continue
				}
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

// heldFor says how long h has held name, or why that is not known (a key
// of an older version, a stamp not written yet, a history compacted away).
// A holder granted after a wait has a grant stamp (Entry.Stamped); one
// without was either granted as it entered the queue, then its Granted
// (Enqueued) is right, or granted a moment ago with its stamp still on its
// way. Which one, the queue at the key's create revision says.
func heldFor(ctx context.Context, cli *clientv3.Client, name string, h etcdlock.Entry) (held time.Duration, why string) {
	switch {
	case h.Granted.IsZero():
		return 0, "does not say when it was granted (an older version of etcdlock)"
	case h.Stamped:
		return time.Since(h.Granted), ""
	}
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		return 0, err.Error()
	}
	prefix := layout.NamePrefix(name)
	rev := int64(h.Token)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithMaxCreateRev(rev))
	if err != nil {
		return 0, fmt.Sprintf("was granted at a time that cannot be told (reading the queue as it entered: %s)", errText(err))
	}
	for _, e := range etcdlock.StateOf(name, resp.Kvs, rev).Holders {
		if e.Token == h.Token {
			return time.Since(h.Granted), "" // granted as it entered the queue
		}
	}
	return 0, "was granted a moment ago (its grant stamp is not written yet)"
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
