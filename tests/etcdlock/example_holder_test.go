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

// A singleton worker: Run calls fn while this process holds the lock, and
// again after a loss. Here fn does one piece of work and returns nil, so
// Run releases and returns.
func ExampleMutex_Run() {
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	s, err := etcdlock.NewSession(ctx, cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	m := etcdlock.NewMutex(s, "reports/compactor")
	err = m.Run(ctx, func(ctx context.Context, l *etcdlock.Lock) error {
		fmt.Println("holding; token > 0:", l.Token() > 0)
		// Locking the same name again from inside fn could only wait
		// behind this grant: it fails at once instead.
		_, err := m.Lock(ctx)
		fmt.Println("nested lock:", errors.Is(err, etcdlock.ErrWouldDeadlock))
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// holding; token > 0: true
	// nested lock: true
	// run: <nil>
}

// Two callers that name the same locks in opposite orders cannot deadlock:
// each LockAll enqueues all its keys in one transaction.
func ExampleLockAll() {
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	s, err := etcdlock.NewSession(ctx, cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ls, err := etcdlock.LockAll(ctx, s, "db/orders", "db/billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("one token:", ls.Lock("db/orders").Token() == ls.Lock("db/billing").Token())
	_, err = etcdlock.TryLockAll(ctx, s, "db/billing", "db/orders")
	fmt.Println("try while held:", errors.Is(err, etcdlock.ErrLocked))
	if err := ls.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	ls, err = etcdlock.TryLockAll(ctx, s, "db/billing", "db/orders")
	fmt.Println("try when free:", err)
	_ = ls.Unlock(ctx)
	// Output:
	// one token: true
	// try while held: true
	// try when free: <nil>
}
