// Package locktest holds the helpers that the library's tests in other
// modules (tests, tests/compat, cmd/etcdlock) share and that embedtest
// cannot hold, since they use the library: embedtest does not import it.
// Only tests use this package; being internal, it is no part of the
// public API.
package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sessionTimeout bounds NewSession's wait for etcd: generous, for a busy
// machine under -race.
const sessionTimeout = 30 * time.Second

// OpenSession opens a session on cli with opts, closed when t's test and
// its subtests end. It fails t when the session cannot be opened.
func OpenSession(t testing.TB, cli *clientv3.Client, opts ...etcdlock.SessionOption) *etcdlock.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
