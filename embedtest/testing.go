package embedtest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// TestClient returns a new client to all members (see Client), closed when
// t's test and its subtests end. It fails t when the client cannot be
// made (the cluster is closed, a bad TLS setting).
func (c *Cluster) TestClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// LeakOptions returns the goleak options that ignore the background
// goroutines of etcd, gRPC and their logging that may outlive a closed
// Cluster, and nothing of the caller's: pass them to goleak.Find or
// goleak.VerifyTestMain after every Cluster and client is closed. Add
// goleak options of your own for other libraries.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/traceutil"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).Stop"),
		// etcd's own lock and election services (v3lock, v3election) run on
		// an in-process client of the server's, whose lease keepalive loops
		// start with the first Lock or Campaign RPC and are never stopped,
		// not even when the server stops: they are the server's, not a
		// leak of its clients'.
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).LeaseKeepAlive"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter.(*ls2lcServerStream).Recv"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter.(*ls2lcClientStream).Recv"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter.(*ls2lc).LeaseKeepAlive.func1"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/client/v3.(*lessor).deadlineLoop"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/client/v3.(*lessor).sendKeepAliveLoop"),
	}
}

// Context returns a context that ends after d, or when t's test and its
// subtests end (at t.Cleanup), whichever comes first: the bound of one
// wait of a test.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var nameSeq atomic.Int64

// UniqueName returns a name (a lock name, a key prefix) that no other call
// in the process returns: prefix, then t's name with its "/" made ".",
// then a sequence number, joined by "/", as in "test/TestLock.sub/7". Tests
// sharing a cluster that each use their own names cannot see each other's
// keys.
func UniqueName(t testing.TB, prefix string) string {
	return fmt.Sprintf("%s/%s/%d", prefix, strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1))
}
