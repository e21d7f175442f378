package serve

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// shared is the one-member cluster of the package's tests that neither
// count the cluster's leases nor stop its member; a test that does starts
// a cluster of its own (startTestServer).
var shared *embedtest.Cluster

func TestMain(m *testing.M) {
	if arg := os.Getenv(benchClientEnv); arg != "" {
		os.Exit(benchClient(arg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := embedtest.New(ctx, embedtest.WithMembers(1))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the shared cluster:", err)
		os.Exit(2)
	}
	shared = c
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close the shared cluster:", err)
		code = 1
	}
	os.Exit(code)
}

// sharedServer starts a server of cfg on TCP over the shared cluster,
// stopped at cleanup, and returns its address.
func sharedServer(tb testing.TB, cfg Config) string {
	tb.Helper()
	_, addr := serveOn(tb, shared.TestClient(tb), cfg)
	return addr
}
