package etcdlock_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// shared is the cluster of the package's non-destructive tests.
var shared *embedtest.Cluster

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child))
	}
	flag.Parse()
	// The parallel tests each start a cluster of their own and mostly wait.
	locktest.ParallelUnlessSet(4)
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		// A fuzzing worker runs only the fuzz targets, which need no cluster.
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := embedtest.New(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start shared cluster:", err)
		os.Exit(2)
	}
	shared = c
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close shared cluster:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(embedtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// mustLock locks m or fails the test.
func mustLock(t testing.TB, m *etcdlock.Mutex) *etcdlock.Lock {
	t.Helper()
	l, err := m.Lock(embedtest.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("lock %q: %v", m.Name(), err)
	}
	return l
}

// keysUnder returns the keys under a name's prefix.
func keysUnder(t testing.TB, cli *clientv3.Client, name string) []string {
	t.Helper()
	resp, err := cli.Get(embedtest.Context(t, 10*time.Second), layout.NamePrefix(name), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// noKeysLeft waits up to d until no name of names has a key on cli.
func noKeysLeft(t *testing.T, cli *clientv3.Client, d time.Duration, names ...string) {
	t.Helper()
	waitFor(t, d, fmt.Sprintf("no key of %q left", names), func() bool {
		for _, n := range names {
			if len(keysUnder(t, cli, n)) != 0 {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond every 20ms until it holds or d passes. It is for
// state held in etcd, where no event can be awaited from the test.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
