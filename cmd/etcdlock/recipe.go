package main

import (
	"context"

	"github.com/etcdlock/etcdlock"
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
func (r *recipe) take(ctx context.Context, s *etcdlock.Session, name string, try bool) (*etcdlock.Lock, error) {
	switch {
	case r.semaphore > 0 && try:
		return etcdlock.NewSemaphore(s, name, r.semaphore).TryAcquire(ctx)
	case r.semaphore > 0:
		return etcdlock.NewSemaphore(s, name, r.semaphore).Acquire(ctx)
	case r.read && try:
		return etcdlock.NewRWMutex(s, name).TryRLock(ctx)
	case r.read:
		return etcdlock.NewRWMutex(s, name).RLock(ctx)
	case r.write && try:
		return etcdlock.NewRWMutex(s, name).TryLock(ctx)
	case r.write:
		return etcdlock.NewRWMutex(s, name).Lock(ctx)
	case try:
		return etcdlock.NewMutex(s, name).TryLock(ctx)
	}
	return etcdlock.NewMutex(s, name).Lock(ctx)
}
