package etcdlock_test

// The examples of this file have compile-only copies in the library's
// package (example_recipes_test.go at the root), so that its documentation
// shows them: keep the two in step (TestExamplesInStep checks it).

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/etcdlock/etcdlock"
)

// Every machine's nightly job calls RunOnce with the day as its run id:
// whichever machine comes first runs the job, the others find it done.
func ExampleMutex_RunOnce() {
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	for _, machine := range []string{"host-a", "host-b"} {
		s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithIdentity(machine))
		if err != nil {
			log.Fatal(err)
		}
		err = etcdlock.NewMutex(s, "billing/nightly").RunOnce(ctx, "2026-12-02", func(ctx context.Context, l *etcdlock.Lock) error {
			fmt.Println(machine, "runs the job")
			return nil // a job that writes shared state sends l.Token() with its writes
		})
		switch {
		case errors.Is(err, etcdlock.ErrAlreadyCompleted):
			fmt.Println(machine, "finds it done")
		case err != nil:
			log.Fatal(err)
		}
		if err := s.Close(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// host-a runs the job
	// host-b finds it done
}
