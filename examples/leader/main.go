// Command leader runs three replicas of a service that elect a leader with
// etcdlock's Election.Run, on a 3-member etcd cluster that it starts in this
// process. The leader writes to a fenced store; its etcd lease is then
// revoked (as if it had crashed or been paused), and another replica takes
// over with a larger fencing token while the old leader's writes are
// rejected.
//
//	go run ./examples/leader
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
)

const election = "reports/leader"

func main() {
	// Ctrl-C (or SIGTERM) ends the example at once: run's defers stop the
	// replicas and the in-process cluster (and remove its data) first.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		fmt.Fprintln(os.Stderr, "leader: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

// store is the protected resource: it admits a write only with a token no
// lower than any it has seen.
type store struct {
	fence etcdlock.Fence
	mu    sync.Mutex
	log   []string
}

func (st *store) write(tok etcdlock.Token, who string) error {
	if err := st.fence.Admit(tok); err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.log = append(st.log, fmt.Sprintf("%s@%d", who, tok))
	return nil
}

func run(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, 2*time.Minute)
	defer cancel()
	cluster, err := embedtest.New(ctx)
	if err != nil {
		return err
	}
	defer cluster.Close()
	fmt.Println("cluster up:", cluster.Endpoints())

	var st store
	terms := make(chan string, 16) // "X leads ..."
	stops := make(chan string, 16) // "X stops leading: cause"
	const replicas = 3
	rctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	sessions := make([]*etcdlock.Session, replicas)
	for i := 0; i < replicas; i++ {
		cli, err := cluster.Client()
		if err != nil {
			return err
		}
		defer cli.Close()
		name := fmt.Sprintf("replica-%d", i)
		s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(5*time.Second), etcdlock.WithIdentity(name))
		if err != nil {
			return err
		}
		defer s.Close()
		sessions[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := etcdlock.NewElection(s, election).Run(rctx, name, func(lctx context.Context) error {
				l, _ := etcdlock.LeadershipFromContext(lctx)
				terms <- fmt.Sprintf("%s leads with token %d", name, l.Token())
				for {
					if err := st.write(l.Token(), name); errors.Is(err, etcdlock.ErrStaleToken) {
						// A newer leader has written: this one lost leadership
						// and may not have been told yet (a lease can expire,
						// or be revoked, before its holder hears of it). The
						// store's token check is what stops this write.
						stops <- fmt.Sprintf("%s stops leading: its write was rejected: %v", name, err)
						return nil
					} else if err != nil {
						return err
					}
					select {
					case <-lctx.Done():
						stops <- fmt.Sprintf("%s stops leading: %v", name, context.Cause(lctx))
						return nil
					case <-time.After(50 * time.Millisecond):
					}
				}
			})
			if err != nil {
				fmt.Printf("  %s: Run: %v\n", name, err)
			}
		}()
	}

	first := <-terms
	fmt.Println(first)
	obs := etcdlock.NewElection(sessions[0], election)
	info, err := obs.Leader(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("the leader is %q (identity %s, lease %x)\n", info.Value, info.Identity, int64(info.Lease))

	fmt.Println("revoking the leader's lease, as if it crashed...")
	cli := sessions[0].Client()
	if _, err := cli.Revoke(ctx, info.Lease); err != nil {
		return err
	}
	fmt.Println(<-stops) // the old leader learns of its loss from its own key's deletion
	fmt.Println(<-terms)
	if err := st.write(info.Token, info.Value+" (late)"); errors.Is(err, etcdlock.ErrStaleToken) {
		fmt.Printf("a late write from the old leader is rejected: %v\n", err)
	} else {
		return fmt.Errorf("stale write was not rejected: %v", err)
	}

	fmt.Println("stopping every replica: each resigns on the way out")
	stopAll()
	wg.Wait()
	close(stops)
	for msg := range stops {
		fmt.Println(msg)
	}
	st.mu.Lock()
	fmt.Printf("the store took %d writes, highest token %d\n", len(st.log), st.fence.Highest())
	st.mu.Unlock()
	return nil
}
