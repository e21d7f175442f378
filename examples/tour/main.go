// Command tour shows etcdlock's promises on a 3-member etcd cluster that it
// starts in this process: two sessions contend for one lock, the holder
// crashes, and the next holder gets the lock with a larger fencing token.
//
//	go run ./examples/tour
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tour:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	step("Starting a 3-member etcd cluster in this process")
	cluster, err := embedtest.New(ctx, embedtest.WithMembers(3))
	if err != nil {
		return err
	}
	defer cluster.Close()
	leader, err := cluster.WaitLeader(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("  members %v, leader %s\n", cluster.Endpoints(), leader.Name())

	// Each worker has its own client, as two processes would.
	aliceCli, err := cluster.Client()
	if err != nil {
		return err
	}
	defer aliceCli.Close()
	bobCli, err := cluster.Client()
	if err != nil {
		return err
	}
	defer bobCli.Close()

	const ttl = 3 * time.Second
	alice, err := etcdlock.NewSession(ctx, aliceCli, etcdlock.WithTTL(ttl), etcdlock.WithIdentity("alice"))
	if err != nil {
		return err
	}
	defer alice.Close()
	bob, err := etcdlock.NewSession(ctx, bobCli, etcdlock.WithTTL(ttl), etcdlock.WithIdentity("bob"))
	if err != nil {
		return err
	}
	defer bob.Close()

	const name = "billing/nightly"
	step("alice and bob both want lock %q", name)
	held, err := etcdlock.NewMutex(alice, name).Lock(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("  alice holds it, fencing token %d\n", held.Token())
	if _, err := etcdlock.NewMutex(bob, name).TryLock(ctx); errors.Is(err, etcdlock.ErrLocked) {
		fmt.Printf("  bob's TryLock: %v\n", err)
	} else {
		return fmt.Errorf("bob's TryLock should have failed, got %v", err)
	}

	type grant struct {
		lock *etcdlock.Lock
		err  error
		at   time.Time
	}
	bobs := make(chan grant, 1)
	go func() {
		l, err := etcdlock.NewMutex(bob, name).Lock(ctx)
		bobs <- grant{l, err, time.Now()}
	}()
	if err := waitWaiters(ctx, aliceCli, name, 1); err != nil {
		return err
	}
	if err := describe(ctx, aliceCli, name); err != nil {
		return err
	}

	// The resource alice writes to checks the token of every write.
	var fence etcdlock.Fence
	if err := fence.Admit(held.Token()); err != nil {
		return err
	}
	fmt.Printf("  the resource admits alice's write with token %d\n", held.Token())

	step("alice crashes: her client goes away without unlocking")
	crashed := time.Now()
	if err := aliceCli.Close(); err != nil {
		return err
	}
	g := <-bobs
	if g.err != nil {
		return g.err
	}
	fmt.Printf("  bob holds it %.1fs later (TTL %v), fencing token %d > %d\n",
		g.at.Sub(crashed).Seconds(), ttl, g.lock.Token(), held.Token())
	if err := fence.Admit(g.lock.Token()); err != nil {
		return err
	}
	fmt.Printf("  the resource admits bob's write with token %d\n", g.lock.Token())
	if err := fence.Admit(held.Token()); err != nil {
		fmt.Printf("  a late write from alice (token %d) is rejected: %v\n", held.Token(), err)
	} else {
		return errors.New("the fence admitted a stale token")
	}
	if err := describe(ctx, bobCli, name); err != nil {
		return err
	}

	step("bob unlocks")
	if err := g.lock.Unlock(ctx); err != nil {
		return err
	}
	fmt.Printf("  bob's lock context ended: %v\n", context.Cause(g.lock.Context()))
	if err := describe(ctx, bobCli, name); err != nil {
		return err
	}
	step("Done")
	return nil
}

func step(format string, args ...any) {
	fmt.Printf("\n== "+format+"\n", args...)
}

// waitWaiters waits until name has n waiters (the tour's own check; a
// program would not poll like this).
func waitWaiters(ctx context.Context, cli *clientv3.Client, name string, n int) error {
	for {
		st, err := etcdlock.Describe(ctx, cli, name)
		if err != nil {
			return err
		}
		if len(st.Waiters) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// describe prints who holds and who waits for name.
func describe(ctx context.Context, cli *clientv3.Client, name string) error {
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil {
		return err
	}
	if st.Holder == nil {
		fmt.Printf("  %q is free (revision %d)\n", name, st.Revision)
		return nil
	}
	fmt.Printf("  %q at revision %d:\n", name, st.Revision)
	for _, h := range st.Holders {
		fmt.Printf("    holder  %-6s token %-4d lease %x\n", h.Identity, h.Token, int64(h.Lease))
	}
	for _, w := range st.Waiters {
		fmt.Printf("    waiter  %-6s token %-4d lease %x\n", w.Identity, w.Token, int64(w.Lease))
	}
	return nil
}
