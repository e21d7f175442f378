package embedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/embedtest"
)

// Generous bounds for awaiting events on a busy 2-core machine under -race.
const (
	awaitTimeout   = 45 * time.Second
	attemptTimeout = 3 * time.Second
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), awaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// eventually calls f, each time with a context bounded by attemptTimeout,
// until it returns nil; it fails the test when ctx ends first.
func eventually(t *testing.T, ctx context.Context, what string, f func(ctx context.Context) error) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := f(actx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still failing when the wait ended: %v", what, err)
		case <-tick.C:
		}
	}
}

func client(t *testing.T, newClient func() (*clientv3.Client, error)) *clientv3.Client {
	t.Helper()
	cli, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func waitLeader(t *testing.T, ctx context.Context, c *embedtest.Cluster) *embedtest.Member {
	t.Helper()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func follower(t *testing.T, c *embedtest.Cluster, leader *embedtest.Member) *embedtest.Member {
	t.Helper()
	for _, m := range c.Members() {
		if m != leader {
			return m
		}
	}
	t.Fatal("no follower")
	return nil
}

// serializableValue reads key from the member behind cli without consensus.
func serializableValue(ctx context.Context, cli *clientv3.Client, key string) (string, error) {
	r, err := cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", errors.New("key not found")
	}
	return string(r.Kvs[0].Value), nil
}

func wantValue(ctx context.Context, cli *clientv3.Client, key, want string) error {
	got, err := serializableValue(ctx, cli, key)
	if err != nil {
		return err
	}
	if got != want {
		return errors.New("value " + got + ", want " + want)
	}
	return nil
}
