package etcdlock_test

// The examples of this file have compile-only copies in the library's
// package (example_recipes_test.go at the root), so that its documentation
// shows them: keep the two in step (TestExamplesInStep checks it).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
)

// startCluster starts an in-process etcd cluster for the examples; a real
// program connects clientv3 to its own cluster instead.
func startCluster() *embedtest.Cluster {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := embedtest.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func ExampleNewSession() {
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
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
	// Output:
	// identity: worker-1 ttl: 5s
	// valid for a while: true
	// err after close: etcdlock: session closed
}

func ExampleMutex() {
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
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
	// Output:
	// bob's TryLock while alice holds: true
	// bob's token is larger: true
	// cause after unlock: etcdlock: released
}

func ExampleElection_Run() {
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
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
	// Output:
	// leading as 10.0.0.7:8080 with a fencing token: true
	// Run returned <nil>
	// leader after Run: etcdlock: leader "reports/leader": no leader
}
