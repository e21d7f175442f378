package etcdlock_test

// The examples of this file are compile-only copies of the ones in
// tests/etcdlock (example_test.go, example_holder_test.go,
// example_once_test.go), which run them against an embedded etcd cluster
// and check their output: this module cannot import embedtest. They are
// here so that the package's documentation shows them. Keep the two in
// step: each body here is the one there, with a client of a real cluster
// in place of the embedded one and without the Output comment
// (TestExamplesInStep in tests/etcdlock checks it).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func ExampleNewSession() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	ctx := context.Background()
	s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(5*time.Second), etcdlock.WithIdentity("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("identity:", s.Identity(), "ttl:", s.TTL())
	fmt.Println("valid for a while:", time.Until(s.ValidUntil()) > 4*time.Second)

	if err := s.Close(); err != nil { // revokes the lease: every lock of s is free at once
		log.Fatal(err)
	}
	fmt.Println("err after close:", s.Err())
}

func ExampleMutex() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	alice, err := etcdlock.NewSession(ctx, cli, etcdlock.WithIdentity("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer alice.Close()
	bob, err := etcdlock.NewSession(ctx, cli, etcdlock.WithIdentity("bob"))
	if err != nil {
		log.Fatal(err)
	}
	defer bob.Close()

	first, err := etcdlock.NewMutex(alice, "billing/nightly").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = etcdlock.NewMutex(bob, "billing/nightly").TryLock(ctx)
	fmt.Println("bob's TryLock while alice holds:", errors.Is(err, etcdlock.ErrLocked))

	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := etcdlock.NewMutex(bob, "billing/nightly").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("bob's token is larger:", second.Token() > first.Token())
	if err := second.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("cause after unlock:", context.Cause(second.Context()))
}

// A singleton worker: Run calls fn while this process holds the lock, and
// again after a loss. Here fn does one piece of work and returns nil, so
// Run releases and returns.
func ExampleMutex_Run() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
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
}

func ExampleElection_Run() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := etcdlock.NewSession(context.Background(), cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx, stop := context.WithCancel(context.Background())
	e := etcdlock.NewElection(s, "reports/leader")
	err = e.Run(ctx, "10.0.0.7:8080", func(ctx context.Context) error {
		l, _ := etcdlock.LeadershipFromContext(ctx)
		info, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		fmt.Println("leading as", info.Value, "with a fencing token:", l.Token() > 0)
		stop() // a deploy: Run resigns, so the next replica leads at once
		<-ctx.Done()
		return nil
	})
	fmt.Println("Run returned", err)
	_, err = e.Leader(context.Background())
	fmt.Println("leader after Run:", err)
}

// Two callers that name the same locks in opposite orders cannot deadlock:
// each LockAll enqueues all its keys in one transaction.
func ExampleLockAll() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
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
}

// Every machine's nightly job calls RunOnce with the day as its run id:
// whichever machine comes first runs the job, the others find it done.
func ExampleMutex_RunOnce() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
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
}
