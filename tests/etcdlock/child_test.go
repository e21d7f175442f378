package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// childEnv makes the test binary act as a client process that tests can
// SIGKILL or SIGSTOP: ETCDLOCK_TEST_CHILD=lock, with ETCDLOCK_TEST_ENDPOINTS
// (comma separated), ETCDLOCK_TEST_NAME and ETCDLOCK_TEST_TTL. It locks the
// name, prints "HELD <token>" and waits to be killed.
const childEnv = "ETCDLOCK_TEST_CHILD"

func runChild(mode string) int {
	if mode != "lock" {
		fmt.Fprintln(os.Stderr, "unknown child mode", mode)
		return 2
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCDLOCK_TEST_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ttl, err := time.ParseDuration(os.Getenv("ETCDLOCK_TEST_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(ttl), etcdlock.WithIdentity("child"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := etcdlock.NewMutex(s, os.Getenv("ETCDLOCK_TEST_NAME")).Lock(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("HELD %d\n", l.Token())
	select {} // until killed
}
