package embedtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/etcdlock/etcdlock/embedtest"
)

// shared is one cluster for the tests that leave it healthy: the TestMain
// pattern the package documentation recommends.
var shared *embedtest.Cluster

// leakIgnores lists the process-wide background goroutines etcd and gRPC
// leave behind once every cluster and client is closed. With etcd v3.7.3 and
// grpc v1.83.2 there are none: goleak passes with no exception. (A client
// left open shows up as grpcsync.(*CallbackSerializer).run goroutines: that
// is a leak of the test, not of etcd.) Add goleak.IgnoreTopFunction entries
// here only for goroutines proven to belong to etcd or gRPC themselves.
var leakIgnores []goleak.Option

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := embedtest.New(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start shared cluster:", err)
		return 1
	}
	shared = c
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close shared cluster:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(leakIgnores...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left after Close:", err)
			code = 1
		}
	}
	return code
}
