package main

import (
	"context"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// recipe is the kind of grant run takes: a Mutex (default), a Semaphore of
// --semaphore N, or an RWMutex's shared (--read) or exclusive (--write)
// grant. Every user of a name must use the same kind (and N).
type recipe struct {
	semaphore   int
	read, write bool
}

func (r *recipe) register(f *pflag.FlagSet) {
	f.IntVar(&r.semaphore, "semaphore", 0, "take one of N grants of a semaphore (at most N holders at once) instead of a mutex")
	f.BoolVar(&r.read, "read", false, "take a shared (reader) grant of a read-write lock")
	f.BoolVar(&r.write, "write", false, "take an exclusive (writer) grant of a read-write lock, the counterpart of --read")
}

func (r *recipe) check(cmd *cobra.Command) error {
	n := 0
	for _, on := range []bool{cmd.Flags().Changed("semaphore"), r.read, r.write} {
		if on {
			n++
		}
	}
	switch {
	case n > 1:
		return usagef(cmd, "--semaphore, --read and --write exclude each other")
	case cmd.Flags().Changed("semaphore") && r.semaphore < 1:
		return usagef(cmd, "--semaphore must be at least 1, not %d", r.semaphore)
	}
	return nil
}

// take waits for the grant (or, with try, takes it only if free).
func (r *recipe) take(ctx context.Context, s acquire.Session, name string, try bool) (*etcdlock.Lock, error) {
	k := acquire.Kind{}
	switch {
	case r.semaphore > 0:
		k = acquire.Kind{Name: "semaphore", N: r.semaphore}
	case r.read:
		k.Name = "read"
	case r.write:
		k.Name = "write"
	}
	return acquire.Take(ctx, s, name, k, try)
}
