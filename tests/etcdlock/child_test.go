package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// childEnv makes the test binary act as a client process that tests can
// SIGKILL or SIGSTOP, with ETCDLOCK_TEST_ENDPOINTS (comma separated),
// ETCDLOCK_TEST_NAME and ETCDLOCK_TEST_TTL:
//
//   - ETCDLOCK_TEST_CHILD=lock locks the name (with the lock-delay
//     ETCDLOCK_TEST_DELAY, if set), prints "HELD <token>" and waits to be
//     killed;
//   - ETCDLOCK_TEST_CHILD=lockall runs lockAllRounds on the names of
//     ETCDLOCK_TEST_NAME (comma separated, in that order) for
//     ETCDLOCK_TEST_ROUNDS rounds, and prints "DONE".
const childEnv = "ETCDLOCK_TEST_CHILD"

func runChild(mode string) int {
	if err := child(mode); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func child(mode string) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCDLOCK_TEST_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	ttl, err := time.ParseDuration(os.Getenv("ETCDLOCK_TEST_TTL"))
	if err != nil {
		return err
	}
	opts := []etcdlock.SessionOption{etcdlock.WithTTL(ttl), etcdlock.WithIdentity("child")}
	if d := os.Getenv("ETCDLOCK_TEST_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return err
		}
		opts = append(opts, etcdlock.WithLockDelay(delay))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, cli, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	switch mode {
	case "lock":
		l, err := etcdlock.NewMutex(s, os.Getenv("ETCDLOCK_TEST_NAME")).Lock(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("HELD %d\n", l.Token())
		select {} // until killed
	case "lockall":
		rounds, err := strconv.Atoi(os.Getenv("ETCDLOCK_TEST_ROUNDS"))
		if err != nil {
			return err
		}
		if err := lockAllRounds(ctx, s, strings.Split(os.Getenv("ETCDLOCK_TEST_NAME"), ","), rounds, nil); err != nil {
			return err
		}
		fmt.Println("DONE")
		return nil
	}
	return fmt.Errorf("unknown child mode %q", mode)
}
